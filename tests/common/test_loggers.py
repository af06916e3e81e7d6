"""Loggers as optional installs (#44): a logger whose package is absent is refused in one line before
anything starts (whatever this machine has installed: the packages' presence is faked both ways); the
W&B project is a setting and a run's name its identity; the sample log's settings are checked."""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from common.config import RunConfig, run_config_errors
from common.fit import run_name, wandb_project
from common.records import RunDir
from experiments.replicate import plan, validate_cells
from experiments.run import compose


def _packages(monkeypatch, installed: bool) -> None:
    """tensorboard and wandb importable or not, as asked; every other package as it is."""
    real = importlib.util.find_spec

    def find_spec(name, *args, **kwargs):
        if name in ("tensorboard", "wandb"):
            return real("json") if installed else None  # any spec stands for "importable"
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("logger", ["tensorboard", "wandb"])
def test_a_logger_without_its_package_is_one_line_before_any_warm_start(logger, tmp_path, capsys,
                                                                         monkeypatch):
    from experiments.run import main

    _packages(monkeypatch, installed=False)
    out, work = tmp_path / "out", tmp_path / "work"
    monkeypatch.setattr(sys, "argv", ["experiments.run"])
    with pytest.raises(SystemExit) as exit_:
        main(["method=grpo", "scale=smoke", f"out_dir={out}", f"work_dir={work}", "progress=false",
              f"loggers=[csv,{logger}]"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2
    assert len(err.splitlines()) == 1, err
    assert re.search(rf"loggers=\[{logger}\] but the {logger} package is not installed: run `make setup "
                     r"LOGGERS=1`", err), err
    assert not out.exists() and not work.exists()  # no run folder, no warm start


def test_a_replication_refuses_before_any_cell_or_submission(tmp_path, monkeypatch):
    _packages(monkeypatch, installed=False)
    cells = plan("grpo", "smoke", seeds=[0], extra_overrides=(f"out_dir={tmp_path}", "loggers=[wandb]"))
    with pytest.raises(ValueError, match="wandb package is not installed"):
        validate_cells(cells)
    assert not any(tmp_path.iterdir())


def test_an_installed_logger_passes(monkeypatch):
    _packages(monkeypatch, installed=True)
    cfg = compose("grpo", ["scale=smoke", "loggers=[csv,tensorboard,wandb]"])
    assert run_config_errors(cfg) == []
    _packages(monkeypatch, installed=False)
    assert len(run_config_errors(cfg)) == 2  # the same config, without the packages


def test_the_wandb_project_is_a_setting_and_the_run_name_its_identity(tmp_path):
    cfg = compose("grpo", ["scale=smoke", "arm=grpo", "seed=3"])
    assert wandb_project(cfg) == "llm-agent-rl-grpo"
    cfg.log.wandb_project = "my-lab"
    assert wandb_project(cfg) == "my-lab"
    run = RunDir.for_run(str(tmp_path / "out"), str(tmp_path / "work"), "grpo", "arith", "grpo", 3)
    assert run_name(run) == "grpo/arith/grpo/seed-3"


@pytest.mark.parametrize("log, message", [
    ({"samples_every": -1}, "log.samples_every must be >= 0"),
    ({"samples_groups": 0}, "log.samples_groups must be >= 1"),
    ({"wandb_project": " "}, "log.wandb_project is empty"),
])
def test_the_sample_log_settings_are_checked(log, message):
    cfg = RunConfig()
    for key, value in log.items():
        setattr(cfg.log, key, value)
    assert [e for e in run_config_errors(cfg) if re.search(message, e)]
    cfg.log.samples_every = 0  # no samples: their group count does not matter
    assert not [e for e in run_config_errors(cfg) if "samples_groups" in e]
