"""End to end: a real IAPO run (smoke scale) on service_desk's choice setting at D = 8 (marked e2e)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


# #39's choice setting at the smoke scale (20 SFT steps, max_length 208): every action of the untrained
# model is invalid and its D=8 episodes end by the context limit; the rollout records their summary so far
# (`EpisodeState.summary`), so the rows have the env's figures (right_tool, refund_errors) all the same.
@pytest.mark.parametrize("arm", ["iapo", "shuffled", "oracle"])
def test_iapo_smoke_run(tmp_path, arm):
    out, work = tmp_path / "out", tmp_path / "work"
    args = [sys.executable, "-m", "experiments.run", "method=iapo", "scale=smoke", f"arm={arm}",
            f"out_dir={out}", f"work_dir={work}", "progress=false", "trainer.threads=1", "sft.steps=20"]
    subprocess.run(args, cwd=ROOT, check=True, capture_output=True, timeout=300)
    d = out / "iapo" / "service_desk-choice-d8" / arm / "seed-0"
    rows = [json.loads(line) for line in (d / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert all("weight_spread" in r and "right_tool" in r and "refund_errors" in r for r in rows)
    final = json.loads((d / "eval.json").read_text())["final"]
    assert {"right_tool", "refund_errors", "out_of_turns"} <= set(final["metrics"])
    assert set(final["per_tier"]) == {"8"}
