"""`thinker_solver` over arith's tasks (`env.tasks: arith`, #46): CCPO's Think-Reason dyad on arithmetic.

The cpu-scale rung of the ladder whose `small` rung is `reasoning_gym_team` (reasoning-gym's arithmetic
played by a Thinker and a Solver) and whose `paper` rung is `paper_math_team` (MATH): both roles see the
whole problem, and what the Thinker brings is the working, not a hidden fact.

- Tasks: `arith`'s generator (envs/testbeds/arith.py, imported, not changed) with thinker_solver's
  `min_ops`, `max_ops`, `max_value` (arith's defaults: 1-3 operations, values <= 99): a start value and
  operations evaluated left to right, every intermediate value in [0, max_value]; the tier is the number of
  operations. Drawn by thinker_solver's splits from `data_seed`, so with the same settings and split sizes
  they are exactly `arith`'s own splits (common/conf/env/thinker_solver_arith.yaml: arith.yaml's).
- The **Thinker** sees `Q: 7+5-3*2\\nT:` and writes one line: the working (` 7+5=12 12-3=9 9*2=18`), a bare
  value (` 18`), or nothing. A message is readable when it holds only ASCII digits, `+ - * =` and spaces and
  ends in a number; what it says is that last number. Kinds as in thinker_solver: help (says the answer),
  wrong (says another value), silent, other (unreadable: an `invalid_action` event; it is passed on as
  written). It pays `cost_per_char` per character (the working of three operations is about 20 characters:
  common/conf/env/thinker_solver_arith.yaml sets the cost to 0, a binary reward).
- The **Solver** sees `Q: 7+5-3*2\\nT:<the Thinker's line>\\nA:` and ends its reply with `#<value>`.
- **The free-riding setting on arith** (`see_probs`, `common/conf/env/thinker_solver_arith_freeride.yaml`,
  env tag `thinker_solver-arith-freeride`; #46): the Solver is shown the problem with a probability p, a
  property of the task (tier i, the i-th fewest operations, takes the i-th largest of `see_probs`), drawn
  per episode from the episode's rng (so a solo play seeded like the joint one gets the same draw); else its
  prompt reads `Q: ?`. The Thinker always sees the problem and is not told p nor the draw, so a shared
  reward credits a silent or wrong Thinker whenever the Solver happened to see a problem it can do alone.
  `info` adds `sees` and `p_see`; the demonstrator Solver that is not shown the problem and gets no readable
  hint guesses uniformly in [0, max_value].

Reward, variants (`main`, `solo`, `empty_guidance`, `paired`) and info are thinker_solver's
(envs/testbeds/dyad.py), with `ops` (the number of operations) in place of `hard`.

Scripted demonstrator (the SFT warm start): the Thinker writes the working (help), stays silent, or writes
the working with a slip in its last step (the value before the last operation, as if it were forgotten; a
uniformly drawn other value where that is the answer) with `expert_help`, `expert_silent`, `expert_wrong`
(drawn once per episode); the Solver copies a readable hint's value, else answers the right value directly
without working (arith's `demo_shortcut` habit). So the warm-started Solver learns to copy a hint and, alone,
to answer in one go, which a small model does much less reliably than working step by step on several
operations: one-operation tasks hardly need the Thinker, three-operation ones do (thinker_solver's tiers,
made by skill rather than by hidden facts).
"""

from __future__ import annotations

import random
import re
from typing import Any

from envs.api.base import Observation, parse_int
from envs.testbeds.arith import ArithConfig, ArithEnv, ArithEpisode, apply
from envs.testbeds.dyad import PHASES, THINKER, DyadEpisode

_WORKING = re.compile(r"[0-9+\-*= ]*")


def arith_generator(cfg: Any) -> ArithEnv:
    """`arith` with the config's task settings: only its tiers and its generator are used (a task:
    `{"start": 7, "steps": [["+", 5], ...]}`)."""
    if cfg.max_value < 1:
        raise ValueError(f"env.max_value must be >= 1 with env.tasks=arith; got {cfg.max_value}")
    return ArithEnv(ArithConfig(min_ops=cfg.min_ops, max_ops=cfg.max_ops, max_value=cfg.max_value))


def read_working(message: str) -> int | None:
    """The value a Thinker message states: its last number, when the message holds only ASCII digits,
    `+ - * =` and spaces and ends in a number (`7+5=12 12*2=24` -> 24, ` 24` -> 24); else None."""
    text = message.strip()
    if _WORKING.fullmatch(text) is None:
        return None
    head = text.rstrip("0123456789")  # linear in the length: no regex backtracking on hostile digit runs
    return parse_int(text[len(head):]) if len(head) < len(text) else None


def arith_random_action(obs: Observation, rng: random.Random, top: int) -> str:
    """Thinker: silent or one value, uniform over the top + 2 choices (nothing, 0..top); Solver: ` #<v>`, v
    uniform in [0, top] (top: env.max_value)."""
    v = rng.randrange(top + 2)
    if obs.role == THINKER:
        return "" if v == top + 1 else f" {v}"
    return f" #{rng.randrange(top + 1)}"


class ArithDyadEpisode(DyadEpisode):
    malformed_why = "guidance must be empty or working: ASCII digits, + - * = and spaces, ending in a number"

    def __init__(self, task: dict[str, Any], cfg: Any, rng: random.Random, variant: str):
        arith = ArithEpisode(task, "single")
        self.expression = arith.expression()
        self.steps: list[tuple[int, str, int, int]] = []  # (value before, op, operand, value after)
        v = arith.start_value
        for op, b in arith.steps:
            self.steps.append((v, op, b, apply(op, v, b)))
            v = self.steps[-1][3]
        self.value = arith.answer()
        self.cfg, self.rng, self.variant = cfg, rng, variant
        self.message: str | None = None  # the Thinker's message as written
        self.solo_correct: bool | None = None
        self.dropped = False
        # the demonstrator's choice for this episode, drawn once so expert_action() is repeatable
        u = rng.random()
        self.expert_kind = ("help" if u < cfg.expert_help else
                            "silent" if u < cfg.expert_help + cfg.expert_silent else "wrong")
        other = rng.choice([x for x in range(cfg.max_value + 1) if x != self.value])
        forgot = self.steps[-1][0]  # the slip: the last operation forgotten
        self.expert_wrong_value = forgot if forgot != self.value else other
        # the free-riding setting (`see_probs`): P(the Solver is shown the problem), a property of the task,
        # and the hidden draw, after the others (so a play without it draws as before); the demonstrator's
        # guess
        self.p_see: float | None = task.get("p_see")
        self.sees = True if self.p_see is None else rng.random() < self.p_see
        self.expert_guess = None if self.p_see is None else rng.randrange(cfg.max_value + 1)
        self.phases = PHASES[variant]
        self.phase = 0

    def question(self) -> str:
        return f"Q: {self.expression}"

    def thinker_prompt(self) -> str:
        return f"{self.question()}\nT:"

    def solver_prompt(self, guidance: str) -> str:
        question = self.question() if self.sees else "Q: ?"
        return f"{question}\nT:{guidance}\nA:"

    def working(self, last: int) -> str:
        """The steps written out (`7+5=12 12-3=9 9*2=18`), the last one ending in `last`."""
        done = [f"{a}{op}{b}={c}" for a, op, b, c in self.steps[:-1]]
        a, op, b, _ = self.steps[-1]
        return " ".join([*done, f"{a}{op}{b}={last}"])

    def expert_action(self) -> str:
        if self.phases[self.phase] == THINKER:
            if self.expert_kind == "silent":
                return ""
            return " " + self.working(self.value if self.expert_kind == "help" else self.expert_wrong_value)
        hint = self._hint()
        if hint is not None:
            return f" #{hint}"
        return f" #{self.value if self.sees else self.expert_guess}"

    def classify(self, message: str) -> str:
        if not message.strip():
            return "silent"
        said = read_working(message)
        return "other" if said is None else "help" if said == self.value else "wrong"

    def unreadable(self, message: str) -> bool:
        return read_working(message) is None

    def hint_value(self, guidance: str) -> int | None:
        return read_working(guidance)

    def _setting_info(self, correct: bool, answer: int | None) -> dict[str, Any]:
        info: dict[str, Any] = {"ops": len(self.steps)}
        if self.p_see is not None:
            info.update(sees=self.sees, p_see=self.p_see)
        return info
