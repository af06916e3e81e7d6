"""`make compare` leaves its plan as data (`<out_dir>/compare/plan-<scale>.json`) for paper/head_to_head.py,
which imports neither the runner nor the methods; the committed cpu and small plans are the code's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from experiments import compare
from experiments.compare import load_settings, matrix, plan_data, write_plan
from paper.head_to_head import plan_path
from replications import METHODS

REPO = Path(__file__).resolve().parents[2]


def test_the_plan_is_the_whole_declared_comparison():
    """Every column with a budget at the scale (terminal-smollm2 has one at small only: not a column at cpu,
    where the paper would show it as missing cells)."""
    data = plan_data("cpu")
    settings = {t: s for t, s in load_settings().items() if t != "terminal-smollm2"}
    assert data["methods"] == list(METHODS) and data["envs"] == list(settings) and data["baseline"] == "grpo"
    applies = matrix(list(METHODS), settings)
    assert all(data["applies"][m][t] == applies[m, t] for m in METHODS for t in settings)
    assert data["seeds"]["arith"] == list(range(7))  # grpo's cpu replication: seeds 0-6
    assert plan_data("nosuchscale")["envs"] == []


@pytest.mark.parametrize("scale", ["cpu", "small"])
def test_the_committed_plans_are_current(scale):
    path = plan_path(REPO / "results", scale)
    assert json.loads(path.read_text()) == plan_data(scale), (
        f"results/compare/plan-{scale}.json is out of date: PYTHONPATH=. python -c "
        f"\"from experiments.compare import write_plan; write_plan('results', '{scale}')\"")


def test_a_run_writes_the_plan_and_a_dry_run_does_not(tmp_path, monkeypatch):
    monkeypatch.setattr(compare, "launch_local", lambda cells, parallel, work: [])  # run nothing
    monkeypatch.setattr(compare, "compare_tables", lambda method, scale, cells: "")
    args = ["--scale", "smoke", "--envs", "arith", "--methods", "grpo", "--out-dir", str(tmp_path)]
    assert compare.main([*args, "--dry-run"]) == 0
    assert not plan_path(tmp_path, "smoke").exists()
    assert compare.main(args) == 0
    assert json.loads(plan_path(tmp_path, "smoke").read_text()) == plan_data("smoke")  # all methods, all envs
    assert write_plan(tmp_path, "smoke") == tmp_path / "compare" / "plan-smoke.json"


def test_the_small_plan_holds_the_small_column_only(tmp_path):
    """At small scale only terminal-smollm2 has a budget: the cpu columns (whose homes play other environments
    at small, and whose overrides are written for their homes' cpu scales) are left out by compare.yaml's
    `scales`, so a small run's plan writes (it stopped composing chain_tasks-families' overrides on CANOPY's
    BFCL config before; the columns of #23-#45 stopped it with 'arith says env arith, but ...')."""
    data = json.loads(write_plan(tmp_path, "small").read_text())
    assert data["envs"] == ["terminal-smollm2"] and list(data["seeds"]) == ["terminal-smollm2"]
