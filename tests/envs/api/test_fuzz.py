"""Every environment survives hostile action text (`envs.api.fuzz`): `step` never raises, episodes end,
results are well-formed.

Each environment of `ENVS` is fuzzed at its defaults and in the modes that change its rules
(`SETTINGS`), every role included, with the near misses of the testbeds' syntax (`WORDS`); each
episode must end within the turns `TURN_CAPS` states for its task.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable
from typing import Any

import pytest

from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.api.fuzz import fuzz
from envs.benchmarks.paper_math.samples import sample_data
from envs.registry import ENVS
from envs.testbeds.chain_tasks import DAYS, ITEMS, NAMES, task_steps
from envs.testbeds.toolplan import ATTRIBUTES, TOOLS

WORDS = (*ITEMS, *NAMES, *DAYS, *ATTRIBUTES, *TOOLS)  # the fake calls' words: the testbeds' own

# Environment settings played (every environment at its defaults, plus the modes that change its rules).
SETTINGS: dict[str, list[dict[str, Any]]] = {
    "arith": [{"mode": "single"}, {"mode": "stepwise", "max_ops": 4},
              # a train pool with every defect (env_pool_with_audit)
              {"share_reject": 0.2, "share_unsolvable": 0.2, "share_weak": 0.2, "share_first_number": 0.2}],
    "chain_tasks": [{}, {"busy_rate": 0.5, "fault_rate": 0.5, "demo_slip": 0.5}],
    "toolplan": [{"k": 2}, {"k": 5}],
    "toolhops": [{"k": 2}, {"k": 5, "classes": 8},
                 {"mode": "parallel", "k": 3, "extra_workers": 3, "classes": 1}],
    "thinker_solver": [{}, {"question": "sum", "see_probs": [0.1, 0.5, 0.9], "follow_known": 0.3,
                            "cost_per_char": 0.0},
                       {"tasks": "arith", "min_ops": 2, "max_ops": 4, "max_value": 20}],
    "voting": [{}],
    "reasoning_gym": [{}, {"untagged": "last_number"}],
    "reasoning_gym_team": [{"untagged": "last_number", "train_generators": ["chain_sum"],
                            "heldout_generators": ["basic_arithmetic"]}],
    "humaneval": [{}],
    "bfcl": [{"max_steps_per_turn": 2}, {"categories": ["miss_func", "long_context"], "max_steps_per_turn": 2,
                                         "docs": "signatures", "max_result_chars": 200, "demo_slip": 0.5}],
    # retail (its database copies in ~0.04 s; airline's in ~0.25 s) and short conversations: an episode
    # copies it at its first tool call
    "tau2": [{"domains": ["retail"], "dev_size": 4, "max_messages": 2, "tool_docs": "signatures",
              "demo_slip": 0.5}],
    "textworld": [{"max_steps": 6, "quest_lengths": [1, 3], "demo_slip": 0.5, "dev_size": 2},
                  # families (SkillRise's chains): solver and curator, the curate variant; 12 two-game
                  # families
                  {"families": True, "quest_lengths": [1, 2], "max_steps": 5, "demo_slip": 0.5, "dev_size": 2,
                   "invalid_penalty": 0.5}],
    # one JVM per live episode, ~0.1 s per command: two short task types, two commands per episode
    "scienceworld": [{"task_names": ["lifespan-shortest-lived", "find-plant"], "max_steps": 2, "dev_size": 2,
                      "demo_slip": 0.5}],
    # hand-written rows in GSM8K's and MATH's published layouts (envs/benchmarks/paper_math/samples.py)
    "paper_math": [{"path": sample_data(), "dev_size": 4}],
    "paper_math_team": [{"path": sample_data(), "train": ["math"], "heldout": ["math500", "aime24"],
                         "dev_size": 4}],
    "service_desk": [{"delays": [0, 2, 4]},
                     {"delays": [8], "slack": 0, "demo_trap": 0.9, "demo_repeat": 0.9},
                     {"setting": "choice", "delays": [0, 8], "human_rate": 0.0},
                     {"share_weak": 0.3, "share_reject": 0.3, "share_unsolvable": 0.3}],  # a defective pool
    "braid": [{}, {"demo_error": 1.0}],
    # the simulated shell (the real sandbox runs each command in bubblewrap, ~30 ms: its hostile commands
    # are tested one by one in test_terminal.py)
    "terminal": [{"backend": "sim"},
                 {"backend": "sim", "max_turns": 4, "demo_loop": 1.0, "demo_shortcut": 0.5}],
    "skill_families": [{}, {"order_length": 3, "min_plan": 1, "distractors": 2, "max_misses": 0,
                            "demo_slip": 0.5}],
}
# hostile actions per setting beyond the every-string-at-every-turn pass (humaneval runs each action
# in the real sandbox, ~50 ms: its hostile programs are tested one by one in test_sandbox/test_humaneval)
MIXTURE_BUDGET: dict[str, int] = {"humaneval": 0, "tau2": 80, "scienceworld": 40}
# tasks given every hostile string at every turn (default 2): one for the simulators whose episodes cost
# ~0.1-0.3 s each (a JVM command, a database copy); the mixtures above still draw from every task
FULL_PASS_TASKS: dict[str, int] = {"tau2": 1, "scienceworld": 1}

# The most turns an episode of `task` may take (chain_tasks: busy refusals do not count against its
# call budget but never come twice in a row).
def service_desk_ideal(task: dict[str, Any]) -> int:
    if task.get("setting") == "choice":
        return task["delay"] + 3
    return 2 if task["intent"] == "human" else 4 + task["delay"]


TURN_CAPS: dict[str, Callable[[Any, dict[str, Any]], int]] = {
    "arith": lambda env, task: len(task["steps"]),
    "chain_tasks": lambda env, task: 2 * (len(task_steps(task)) + env.cfg.slack),
    "toolplan": lambda env, task: len(task["queries"]) + 2,
    "toolhops": lambda env, task: len(task["attrs"]) + env.cfg.extra_workers + 2,
    "thinker_solver": lambda env, task: 3,
    "voting": lambda env, task: 3,
    "reasoning_gym": lambda env, task: 1,
    "reasoning_gym_team": lambda env, task: 3,
    "humaneval": lambda env, task: 1,
    "bfcl": lambda env, task: len(task["question"]) * (env.cfg.max_steps_per_turn + 1),
    "tau2": lambda env, task: 2 * env.cfg.max_messages,
    "textworld": lambda env, task: env.cfg.max_steps,
    "scienceworld": lambda env, task: env.cfg.max_steps,
    "paper_math": lambda env, task: 1,
    "paper_math_team": lambda env, task: 3,
    "service_desk": lambda env, task: env.cfg.slack + service_desk_ideal(task),
    "braid": lambda env, task: len(task["nodes"]),
    "terminal": lambda env, task: env.cfg.max_turns,
    "skill_families": lambda env, task: task["plan"] + env.cfg.max_misses,
}


def environments() -> list[Any]:
    return [pytest.param(cls(cls.config_class(train_size=24, heldout_size=6, demo_size=0, **setting)),
                         id=f"{name}-{i}")
            for name, cls in ENVS.items() for i, setting in enumerate(SETTINGS.get(name, [{}]))]


def test_every_environment_is_fuzzed():
    assert set(ENVS) <= set(SETTINGS) and set(ENVS) <= set(TURN_CAPS)


@pytest.mark.parametrize("env", environments())
def test_step_never_raises_on_hostile_text(env, request):
    report = fuzz(env, lambda task: TURN_CAPS[env.name](env, task), random.Random(request.node.name),
                  full_pass_tasks=FULL_PASS_TASKS.get(env.name, 2),
                  mixture=MIXTURE_BUDGET.get(env.name, 3000),
                  words=WORDS, plan_words=ATTRIBUTES)
    assert report.roles == set(env.roles)


# ---- the harness catches what it is for ---------------------------------------------------------------
class _Fragile(EpisodeState):
    """An echo game whose step breaks on one hostile input (`breaks`) and is right otherwise."""

    def __init__(self, task: dict[str, Any], breaks: str):
        self.task, self.breaks = task, breaks

    def start(self) -> Observation:
        return Observation("solver", f"Q: {self.task['x']}?\nA:")

    def expert_action(self) -> str:
        return f" {self.task['x']}"

    def step(self, action: str) -> StepResult:
        if self.breaks == "raise" and "\x00" in action:
            raise ValueError("NUL")
        reward = float("nan") if self.breaks == "nan" and not action.strip() else 1.0
        if self.breaks == "loop" and action != self.expert_action():
            return StepResult(Observation("solver", "again?"))
        return StepResult(None, reward=reward)


@dataclasses.dataclass
class _FragileConfig(EnvConfig):
    breaks: str = ""


class _FragileEnv(Environment):
    name = "fragile"
    roles = ("solver",)
    config_class = _FragileConfig

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1,)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        return {"x": rng.randrange(10**6)}

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        return _Fragile(task, self.cfg.breaks)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("breaks", "error"), [("raise", ValueError), ("nan", AssertionError),
                                                ("loop", AssertionError)])
def test_the_harness_catches_a_step_that_raises_a_bad_reward_and_an_endless_episode(breaks, error):
    env = _FragileEnv(_FragileConfig(train_size=4, heldout_size=1, dev_size=0))
    assert fuzz(env, lambda task: 1, random.Random(0), mixture=50).roles == {"solver"}
    with pytest.raises(error):
        fuzz(_FragileEnv(_FragileConfig(train_size=4, heldout_size=1, dev_size=0, breaks=breaks)),
             lambda task: 1, random.Random(0), mixture=50)
