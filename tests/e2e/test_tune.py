"""`make tune-<method>` (experiments/tune.py): every arm the same sweep on the dev split, the
selection written, and the replication then runs each arm at its selection."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from experiments import tune
from experiments.replicate import Cell, plan, tuning_path

ROOT = Path(__file__).resolve().parents[2]


def finished(cell: Cell, score: float | None) -> None:
    cell.run_dir.mkdir(parents=True)
    if score is not None:
        (cell.run_dir / "eval.json").write_text(json.dumps({"final": {"mean@k": score}}))
        (cell.run_dir / "done").write_text("x\n")


def test_each_arm_selects_its_best_mean_dev_score_first_in_grid_order_on_ties(tmp_path):
    sweep = tune.Sweep(["a", "b"], "trainer.lr", [1e-3, 2e-3, 4e-3], [0, 1])
    scores = {("a", 0): [0.5, 0.7], ("a", 1): [0.8, 0.6], ("a", 2): [0.1, 0.2],  # a: 0.6, 0.7, 0.15
              ("b", 0): [0.4, 0.4], ("b", 1): [0.3, 0.5], ("b", 2): [0.2, 0.2]}  # b: a tie of 0.4 and 0.4
    for (arm, i), per_seed in scores.items():
        sweep.cells[arm, i] = [Cell("m", "e", arm, s, "cpu", (), str(tmp_path / f"{i}"), "w") for s in (0, 1)]
        for cell, score in zip(sweep.cells[arm, i], per_seed, strict=True):
            finished(cell, score)
    arms = tune.select(sweep)
    assert arms["a"]["scores"] == pytest.approx({"0.001": 0.6, "0.002": 0.7, "0.004": 0.15})
    assert arms["a"]["selected"] == 2e-3 and arms["a"]["override"] == "trainer.lr=0.002"
    assert arms["b"]["selected"] == 1e-3  # the tie goes to the first value of the grid
    # a value with an unfinished run selects nothing for that arm
    sweep.cells["b", 2].append(Cell("m", "e", "b", 2, "cpu", (), str(tmp_path / "x"), "w"))
    assert tune.select(sweep)["b"]["selected"] is None and tune.select(sweep)["b"]["scores"]["0.004"] is None


def test_the_default_grid_is_the_scales_lr_times_half_one_two_and_bad_grids_are_refused():
    sweep = tune.sweep_of("grpo", "smoke")
    assert sweep.setting == "trainer.lr" and sweep.values == [5e-4, 1e-3, 2e-3] and sweep.seeds == [0]
    assert sweep.arms == ["grpo"]
    with pytest.raises(ValueError, match="at least two distinct values"):
        tune.sweep_of("grpo", "smoke", grid="trainer.lr=1e-3")
    with pytest.raises(ValueError, match="write one setting and its values"):
        tune.sweep_of("grpo", "smoke", grid="trainer.lr")
    with pytest.raises(ValueError, match=r"has no arm\(s\) \['nope'\]"):
        tune.sweep_of("grpo", "smoke", arms=["nope"])


@pytest.mark.e2e
def test_tune_then_replicate_runs_each_arm_at_its_dev_selection(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "experiments.tune", "--method", "grpo", "--scale", "smoke",
           "--grid", "trainer.lr=1e-3,3e-3", f"out_dir={out}", f"work_dir={work}", "trainer.steps=1",
           "env.dev_size=8", "sft.steps=20"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(tuning_path(out, "grpo", "smoke").read_text())
    assert data["split"] == "dev" and data["grid"] == [1e-3, 3e-3] and data["seeds"] == [0]
    scores = data["arms"]["grpo"]["scores"]
    assert set(scores) == {"0.001", "0.003"} and all(0 <= s <= 1 for s in scores.values())
    best = max(scores, key=lambda v: (scores[v], -float(v)))  # the tie rule: the first (smaller) value
    assert data["arms"]["grpo"]["override"] == f"trainer.lr={float(best)}"
    for value in ("0.001", "0.003"):  # the sweep's runs evaluated dev and live under work_dir, not out_dir
        run = work / "tune" / "grpo" / "smoke" / f"lr-{value}" / "grpo" / "arith" / "grpo" / "seed-0"
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["eval_split"] == "dev" and (run / "done").exists()
        assert json.loads((run / "eval.json").read_text())["final"]["n_tasks"] == 8
    assert not (out / "grpo" / "arith").exists()
    (cell,) = plan("grpo", "smoke", None, (f"out_dir={out}", f"work_dir={work}"))
    assert f"trainer.lr={float(best)}" in cell.overrides
