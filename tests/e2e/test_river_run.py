"""End to end: a real River run (smoke scale) on the sandboxed terminal tasks (marked e2e): the filter
(audit + oracle pass@2 in bubblewrap), the penalty, GRPO steps and the held-out evaluation."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from envs.api import sandbox

pytestmark = [pytest.mark.e2e,
              pytest.mark.skipif(sandbox.available() is not None, reason="no bubblewrap sandbox here")]
ROOT = Path(__file__).resolve().parents[2]


def test_river_smoke_run(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    args = [sys.executable, "-m", "experiments.run", "method=river", "scale=smoke", f"out_dir={out}",
            f"work_dir={work}", "progress=false", "trainer.threads=1", "arm=river"]
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, timeout=600)
    d = out / "river" / "terminal" / "river" / "seed-0"
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert all({"penalized_turn_rate", "train_solved", "train_read_memo", "train_looped"} <= set(r)
               for r in rows)
    final = json.loads((d / "eval.json").read_text())["final"]
    assert {"solved", "looped", "repeat_rate", "read_memo", "failed_actions"} <= set(final["metrics"])
    assert set(final["per_tier"]) == {"1", "2"}  # the composition tier is evaluated
    manifest = json.loads((d / "manifest.json").read_text())
    assert "bubblewrap" in json.dumps(manifest)
    (report,) = (work / "river").glob("filter-*.json")
    audit = json.loads(report.read_text())["audit"]
    assert sum(sum(row.values()) for row in audit.values()) == 48  # every train task audited
