"""End to end: CANOPY smoke runs on chain_tasks (marked e2e; they run in CI).

One update per batch really is on-policy (the recomputed log-probabilities equal the sampled ones,
so the ratio is 1 and clipping never fires), two updates are not; the pilot sizes the group once,
and a run killed after it resumes without running it again and ends with the same metrics.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import last_checkpoint

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
TIMING = ("time_rollout_s", "time_reference_s", "time_train_s", "time_step_s")


def args(out, work, arm, *extra):
    # each label is its own out_dir (arm= names only the replication's arms, whose settings it applies)
    return [sys.executable, "-m", "experiments.run", "method=canopy", "scale=smoke",
            f"out_dir={Path(out) / arm}", f"work_dir={work}", "progress=false", "trainer.threads=1",
            "trainer.steps=4", *extra]


def rows(out, arm):
    path = Path(out) / arm / "canopy" / "chain_tasks" / "default" / "seed-0" / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    out, work = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("work")
    for arm, extra in (("full", ()), ("two-updates", ("trainer.minibatches=2", "trainer.lr=2e-2"))):
        subprocess.run(args(out, work, arm, *extra), cwd=ROOT, check=True, capture_output=True, timeout=900)
    return out, work


def test_one_update_per_batch_has_ratio_one(runs):
    full = rows(runs[0], "full")
    assert [r["step"] for r in full] == [0, 1, 2, 3]
    for r in full:
        assert r["clip_fraction"] == 0.0
        assert r["logprob_diff_max"] < 1e-4  # the recomputed log-probabilities are the sampled ones: rho = 1
    two = rows(runs[0], "two-updates")
    assert max(r["logprob_diff_max"] for r in two[1:]) > 1e-2  # the second mini-batch is off-policy


def test_pilot_sizes_the_group_once_and_counts_its_compute(runs):
    full = rows(runs[0], "full")
    first = full[0]
    assert first["generated_tokens_total/pilot"] > 0 and 2 <= first["group_size"] <= 8
    assert first["pilot_episodes"] <= 64 and 0.0 <= first["pilot_success"] <= 1.0
    assert {r["group_size"] for r in full} == {first["group_size"]}
    assert {r["generated_tokens_total/pilot"] for r in full} == {first["generated_tokens_total/pilot"]}
    assert sum(r["quarantined"] for r in full) > 0  # smoke faults 10% of episodes


def test_killed_run_resumes_without_a_second_pilot(runs):
    out, work = runs
    proc = subprocess.Popen(args(out, work, "killed", "trainer.checkpoint_every=1"), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    run = Path(out) / "killed" / "canopy" / "chain_tasks" / "default" / "seed-0"
    deadline = time.time() + 600
    while time.time() < deadline and not (last_checkpoint(run) is not None and len(rows(out, "killed")) >= 2):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = len(rows(out, "killed"))
    assert 0 < killed_at < 4, "the run finished before it could be killed; the test proves nothing"
    subprocess.run(args(out, work, "killed", "trainer.checkpoint_every=1"), cwd=ROOT, check=True,
                   capture_output=True, timeout=900)
    strip = [{k: v for k, v in r.items() if k not in TIMING} for r in rows(out, "killed")]
    assert strip == [{k: v for k, v in r.items() if k not in TIMING} for r in rows(out, "full")]
