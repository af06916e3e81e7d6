"""`make replicate-grpo SCALE=smoke` through the real local launcher (submitit), then the table."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_smoke_replication_end_to_end(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "replications.replicate", "--method", "grpo", "--scale", "smoke",
           f"out_dir={out}", f"work_dir={work}"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    elapsed = time.time() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert elapsed < 120, f"smoke replication took {elapsed:.0f} s (budget: 2 minutes)"
    cell = out / "grpo" / "arith" / "grpo" / "seed-0"
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "eval.json", "done"):
        assert (cell / name).exists(), name
    assert "| arith | grpo | 1/1 |" in proc.stdout
    summary = json.loads((out / "grpo" / "summary-smoke.json").read_text())
    assert summary["missing"] == [] and summary["arms"]["arith/grpo"]["n"] == 1
    # a rerun skips the finished cell and changes nothing
    before = (cell / "metrics.jsonl").read_text()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and (cell / "metrics.jsonl").read_text() == before


def test_bad_config_fails_before_any_cell_runs(tmp_path):
    cmd = [sys.executable, "-m", "replications.replicate", "--method", "grpo", "--scale", "smoke",
           f"out_dir={tmp_path}", "trainer.kl.estimator=k9", "trainer.kl.coef=0.1", "trainer.kl.placement=loss"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "unknown KL estimator" in proc.stderr and "choose k1 | k2 | k3" in proc.stderr
    assert not any(tmp_path.iterdir())
