"""End to end: InFlowOp at the smoke scale through the training-free path of `experiments.run`
(trainer.steps=0: one held-out evaluation, the same records as a trained run), two arms, counted by paper/."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_inflowop_smoke_runs_two_arms_and_paper_counts_them(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    for arm in ("single", "inflowop"):
        args = [sys.executable, "-m", "experiments.run", "method=inflowop", "scale=smoke", f"arm={arm}",
                f"out_dir={out}", f"work_dir={work}", "progress=false", "trainer.threads=1"]
        proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-2000:]
    finals = {}
    for arm in ("single", "inflowop"):
        d = out / "inflowop" / "braid" / arm / "seed-0"
        assert (d / "done").exists() and not (d / "metrics.jsonl").read_text().strip()
        evals = json.loads((d / "eval.json").read_text())
        assert evals["initial"] == evals["final"] and evals["final"]["n_tasks"] == 16
        finals[arm] = evals["final"]
    assert ({"latency", "repair_latency", "success_lists", "latency_mixed"}
            <= set(finals["inflowop"]["metrics"]))
    assert (finals["single"]["metrics"]["subtasks"] == 1.0
            and finals["single"]["metrics"]["repair_calls"] == 0.0)
    assert set(finals["inflowop"]["per_tier"]) == {str(d) for d in range(8)}

    from paper.load import load_results

    results = load_results(out)
    assert (sorted(r.arm for r in results.runs) == ["inflowop", "single"]
            and not results.problems), results.problems
    from replications.inflowop.tables import domains_table, workflow_table

    assert len(workflow_table(results.runs).rows) == 2 and len(domains_table(results.runs).rows) == 8
