"""`reasoning_gym_team`: CCPO's Think-Reason dyad on reasoning-gym's generated questions (#46).

The tasks, splits, tiers and scoring are `reasoning_gym`'s (envs/benchmarks/reasoning_gym.py: the
package's generators, seeded on this machine, nothing downloaded; each answer scored by its
generator's own `score_answer`). Two roles, as `paper_math_team` on the papers' data [I: the prompts
are ours]: the **Thinker** sees the question and writes guidance (`thinker_instruction`: the key idea,
not the answer); the **Solver** sees the question, the guidance and `instruction`, and answers
between `<answer>` and `</answer>`. The team's reward is the Solver's score.

Variants, as `thinker_solver`'s and `paper_math_team`'s: `main` (Thinker, then Solver), `solo` (the
Solver alone, the guidance "(none)": CCPO's counterfactual), `empty_guidance` (the Thinker writes, the
Solver gets "(none)") and `paired` (the Solver alone first, then the Thinker, then the Solver again in
a fresh context; `info` has `solo_correct`, `joint_correct`, `help`, `hurt`, `contribution`). Every
episode the Thinker played has `msg_silent` and `msg_chars`.

The demonstrator Solver writes the ground-truth answer (as `reasoning_gym`'s); the demonstrator Thinker
stays silent (the generators give no worked solution to quote), so a warm start on its plays teaches
the Solver the format and the Thinker nothing.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from common.episode import Event
from envs.api.base import EpisodeState, Observation, StepResult
from envs.benchmarks.reasoning_gym import OPEN, ReasoningGymConfig, ReasoningGymEnv, score_action

THINKER, SOLVER = "thinker", "solver"
NO_GUIDANCE = "(none)"
PLANS = {"main": [THINKER, SOLVER], "solo": [SOLVER], "empty_guidance": [THINKER, SOLVER],
         "paired": [SOLVER, THINKER, SOLVER]}


@dataclass
class ReasoningGymTeamConfig(ReasoningGymConfig):
    name: str = "reasoning_gym_team"
    thinker_instruction: str = ("You are the Thinker of a two-agent team. Write brief guidance for the "
                                "Solver: the key idea and the steps to take. Do not give the final answer.")


class ReasoningGymTeamEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], env: ReasoningGymTeamEnv, variant: str):
        self.task, self.env, self.variant = task, env, variant
        self.plan = PLANS[variant]
        self.turn = 0
        self.message: str | None = None  # the Thinker's guidance, once written
        self.solo_correct: bool | None = None

    def _observation(self) -> Observation:
        q, c = self.task["question"].rstrip(), self.env.cfg
        if self.plan[self.turn] == THINKER:
            return Observation(THINKER, f"{q}\n\n{c.thinker_instruction}")
        shown = self.message if self.variant in ("main", "paired") and self.turn > 0 else None
        guidance = shown.strip() if shown and shown.strip() else NO_GUIDANCE
        return Observation(SOLVER, f"{q}\n\nGuidance from the Thinker:\n{guidance}\n\n{c.instruction}",
                           new_context=self.turn > 0)

    def start(self) -> Observation:
        return self._observation()

    def expert_action(self) -> str:
        if self.turn < len(self.plan) and self.plan[self.turn] == THINKER:
            return ""
        return f"{OPEN}{self.task['answer']}"  # the stop string `</answer>` closes it

    def step(self, action: str) -> StepResult:
        if self.turn >= len(self.plan):
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        role, index = self.plan[self.turn], self.turn
        self.turn += 1
        if role == THINKER:
            self.message = action
            return StepResult(self._observation())
        result = score_action(self.env, self.task, action, index)
        if self.variant == "paired" and self.solo_correct is None:
            self.solo_correct = result.success
            return StepResult(self._observation())
        info = dict(result.info)
        if self.message is not None:
            info.update(msg_silent=not self.message.strip(), msg_chars=len(self.message.strip()))
        if self.variant == "paired":
            solo, joint = bool(self.solo_correct), result.success
            info.update(solo_correct=solo, joint_correct=joint, help=joint and not solo,
                        hurt=solo and not joint, contribution=float(joint) - float(solo))
        return StepResult(None, reward=result.reward, success=result.success, events=result.events, info=info)


class ReasoningGymTeamEnv(ReasoningGymEnv):
    """A Thinker's guidance, then the Solver's answer, on reasoning_gym's tasks."""

    name = "reasoning_gym_team"
    roles = (THINKER, SOLVER)
    offers = frozenset({"multi_agent_shared_outcome", "two_role_dialogue"})  # envs/api/features.py
    config_class = ReasoningGymTeamConfig

    def __init__(self, cfg: ReasoningGymTeamConfig):
        super().__init__(cfg)
        self.cfg: ReasoningGymTeamConfig = cfg

    def variants(self) -> tuple[str, ...]:
        return tuple(PLANS)

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant not in PLANS:
            raise ValueError(f"{self.name} has no episode variant {variant!r}; it has {self.variants()}")
        return ReasoningGymTeamEpisode(task, self, variant)

    def provenance(self) -> dict[str, Any]:
        return {**super().provenance(), "roles": list(self.roles)}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """Thinker: silent or a generic hint; Solver: `<answer><n>`."""
        if obs.role == THINKER:
            return rng.choice(["", "Add the numbers.", "Work from left to right."])
        return super().random_action(state, obs, rng)
