"""The warm start's cache key: it changes with the code that makes the demonstrations (the env's own
source, the SFT code), and only with that code."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from common.config import ModelConfig, SFTConfig
from common.warmstart import warm_start_code, warm_start_key, warm_started_base
from envs.testbeds.arith import ArithConfig, ArithEnv
from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv

PROBE_ENV = '''
from envs.testbeds.arith import ArithEnv
from envs.testbeds.terminal.tasks import make_task  # a helper module of envs: part of this env's code


class ProbeEnv(ArithEnv):
    name = "probe"

    def demonstrator_note(self) -> str:
        return "{note}"
'''


def load_probe(folder: Path, note: str, monkeypatch: pytest.MonkeyPatch) -> type:
    """A throwaway env module on disk (a subclass of arith in a file of its own), imported."""
    path = folder / "warm_probe_env.py"
    path.write_text(PROBE_ENV.format(note=note))
    spec = importlib.util.spec_from_file_location("warm_probe_env", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "warm_probe_env", module)
    spec.loader.exec_module(module)
    return module.ProbeEnv


def key_of(env) -> str:
    return warm_start_key(ModelConfig(), SFTConfig(), env, seed=0)[0]


def test_the_fingerprint_covers_the_env_its_helpers_and_the_sft_code_only():
    code = warm_start_code(ToolHopsEnv(ToolHopsConfig()))
    # toolhops' own module, the planner-and-workers frame it shares with toolplan, the env API, the SFT code
    assert sorted(code) == ["common.chat", "common.models", "common.warmstart", "envs.api.base",
                            "envs.testbeds.toolhops", "envs.testbeds.toolplan"]
    assert all(len(h) == 16 for h in code.values())
    arith = warm_start_code(ArithEnv(ArithConfig()))
    assert "envs.testbeds.arith" in arith and "envs.testbeds.toolhops" not in arith
    assert arith["envs.api.base"] == code["envs.api.base"]


def test_editing_the_env_source_changes_the_key_and_an_unrelated_file_does_not(tmp_path, monkeypatch):
    probe = load_probe(tmp_path, "first", monkeypatch)
    env = probe(ArithConfig(train_size=8, heldout_size=4, dev_size=4))
    key, code = warm_start_key(ModelConfig(), SFTConfig(), env, seed=0)
    assert {"warm_probe_env", "envs.testbeds.arith", "envs.testbeds.terminal.tasks"} <= set(code)
    assert key_of(env) == key  # deterministic

    (tmp_path / "unrelated.py").write_text("X = 1\n")  # a file no module of the env draws on
    assert key_of(env) == key

    path = tmp_path / "warm_probe_env.py"
    path.write_text(path.read_text().replace('"first"', '"second"'))  # the env's demonstrator changed on disk
    edited, edited_code = warm_start_key(ModelConfig(), SFTConfig(), env, seed=0)
    assert edited != key and edited_code["warm_probe_env"] != code["warm_probe_env"]
    assert ({k: v for k, v in edited_code.items() if k != "warm_probe_env"}
            == {k: v for k, v in code.items() if k != "warm_probe_env"})


def test_the_key_still_follows_the_settings():
    env = ArithEnv(ArithConfig(train_size=8, heldout_size=4, dev_size=4))
    base = key_of(env)
    assert key_of(ArithEnv(ArithConfig(train_size=9, heldout_size=4, dev_size=4))) != base
    # the SFT seed defaults to the run's
    assert warm_start_key(ModelConfig(), SFTConfig(), env, seed=1)[0] != base
    # no SFT: the seed plays no part
    assert (warm_start_key(ModelConfig(), SFTConfig(enabled=False), env, seed=1)[0]
            == warm_start_key(ModelConfig(), SFTConfig(enabled=False), env, seed=0)[0])


def test_the_record_of_a_warm_start_holds_its_key_and_code(tmp_path):
    env = ArithEnv(ArithConfig(train_size=16, heldout_size=4, dev_size=4, max_value=20))
    cfg = ModelConfig()
    _, _, info = warm_started_base(cfg, SFTConfig(enabled=False), env, 0, str(tmp_path))
    key, code = warm_start_key(cfg, SFTConfig(enabled=False), env, 0)
    assert info["key"] == key and info["code"] == code
    assert (tmp_path / "warmstart" / key / "warmstart.json").is_file()
    # read back from the cache
    _, _, again = warm_started_base(cfg, SFTConfig(enabled=False), env, 0, str(tmp_path))
    assert again == info
