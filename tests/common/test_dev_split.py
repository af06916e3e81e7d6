"""The dev split (#16): design and tuning evaluate on dev, final results on held-out (the test split)."""

from __future__ import annotations

import json
from dataclasses import asdict

import pytest

from common.config import RunConfig, run_config_errors
from common.evaluate import eval_split
from common.records import config_changes
from envs.registry import ENVS
from envs.testbeds.arith import ArithConfig, ArithEnv
from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv


@pytest.mark.parametrize(("env_cls", "cfg_cls"), [(ArithEnv, ArithConfig), (ToolPlanEnv, ToolPlanConfig)])
def test_dev_is_generated_last_so_every_other_split_is_unchanged(env_cls, cfg_cls):
    without = env_cls(cfg_cls(dev_size=0)).task_set()
    with_dev = env_cls(cfg_cls(dev_size=64)).task_set()
    assert "dev" not in without and len(with_dev["dev"]) == 64
    for split in without:
        assert without[split]["task"] == with_dev[split]["task"], split
    others = {t for split in without for t in without[split]["task"]}
    assert others.isdisjoint(with_dev["dev"]["task"])  # no dev task in train, demo or held-out


def test_every_environment_has_a_dev_split_by_default():
    for name, cls in ENVS.items():
        assert cls.config_class().dev_size > 0, name


def test_eval_split_plays_dev_or_heldout_and_refuses_a_missing_one():
    env = ArithEnv(ArithConfig(dev_size=8, heldout_size=16))
    assert len(eval_split(env, "dev")) == 8 and len(eval_split(env, "heldout")) == 16
    with pytest.raises(ValueError, match="eval.split=dev needs env.dev_size > 0"):
        eval_split(ArithEnv(ArithConfig(dev_size=0)), "dev")
    with pytest.raises(ValueError, match="env.dev_size must be >= 0"):
        ArithEnv(ArithConfig(dev_size=-1))


def test_eval_split_is_checked_with_the_config():
    cfg = RunConfig()
    cfg.eval.split = "test"
    assert any("eval.split must be heldout | dev" in e for e in run_config_errors(cfg))


def test_runs_recorded_before_the_dev_split_are_the_same_experiment():
    new = json.loads(json.dumps(asdict(RunConfig())))
    new["env"] = {"name": "arith", "dev_size": 64}
    old = json.loads(json.dumps(new))
    del old["env"]["dev_size"], old["eval"]["split"]
    assert config_changes(old, new) == []
    new["eval"]["split"] = "dev"
    new["env"]["dev_size"] = 32
    assert config_changes(old, new) == ["env.dev_size: 64 -> 32", 'eval.split: "heldout" -> "dev"']
