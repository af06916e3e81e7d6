"""A method with zero RL steps (training-free) runs through the same `experiments.run` path:
evaluation only, the same records, counted by `paper/`."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_zero_steps_is_an_evaluation_only_run_with_the_same_records(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "experiments.run", "method=grpo", "scale=smoke", "trainer.steps=0",
           "sft.steps=20", f"out_dir={out}", f"work_dir={work}", "progress=false"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    run = out / "grpo" / "arith" / "default" / "seed-0"
    assert {p.name for p in run.iterdir()} >= {"config.yaml", "manifest.json", "eval.json", "done"}
    evals = json.loads((run / "eval.json").read_text())
    assert evals["initial"] == evals["final"] and evals["final"]["step"] == 0  # one evaluation, not two
    assert evals["final"]["n_tasks"] > 0 and 0.0 <= evals["final"]["mean@k"] <= 1.0
    assert not (run / "metrics.jsonl").exists() or not (run / "metrics.jsonl").read_text().strip()

    from paper.load import load_results

    results = load_results(out)
    assert [r.arm for r in results.runs] == ["default"] and not results.problems, results.problems
