"""End to end: River runs (smoke scale: the tiny model, its SFT warm start, the filter, two GRPO steps, the
held-out evaluation) on the defective pools of `arith` and `service_desk` (#46; marked e2e)."""

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest

from common.fit import resolve
from experiments.run import compose
from replications import METHODS

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("env,tag,more", [("arith_defects", "arith-defects", set()),
                                          ("service_desk_defects", "service_desk-defects",
                                           {"train_looped", "train_repeat_rate"})])
def test_river_smoke_run(env, tag, more, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    args = [sys.executable, "-m", "experiments.run", "method=river", "scale=smoke", f"env={env}",
            f"out_dir={out}", f"work_dir={work}", "progress=false", "trainer.threads=1", "arm=river"]
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, timeout=600)
    d = out / "river" / tag / "river" / "seed-0"
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert all({"pool_size", "pool_defective", "pool_shortcut", "train_solved", "train_shortcut",
                "penalized_turn_rate"} | more <= set(r) for r in rows)
    final = json.loads((d / "eval.json").read_text())["final"]
    assert {"solved", "shortcut"} | {m.removeprefix("train_") for m in more} <= set(final["metrics"])
    # the filter audited every train task against its label, and the pool is what it kept
    (report,) = (work / "river").glob("filter-*.json")
    report = json.loads(report.read_text())
    method = resolve(compose("river", ["scale=smoke", f"env={env}", f"work_dir={work}"]), METHODS).method
    labels = [method.env.defect_of(json.loads(t)) for t in method.env.task_set()["train"]["task"]]
    assert len(labels) == 48 and len(set(labels)) > 2
    assert {k: sum(row.values()) for k, row in report["audit"].items()} == collections.Counter(labels)
    assert rows[0]["pool_size"] == len(report["kept"]) > 0
    assert "reject" not in report["kept_by_defect"] and "unsolvable" not in report["kept_by_defect"]
