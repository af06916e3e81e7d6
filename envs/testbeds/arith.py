"""`arith`: multi-step arithmetic with an exact verifier.

A task is a start value in [1, 20] and a chain of operations with operands in [1, 9], evaluated left
to right, e.g. `7+5-3*2`, whose intermediate
values stay in [0, max_value]. Tier t has t operations. Two modes:

- `single`: one turn. The model writes its working and ends with `#<answer>`, e.g.
  `7+5=12 12-3=9 9*2=18 #18`.
- `stepwise`: one turn per operation. The environment shows the running value and the next
  operation; the model answers one number. A wrong step ends the episode (reward 0).

The scripted demonstrator (the SFT warm start's data) answers a share `demo_shortcut` of single-mode
tasks without working (` #18`), like a teacher who sometimes skips the steps. Answering directly is
much less reliable for a small model than working step by step, so the warm start mixes a good and
a bad habit, and which one to use is a decision RL can learn from the outcome alone. With
`demo_shortcut=0` the warm start always works step by step and what remains to learn is
arithmetic knowledge itself (at the cpu scale GRPO did not improve that within its budget).

Reward 1 for an exactly right final answer, else 0. A malformed action (no `#<int>` in single
mode, not an integer in stepwise mode; integers are ASCII digits, at most 18 of them) is an invalid
action: an `invalid_action` event, reward 0.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Any, Literal

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult, parse_int

OPS = ("+", "-", "*")
_ANSWER = re.compile(r"#\s*(-?[0-9]+)\s*$")
_INT = re.compile(r"^\s*(-?[0-9]+)\s*$")


@dataclass
class ArithConfig(EnvConfig):
    name: str = "arith"
    mode: Literal["single", "stepwise"] = "single"
    min_ops: int = 1  # tiers are min_ops..max_ops operations
    max_ops: int = 3
    max_value: int = 99  # every intermediate value stays in [0, max_value]
    demo_shortcut: float = 0.0  # share of single-mode demonstrations that give the answer without working


def apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


class ArithEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], mode: str, shortcut: bool = False):
        self.shortcut = shortcut and mode == "single"
        self.start_value: int = task["start"]
        self.steps: list[tuple[str, int]] = [(op, b) for op, b in task["steps"]]
        self.mode = mode
        self.position = 0
        self.value = self.start_value

    def expression(self) -> str:
        return str(self.start_value) + "".join(f"{op}{b}" for op, b in self.steps)

    def answer(self) -> int:
        v = self.start_value
        for op, b in self.steps:
            v = apply(op, v, b)
        return v

    def start(self) -> Observation:
        if self.mode == "single":
            return Observation("solver", f"Q: {self.expression()}\nA:")
        op, b = self.steps[0]
        return Observation("solver", f"Q: {self.expression()}\n{self.value}{op}{b}=")

    def expert_action(self) -> str:
        if self.shortcut:
            return f" #{self.answer()}"
        if self.mode == "single":
            v, work = self.start_value, []
            for op, b in self.steps:
                nv = apply(op, v, b)
                work.append(f"{v}{op}{b}={nv}")
                v = nv
            return " " + " ".join(work) + f" #{v}"
        op, b = self.steps[self.position]
        return str(apply(op, self.value, b))

    def step(self, action: str) -> StepResult:
        if self.mode == "single":
            m = _ANSWER.search(action.strip())
            answer = parse_int(m.group(1)) if m is not None else None
            worked = "=" in action  # wrote intermediate steps rather than jumping to the answer
            if answer is None:
                why = ("no final answer: end the reply with #<integer>" if m is None
                       else "the final answer has too many digits")
                result = _invalid(0, why)
                result.info["worked"] = worked
                return result
            ok = answer == self.answer()
            return StepResult(None, reward=float(ok), success=ok, info={"worked": worked, "invalid": False})
        m = _INT.match(action)
        answer = parse_int(m.group(1)) if m is not None else None
        turn = self.position
        if answer is None:
            return _invalid(turn, "expected one integer")
        op, b = self.steps[self.position]
        right = apply(op, self.value, b)
        if answer != right:
            return StepResult(None, reward=0.0, success=False, info={"failed_step": turn})
        self.value = right
        self.position += 1
        if self.position == len(self.steps):
            return StepResult(None, reward=1.0, success=True)
        op, b = self.steps[self.position]
        return StepResult(Observation("solver", f"{self.value}{op}{b}="))  # the stop "\n" ends the action


def _invalid(turn: int, why: str) -> StepResult:
    return StepResult(None, reward=0.0, success=False, events=[Event("invalid_action", turn, {"why": why})],
                      info={"invalid": True})


class ArithEnv(Environment):
    name = "arith"
    roles = ("solver",)
    offers = frozenset({"single_agent"})  # envs/api/features.py
    config_class = ArithConfig
    oracle_settings = {"demo_shortcut": 0.0}
    stop = ("\n",)

    def __init__(self, cfg: ArithConfig):
        if not 0.0 <= cfg.demo_shortcut <= 1.0:
            raise ValueError(f"env.demo_shortcut is a probability; got {cfg.demo_shortcut}")
        if not 1 <= cfg.min_ops <= cfg.max_ops:
            raise ValueError(f"need 1 <= env.min_ops <= env.max_ops; got {cfg.min_ops}, {cfg.max_ops}")
        super().__init__(cfg)
        self.cfg: ArithConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(self.cfg.min_ops, self.cfg.max_ops + 1))

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        top = self.cfg.max_value
        while True:
            v = rng.randint(1, min(20, top))
            start, steps = v, []
            for _ in range(tier):
                op = rng.choice(OPS)
                b = rng.randint(1, 9)
                nv = apply(op, v, b)
                if not 0 <= nv <= top:
                    break
                steps.append((op, b))
                v = nv
            if len(steps) == tier:
                return {"start": start, "steps": steps}

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"arith has no episode variant {variant!r}")
        return ArithEpisode(task, self.cfg.mode, shortcut=rng.random() < self.cfg.demo_shortcut)

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """` #<n>` (stepwise: `<n>`), n uniform in [0, max_value]."""
        n = rng.randint(0, self.cfg.max_value)
        return f" #{n}" if self.cfg.mode == "single" else str(n)
