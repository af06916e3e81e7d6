"""End to end: a real SkillRise run (smoke scale, cut shorter) on chain_tasks' families (`env=chain_tasks
+env.families=true`, envs/testbeds/chain_families.py): the SFT warm start on the demo split's scripted chains,
chains of solve and curate turns, the chain credit and the held-out evaluation by chain position (marked
e2e)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def test_skillrise_runs_on_chain_tasks_families(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "experiments.run", "method=skillrise", "scale=smoke", "env=chain_tasks",
           "+env.families=true", "env.train_size=60", "env.heldout_size=12", "env.dev_size=12",
           "env.demo_size=90", "sft.steps=20", "sft.demos=150", "trainer.steps=2", f"out_dir={out}",
           f"work_dir={work}", "progress=false", "trainer.threads=1"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = out / "skillrise" / "chain_tasks" / "default" / "seed-0"
    assert (run / "done").exists()
    assert yaml.safe_load((run / "config.yaml").read_text())["env"]["families"] is True
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    # per step: 2 families x 2 chains x 3 tickets = 12 solves and 2 x 2 x 2 = 8 curate turns, one call each
    assert all(r["model_calls_total/curate"] == 8 * (r["step"] + 1) for r in rows)
    assert all(abs(sum(r[f"doc_{k}"] for k in ("abstract", "concrete", "empty", "other")) - 1) < 1e-9
               for r in rows)
    wanted = {"success_tier2", "success_tier3", "success_tier4", "curate_reward_mean"}
    assert all(wanted <= set(r) for r in rows)
    final = json.loads((run / "eval.json").read_text())["final"]
    # 12 held-out tickets: 4 families, one ticket per plan length
    assert {k: v["n_tasks"] for k, v in final["per_tier"].items()} == {"2": 4, "3": 4, "4": 4}
    curate = final["extra"]["curate"]
    assert {"doc_abstract", "doc_right", "doc_concrete", "doc_empty"} <= set(curate["metrics"])
    assert set(final["per_role"]) == {"solver"} and set(curate["per_role"]) == {"curator"}
