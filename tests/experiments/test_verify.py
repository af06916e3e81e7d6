"""`make verify` (#47): which committed cells it reruns and how it judges a rerun: number for number on
the committed run's CPU class, within the arm's prediction interval on another."""

from __future__ import annotations

import json

import pytest

from experiments import verify
from experiments.replicate import Cell


def _run(folder, final, class_=None, rows=(0.5, 0.25), started="2026-01-01T00:00:00+0000"):
    folder.mkdir(parents=True)
    (folder / "eval.json").write_text(json.dumps({"final": {"mean@k": final, "k": 4},
                                                  "initial": {"mean@k": 0.1}}))
    (folder / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "loss": v, "time_step_s": 0.3 + i})
                                                  + "\n" for i, v in enumerate(rows)))
    manifest = {"started": started, "attempts": 1}
    if class_ is not None:
        machine, flags, packages, hash_seed = class_
        manifest |= {"cpu": {"machine": machine, "flags": list(flags)}, "python_hash_seed": hash_seed,
                     "packages": dict(zip(verify.CLASS_PACKAGES, packages, strict=True))}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (folder / "done").write_text("")


def _cell(tmp_path):
    return Cell("grpo", "arith", "grpo", 0, "cpu", ("scale=cpu", "seed=0", "arm=grpo"),
                str(tmp_path / "results"), str(tmp_path / "work"), 2)


def test_first_difference_names_the_place():
    assert verify.first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) is None
    assert (verify.first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]})
            == "a[1].b: 2 (committed) vs 3 (rerun)")
    assert verify.first_difference({"a": [1]}, {"a": [1, 2]}) == "a: 1 vs 2 entries"
    assert verify.first_difference({"a": 1}, {"a": 1, "c": 0}) == ".c: only in the rerun"


def test_timing_fields_are_never_compared():
    row = {"step": 3, "loss": 0.5, "time_step_s": 1.2, "time_rollout_s": 0.3, "metrics": {"run_seconds": 2.0}}
    assert verify.without_timing(row) == {"step": 3, "loss": 0.5, "metrics": {}}


def test_on_the_same_cpu_class_a_rerun_must_be_identical(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    cell = _cell(tmp_path)
    _run(cell.run_dir, 0.75, verify.this_class())
    _run(tmp_path / "rerun-a", 0.75, rows=(0.5, 0.25))
    check = verify.judge(cell, tmp_path / "rerun-a")
    assert check.outcome == "identical", check.detail
    _run(tmp_path / "rerun-b", 0.75, rows=(0.5, 0.2500001))
    check = verify.judge(cell, tmp_path / "rerun-b")
    assert check.outcome == "differs" and "metrics.jsonl[1].loss" in check.detail


def test_on_another_cpu_class_a_rerun_must_fall_in_the_arms_prediction_interval(tmp_path):
    cell = _cell(tmp_path)
    other = ("x86_64", ("avx2",), ("0.0",) * 3, "0")
    for seed, final in enumerate([0.70, 0.72, 0.74]):  # mean 0.72, s 0.02: 0.72 +- 4.302653 * 0.02 * 1.154701
        _run(cell.run_dir.parent / f"seed-{seed}", final, other)
    _run(tmp_path / "inside", 0.80)
    check = verify.judge(cell, tmp_path / "inside")
    assert check.outcome == "statistically equal" and "[0.6206, 0.8194]" in check.detail
    _run(tmp_path / "outside", 0.83)
    assert verify.judge(cell, tmp_path / "outside").outcome == "differs"


def test_the_pinned_cells_are_each_methods_main_arm_at_seed_0():
    cells = {c.method: c for m in ("grpo", "sharp") for c in verify.pinned(m, "cpu")}
    assert (cells["grpo"].arm, cells["grpo"].seed) == ("grpo", 0)
    assert (cells["sharp"].arm, cells["sharp"].seed) == ("sharp-exact-k2", 0)


def test_an_unknown_method_is_one_line(capsys):
    assert verify.main(["--method", "nope", "--dry-run"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown method 'nope'")


@pytest.mark.parametrize("path,method,expected", [
    ("common/trainer.py", "grpo", True), ("replications/grpo/method.py", "grpo", True),
    ("replications/sharp/method.py", "grpo", False), ("replications/grpo/tables.py", "grpo", False),
    ("replications/grpo/CARD.md", "grpo", False), ("paper/report.py", "grpo", False),
    ("experiments/run.py", "grpo", True), ("tests/common/test_loss.py", "grpo", False),
    ("replications/_template/method.py", "grpo", False), ("constraints.txt", "grpo", True)])
def test_which_files_affect_a_methods_results(path, method, expected):
    from paper.staleness import affects

    assert affects(path, method, frozenset({"grpo", "sharp"})) is expected


def test_a_rerun_uses_the_committed_runs_thread_count(tmp_path):
    """IAPO's pinned cell ran on 1 thread (2 cells side by side) and differed when rerun alone on 2."""
    cell = _cell(tmp_path)
    _run(cell.run_dir, 0.5)
    manifest = json.loads((cell.run_dir / "manifest.json").read_text())
    unpinned = verify.rerun_cell(cell, tmp_path / "v").overrides
    assert not [o for o in unpinned if o.startswith("trainer.threads")]
    (cell.run_dir / "manifest.json").write_text(json.dumps(manifest | {"torch_threads": 1}))
    rerun = verify.rerun_cell(cell, tmp_path / "v")
    assert "trainer.threads=1" in rerun.overrides and rerun.out_dir == str(tmp_path / "v")
