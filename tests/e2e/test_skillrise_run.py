"""End to end: real SkillRise runs (smoke scale) on skill_families, the chain arm and the GRPO arm
(marked e2e)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_skillrise_smoke_runs(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    common = [sys.executable, "-m", "experiments.run", "method=skillrise", "scale=smoke", f"out_dir={out}",
              f"work_dir={work}", "progress=false", "trainer.threads=1", "sft.steps=20"]
    for arm in ("skillrise", "grpo"):
        subprocess.run([*common, f"arm={arm}"], cwd=ROOT, check=True, capture_output=True, timeout=300)
    chain = out / "skillrise" / "skill_families" / "skillrise" / "seed-0"
    rows = [json.loads(line) for line in (chain / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    # per step: 2 families x 2 chains x 3 tasks = 12 solves and 2 x 2 x 2 = 8 curate turns, each one call
    assert all(r["model_calls_total/curate"] == 8 * (r["step"] + 1) for r in rows)
    assert all(abs(sum(r[f"doc_{k}"] for k in ("abstract", "concrete", "empty", "other")) - 1) < 1e-9
               for r in rows)
    final = json.loads((chain / "eval.json").read_text())["final"]
    # 12 held-out tasks
    assert set(final["per_tier"]) == {"2", "3", "4"} and final["per_tier"]["2"]["n_tasks"] == 4
    assert ({"doc_abstract", "doc_right", "doc_concrete", "doc_empty"}
            <= set(final["extra"]["curate"]["metrics"]))
    assert set(final["per_role"]) == {"solver"} and set(final["extra"]["curate"]["per_role"]) == {"curator"}

    grpo = out / "skillrise" / "skill_families" / "grpo" / "seed-0"
    rows = [json.loads(line) for line in (grpo / "metrics.jsonl").read_text().splitlines()]
    assert all("model_calls_total/curate" not in r and "doc_abstract" not in r for r in rows)
    final = json.loads((grpo / "eval.json").read_text())["final"]
    assert set(final["per_tier"]) == {"2", "3", "4"} and "extra" not in final
