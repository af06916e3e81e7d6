"""docs/adding-an-environment.md's worked example (docs/examples/reverse_env.py) is a correct environment
of the current API: it passes what `make check-envs` and the fuzz test ask of every registered one."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import random
import sys
from pathlib import Path

import pytest

from envs.api import check
from envs.api.base import Environment
from envs.api.fuzz import fuzz
from envs.registry import ENVS

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "docs" / "examples" / "reverse_env.py"


@pytest.fixture(scope="module")
def example():
    spec = importlib.util.spec_from_file_location("reverse_env", EXAMPLE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["reverse_env"] = module  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules["reverse_env"]


def test_the_example_passes_the_oracle_and_random_check(example, monkeypatch):
    """`python -m envs check reverse`, once the doc's registry line is added (here: for this test only)."""
    monkeypatch.setitem(ENVS, "reverse", example.ReverseEnv)
    result = check.check_env("reverse", tasks=32)
    assert result.problems() == [] and result.oracle == 1.0 and result.random < 0.1, result
    # with its slips on, the demonstrator is no oracle: what oracle_settings switch off
    env = example.ReverseEnv(example.ReverseConfig(demo_slip=1.0, train_size=16, heldout_size=4))
    rows = env.task_set()["train"]["task"]
    assert sum(check.play(env, json.loads(t), check.oracle_policy, i) for i, t in enumerate(rows)) == 0


def test_the_example_meets_what_the_suite_asks_of_every_environment(example):
    cls = example.ReverseEnv
    assert cls.random_action is not Environment.random_action and cls.random_action.__doc__
    assert set(cls.oracle_settings) <= {f.name for f in dataclasses.fields(cls.config_class)}
    assert cls.config_class().dev_size > 0
    from envs.api.features import FEATURES

    assert cls.offers and cls.offers <= set(FEATURES)
    splits = cls(cls.config_class(train_size=40, heldout_size=10, dev_size=10)).task_set()
    assert {s: len(splits[s]) for s in splits} == {"train": 40, "heldout": 10, "dev": 10}
    assert not set(splits["train"]["task"]) & set(splits["heldout"]["task"])
    with pytest.raises(ValueError, match="env.min_letters"):
        cls(cls.config_class(min_letters=9))


def test_the_example_survives_hostile_text(example):
    env = example.ReverseEnv(example.ReverseConfig(train_size=24, heldout_size=6))
    report = fuzz(env, lambda task: 1, random.Random(0), mixture=500, words=("stone", "enots"))
    assert report.roles == set(env.roles)
