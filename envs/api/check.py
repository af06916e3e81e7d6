"""Is an environment's verifier right? Play an oracle and a random policy and compare their rewards.

`python -m envs check [NAME ...]` (all of `ENVS` without a name; `make check-envs`) builds
each environment from its config file (`common/conf/env/<name>.yaml`) with the demonstrator's
injected errors switched off (the environment's `oracle_settings`, `Environment.settings_for_check`),
plays the **oracle** and a **random policy** once on each of `--tasks` tasks (half train, half
held-out, drawn with `--seed`), and prints their mean episode rewards. The check fails (exit 1,
naming the environment) when the oracle's mean is below `ORACLE_MIN` (the verifier rejects right
answers, or the wrapper loses them) or the random policy's is above `RANDOM_MAX` (the verifier
accepts anything).

The oracle is the environment's `oracle_action`: its scripted demonstrator without its injected
errors, except where the demonstrator lacks information rather than making a mistake (`voting`'s
voters that are not shown the asked fact guess, so its oracle answers the hidden value for every
voter). `thinker_solver`'s oracle reaches 1 - cost of a one-character message (0.98 at the default
cost).

"Random" is the environment's `random_action`: a uniformly random action of the form the
environment expects, so that the verifier, not the parser, has to reject it. Each environment's
`random_action` docstring says what that is for it (`arith`: ` #<n>`, n uniform in [0, max_value];
`bfcl`: `[]` or one call of an offered function with arguments of their documented types; ...);
an environment without one plays `Environment.random_action`'s 0 to 12 random characters.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envs.api.base import Environment, EpisodeState, Observation

CONF = Path(__file__).resolve().parents[2] / "common" / "conf" / "env"
ORACLE_MIN = 0.95  # an oracle below this: the verifier or the wrapper is broken
RANDOM_MAX = 0.2  # a random policy above this: the verifier accepts too much
MAX_TURNS = 1000  # a guard: every environment caps its own turns far below this

Policy = Callable[[Environment, EpisodeState, Observation, random.Random], str]


def oracle_policy(env: Environment, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    return env.oracle_action(state, obs)


def random_policy(env: Environment, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    return env.random_action(state, obs, rng)


@dataclass
class CheckResult:
    env: str
    tasks: int
    oracle: float  # mean episode reward of the oracle
    random: float  # mean episode reward of the random policy

    def problems(self) -> list[str]:
        """What is wrong, one line each (empty: the check passes)."""
        out = []
        if not self.oracle >= ORACLE_MIN:
            out.append(f"{self.env}: the oracle's mean reward {self.oracle:.3f} is below {ORACLE_MIN} "
                       "(the verifier rejects right answers, or the wrapper loses them)")
        if not self.random <= RANDOM_MAX:
            out.append(f"{self.env}: the random policy's mean reward {self.random:.3f} is above {RANDOM_MAX} "
                       "(the verifier accepts wrong answers)")
        return out


def build(name: str) -> Environment:
    """Environment `name` from its config file, with the demonstrator's injected errors switched off."""
    from envs.registry import ENVS

    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose from {sorted(ENVS)}")
    path = CONF / f"{name}.yaml"
    settings = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    cls = ENVS[name]
    return cls(cls.config_class(**cls.settings_for_check(settings)))


def play(env: Environment, task: dict[str, Any], policy: Policy, seed: int) -> float:
    """One episode of `task` under `policy`; its reward (the terminal one, as the rollout records)."""
    state = env.new_episode(task, random.Random(seed))
    rng = random.Random(seed + 1)
    obs: Observation | None = state.start()
    reward, turns = 0.0, 0
    while obs is not None:
        result = state.step(policy(env, state, obs, rng))
        obs, reward, turns = result.next, result.reward, turns + 1
        if turns > MAX_TURNS:
            raise RuntimeError(f"{env.name}: an episode ran past {MAX_TURNS} turns")
    return float(reward)


def check_env(name: str, tasks: int = 32, seed: int = 0) -> CheckResult:
    """Mean rewards of the oracle and the random policy on `tasks` tasks (half train, half held-out)."""
    env = build(name)
    rng = random.Random(seed)
    split_sets = env.task_set()
    sample: list[dict[str, Any]] = []
    for split, n in (("train", tasks - tasks // 2), ("heldout", tasks // 2)):
        rows = split_sets[split]
        for i in rng.sample(range(len(rows)), min(n, len(rows))):
            sample.append(json.loads(rows[i]["task"]))
    seeds = [rng.randrange(2**31) for _ in sample]
    oracle = [play(env, task, oracle_policy, s) for task, s in zip(sample, seeds, strict=True)]
    randoms = [play(env, task, random_policy, s) for task, s in zip(sample, seeds, strict=True)]
    return CheckResult(name, len(sample), sum(oracle) / len(oracle), sum(randoms) / len(randoms))


def table(results: list[CheckResult]) -> str:
    lines = [f"{'env':<16} {'tasks':>5} {'oracle':>7} {'random':>7}  check", "-" * 46]
    for r in results:
        verdict = "ok" if not r.problems() else "FAIL"
        lines.append(f"{r.env:<16} {r.tasks:>5} {r.oracle:>7.3f} {r.random:>7.3f}  {verdict}")
    return "\n".join(lines)
