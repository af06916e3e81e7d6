"""`python -m envs check`: every environment's oracle and random policy, and a broken verifier caught."""

from __future__ import annotations

import dataclasses
import json
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from envs.__main__ import main
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.api.check import ORACLE_MIN, RANDOM_MAX, CheckResult, check_env, table
from envs.registry import ENVS

ROOT = Path(__file__).resolve().parents[3]


def test_every_environment_passes_from_the_command_line_within_five_minutes(wall_budget):
    """What `make check-envs` runs (CI runs it here, and only here): all of ENVS, the old ones
    included, on 12 tasks each (`make check-envs` plays 64). The real benchmarks dominate the time:
    tau2 and scienceworld take about two seconds a task on 2 cores, the generated environments a few
    seconds together. The check is seeded: the same tasks and random actions every run."""
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "envs", "check", "--json", "--tasks", "12"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["env"] for r in rows] == list(ENVS)
    for r in rows:
        assert set(r) == {"env", "tasks", "oracle", "random"} and r["tasks"] == 12
        assert r["oracle"] >= ORACLE_MIN and r["random"] <= RANDOM_MAX, r
    assert time.monotonic() - start < wall_budget(300)


def test_every_environment_says_what_random_means_and_oracle_settings_exist():
    for name, cls in ENVS.items():
        assert cls.random_action is not Environment.random_action, f"{name} plays the default random action"
        assert cls.random_action.__doc__, f"{name}'s random_action does not say what random means"
        fields = {f.name for f in dataclasses.fields(cls.config_class)}
        assert set(cls.oracle_settings) <= fields, (name, set(cls.oracle_settings) - fields)


def test_the_demonstrators_injected_errors_are_what_the_oracle_switches_off():
    """Built with their warm-start settings, the demonstrators that inject errors do fail the oracle bar."""
    from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv

    env = ToolPlanEnv(ToolPlanConfig(demo_distractor=0.25, demo_wrong=0.10, train_size=40, heldout_size=10))
    from envs.api.check import play

    rewards = [play(env, json.loads(t), lambda e, s, o, r: s.expert_action(), i)
               for i, t in enumerate(env.task_set()["train"]["task"])]
    assert sum(rewards) / len(rewards) < ORACLE_MIN


# ---- a broken verifier is caught ----------------------------------------------------------------------
class _Echo(EpisodeState):
    def __init__(self, task: dict[str, Any], accept_all: bool, reject_all: bool):
        self.task, self.accept_all, self.reject_all = task, accept_all, reject_all

    def start(self) -> Observation:
        return Observation("solver", f"Q: {self.task['x']}?\nA:")

    def expert_action(self) -> str:
        return f" {self.task['x']}"

    def step(self, action: str) -> StepResult:
        right = not self.reject_all and (self.accept_all or action.strip() == str(self.task["x"]))
        return StepResult(None, reward=float(right), success=right)


@dataclasses.dataclass
class _EchoConfig(EnvConfig):
    name: str = "echo"
    accept_all: bool = False
    reject_all: bool = False


class _EchoEnv(Environment):
    name = "echo"
    roles = ("solver",)
    config_class = _EchoConfig

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1,)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        return {"x": rng.randrange(10**6)}

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        return _Echo(task, self.cfg.accept_all, self.cfg.reject_all)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("setting", "why"), [({}, None), ({"accept_all": True}, "random policy"),
                                              ({"reject_all": True}, "oracle")])
def test_a_broken_verifier_fails_the_check(monkeypatch, capsys, setting, why):
    monkeypatch.setitem(ENVS, "echo", _EchoEnv)
    monkeypatch.setattr(_EchoEnv, "oracle_settings", setting)
    code = main(["check", "echo", "arith", "--tasks", "8"])
    out, err = capsys.readouterr()
    assert "echo" in out and "arith" in out and "oracle" in out.splitlines()[0]
    # a right verifier; the random policy (short random strings) never guesses a 6-digit number
    if why is None:
        assert code == 0 and "error" not in err
        return
    assert code == 1 and f"error: echo: the {why}" in err and "error: arith" not in err


def test_json_output_and_an_environment_that_cannot_start(monkeypatch, capsys):
    class Broken(_EchoEnv):
        def __init__(self, cfg: EnvConfig):
            raise ValueError("needs a package that is not installed")

    monkeypatch.setitem(ENVS, "broken", Broken)
    assert main(["check", "arith", "broken", "--json", "--tasks", "4"]) == 1
    out, err = capsys.readouterr()
    random_mean = json.loads(out)[0]["random"]
    assert json.loads(out) == [{"env": "arith", "tasks": 4, "oracle": 1.0, "random": random_mean}]
    assert "error: broken: cannot run (ValueError: needs a package that is not installed)" in err


def test_check_env_samples_both_splits_and_is_seeded():
    a, b = check_env("voting", tasks=9, seed=3), check_env("voting", tasks=9, seed=3)
    assert a == b and a.tasks == 9
    assert CheckResult("x", 4, 0.94, 0.0).problems() and CheckResult("x", 4, 1.0, 0.21).problems()
    assert not CheckResult("x", 4, 0.95, 0.2).problems()
    assert "FAIL" in table([CheckResult("x", 4, 0.5, 0.0)]) and " ok" in table([a])


def test_bad_arguments_are_refused(capsys):
    with pytest.raises(SystemExit):
        main(["check", "no_such_env"])
    with pytest.raises(SystemExit):
        main(["check", "--tasks", "1"])
    assert "unknown environment" in capsys.readouterr().err
