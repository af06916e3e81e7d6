"""`reverse`: the worked example of docs/adding-an-environment.md (not registered in `ENVS`).

A task is a lowercase word; the model answers it reversed after a `#`, e.g. `Reverse: stone\nA:` ->
` #enots`. Tier t is a word of t + 2 letters. One turn, reward 1 for the exact reversal, else 0; an
answer without `#<letters>` at its end is an invalid action. tests/docs/test_reverse_env.py runs it
through the oracle and random check (`envs.api.check`) and the fuzz harness (`envs.api.fuzz`).
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from typing import Any

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

_ANSWER = re.compile(r"#\s*([a-z]{1,64})\s*$")  # bounded: the action text is hostile input


@dataclass
class ReverseConfig(EnvConfig):
    name: str = "reverse"
    min_letters: int = 3  # tiers: words of min_letters .. max_letters letters
    max_letters: int = 8
    demo_slip: float = 0.0  # share of demonstrations answering the word unreversed (a habit for RL to fix)


class ReverseEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], slip: bool):
        self.word: str = task["word"]
        self.slip = slip

    def start(self) -> Observation:
        return Observation("solver", f"Reverse: {self.word}\nA:")

    def expert_action(self) -> str:
        return f" #{self.word if self.slip else self.word[::-1]}"

    def step(self, action: str) -> StepResult:
        m = _ANSWER.search(action.strip())
        if m is None:  # never raise on model text: say what was wrong, end with reward 0
            why = "end the reply with #<the word reversed>, lowercase letters only"
            return StepResult(None, reward=0.0, events=[Event("invalid_action", 0, {"why": why})],
                              info={"invalid": True})
        ok = m.group(1) == self.word[::-1]
        return StepResult(None, reward=float(ok), success=ok, info={"invalid": False})


class ReverseEnv(Environment):
    name = "reverse"
    roles = ("solver",)
    offers = frozenset({"single_agent"})  # envs/api/features.py: which methods `make compare` runs here
    config_class = ReverseConfig
    oracle_settings = {"demo_slip": 0.0}  # the check's oracle: the demonstrator without its slips

    def __init__(self, cfg: ReverseConfig):
        if not 1 <= cfg.min_letters <= cfg.max_letters <= 64:
            raise ValueError(f"need 1 <= env.min_letters <= env.max_letters <= 64; got {cfg.min_letters}, "
                             f"{cfg.max_letters}")
        super().__init__(cfg)  # EnvConfig.check(): split sizes, step_cpu_s
        self.cfg: ReverseConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(1, self.cfg.max_letters - self.cfg.min_letters + 2))

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        n = self.cfg.min_letters + tier - 1
        return {"word": "".join(rng.choices(string.ascii_lowercase, k=n))}

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"reverse has no episode variant {variant!r}")
        return ReverseEpisode(task, slip=rng.random() < self.cfg.demo_slip)

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """` #<letters>`: the word's own letters in a uniformly random order."""
        assert isinstance(state, ReverseEpisode)
        return " #" + "".join(rng.sample(state.word, len(state.word)))
