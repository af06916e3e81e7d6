"""End to end: a real SHARP run (smoke scale) on the toolplan environment (marked e2e)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_sharp_smoke_run(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    args = [sys.executable, "-m", "experiments.run", "method=sharp", "scale=smoke", f"out_dir={out}",
            f"work_dir={work}", "progress=false", "trainer.threads=1", "method.credit=exact", "sft.steps=20"]
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, timeout=300)
    d = out / "sharp" / "toolplan-k3" / "default" / "seed-0"
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert rows[-1]["rescores_total"] == sum(r["rescores"] for r in rows)
    assert all("model_calls_total/main" in r for r in rows)
    final = json.loads((d / "eval.json").read_text())["final"]
    assert {"distractor_rate", "exact_match", "slot_accuracy"} <= set(final["metrics"])
    assert set(final["per_role"]) <= {"planner", "worker"}
