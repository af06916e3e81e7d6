"""The rules a Thinker–Solver dyad of the testbeds shares (`thinker_solver`, over its facts or over arith's
tasks with `env.tasks: arith`): the turn plan of each variant, the line the Solver receives, the Thinker's
cost, a step, and the outcome's `info`. A task family subclasses `DyadEpisode` with its prompts, how it
reads a Thinker message, and its scripted demonstrator (envs/testbeds/thinker_solver.py,
envs/testbeds/thinker_solver_arith.py); the variants are described in thinker_solver.py's docstring.
"""

from __future__ import annotations

import re
from typing import Any

from common.episode import Event
from envs.api.base import EpisodeState, Observation, StepResult, parse_int

THINKER, SOLVER = "thinker", "solver"
_ANSWER = re.compile(r"#\s*(-?[0-9]+)\s*$")
MESSAGE_KINDS = ("help", "wrong", "silent", "other")
# who acts, in order, in each variant
PHASES = {"main": [THINKER, SOLVER], "solo": [SOLVER], "empty_guidance": [THINKER, SOLVER],
          "paired": [SOLVER, THINKER, SOLVER]}


def read_answer(action: str) -> int | None:
    """The Solver's `#<value>` at the end of its reply, or None."""
    m = _ANSWER.search(action.strip())
    return parse_int(m.group(1)) if m is not None else None


class DyadEpisode(EpisodeState):
    """One play of a dyad. A subclass's `__init__` sets `cfg` (its `cost_per_char`), `variant`, `value` (the
    right answer), `message = None`, `solo_correct = None`, `dropped` (the message is lost on the way),
    `phases = PHASES[variant]` and `phase = 0`, and it defines the prompts, `classify`, `unreadable`,
    `malformed_why`, `hint_value`, `expert_action` and `_setting_info`."""

    cfg: Any
    variant: str
    value: int
    message: str | None
    solo_correct: bool | None
    dropped: bool
    phases: list[str]
    phase: int
    malformed_why: str  # the `invalid_action` event's reason for an unreadable Thinker message

    # ---- what a task family defines ------------------------------------------------------------
    def thinker_prompt(self) -> str:
        raise NotImplementedError

    def solver_prompt(self, guidance: str) -> str:
        raise NotImplementedError

    def classify(self, message: str) -> str:
        """help | wrong | silent | other: what a Thinker message says about the answer."""
        raise NotImplementedError

    def unreadable(self, message: str) -> bool:
        """Whether a Thinker message is malformed (an `invalid_action` event; it is passed on as written)."""
        raise NotImplementedError

    def hint_value(self, guidance: str) -> int | None:
        """The value a received Thinker line states for the answer, or None."""
        raise NotImplementedError

    def _setting_info(self, correct: bool, answer: int | None) -> dict[str, Any]:
        """The task family's own entries of the outcome's info (first in it)."""
        raise NotImplementedError

    # ---- the shared rules ----------------------------------------------------------------------
    def guidance(self) -> str:
        """The Thinker line the Solver receives (empty in `solo`, `empty_guidance`, and before the Thinker
        spoke)."""
        if (self.message is None or self.variant == "empty_guidance" or self.dropped
                or (self.variant == "paired" and self.phase == 0)):
            return ""
        return self.message.replace("\n", " ")

    def start(self) -> Observation:
        return self._observation()

    def _observation(self) -> Observation:
        role = self.phases[self.phase]
        if role == THINKER:
            return Observation(THINKER, self.thinker_prompt(), new_context=True)
        return Observation(SOLVER, self.solver_prompt(self.guidance()), new_context=True)

    def cost(self) -> float:
        return self.cfg.cost_per_char * len(self.message.strip()) if self.message is not None else 0.0

    def step(self, action: str) -> StepResult:
        role = self.phases[self.phase]
        self.phase += 1
        if role == THINKER:
            self.message = action
            kind = self.classify(action)
            malformed = kind == "other" and self.unreadable(action)
            events = [Event("invalid_action", 0, {"why": self.malformed_why})] if malformed else []
            return StepResult(self._observation(), reward=-self.cost(), events=events)
        answer = read_answer(action)
        correct = answer is not None and answer == self.value
        no_answer = {"why": "no answer: end the reply with #<integer>"}
        events = [] if answer is not None else [Event("invalid_action", 0, no_answer)]
        if self.variant == "paired" and self.solo_correct is None:
            self.solo_correct = correct
            return StepResult(self._observation(), events=events)
        return StepResult(None, reward=float(correct) - self.cost(), success=correct, events=events,
                          info=self._info(correct, answer))

    def _hint(self) -> int | None:
        return self.hint_value(self.guidance())

    def _info(self, correct: bool, answer: int | None = None) -> dict[str, Any]:
        info = self._setting_info(correct, answer)
        if self.message is not None:
            kind = self.classify(self.message)
            info.update({f"msg_{k}": kind == k for k in MESSAGE_KINDS})
            info.update(msg_chars=len(self.message.strip()), thinker_cost=self.cost())
        if self.solo_correct is not None:
            info.update(solo_correct=self.solo_correct, joint_correct=correct,
                        help=correct and not self.solo_correct, hurt=self.solo_correct and not correct,
                        contribution=int(correct) - int(self.solo_correct))
        return info
