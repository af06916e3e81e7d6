"""End to end with two processes on CPU (Lightning's DDP, gloo; marked e2e): the GRPO smoke
replication with trainer.devices=2, and a two-rank run killed mid-run that resumes to the same
records as an uninterrupted one."""

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


def run_args(out, work, steps=10):
    # 8 tasks a step (4 per rank) and an evaluation every 2 steps: gradients, gathered metrics and evaluations
    return [f"out_dir={out}", f"work_dir={work}", "scale=smoke", "progress=false", "trainer.threads=1",
            "trainer.devices=2", f"trainer.steps={steps}", "trainer.tasks_per_step=8",
            "trainer.checkpoint_every=2", "eval.every=4", "eval.max_tasks=8"]


def python(*args):
    return [sys.executable, "-m", "experiments.run", "method=grpo", *args]


def run_dir(out):
    return Path(out) / "grpo" / "arith" / "default" / "seed-0"


def metrics(path):
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def evals(path):
    return json.loads((path / "eval.json").read_text())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("work")  # the warm start, built once, read by every run here


@pytest.fixture(scope="module")
def reference(tmp_path_factory, work):
    """One uninterrupted two-rank run."""
    out = tmp_path_factory.mktemp("reference")
    subprocess.run(python(*run_args(out, work)), cwd=ROOT, check=True, capture_output=True, timeout=600)
    return run_dir(out)


def test_two_rank_run_records_the_whole_run_once(reference):
    manifest = json.loads((reference / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["ranks_started_by"] == "lightning"
    first, second = manifest["adapter_sha1_by_rank"]  # the ranks' adapters after training: summed gradients
    assert first == second
    rows = metrics(reference)
    assert [r["step"] for r in rows] == list(range(10))  # one row per step: rank 0 alone writes
    assert any(r["grad_norm"] > 0 for r in rows)  # the adapters moved: the equal digests prove something
    assert all(r["rows"] == 32 for r in rows)  # 8 tasks x 4 episodes, both ranks' rows counted
    assert rows[-1]["generated_tokens_total"] == sum(r["generated_tokens"] for r in rows)
    e = evals(reference)
    assert [h["step"] for h in e["history"]] == [4, 8] and e["final"]["step"] == 10
    for record in (e["initial"], e["final"], *e["history"]):
        assert record["n_tasks"] == 8  # every held-out task, each rank's share gathered
    assert e["final"]["generated_tokens_total"] == rows[-1]["generated_tokens_total"]


def test_kill_both_ranks_then_resume_gives_the_same_records(reference, tmp_path, work):
    d = run_dir(tmp_path)
    # rank 1 is started in its group
    proc = subprocess.Popen(python(*run_args(tmp_path, work)), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        n = len((d / "metrics.jsonl").read_text().splitlines()) if (d / "metrics.jsonl").exists() else 0
        if last_checkpoint(d) is not None and n >= 5:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)  # both ranks at once
    proc.wait()
    assert not (d / "done").exists(), "the run finished before it could be killed; the test proves nothing"
    assert 0 < len((d / "metrics.jsonl").read_text().splitlines()) < 10
    subprocess.run(python(*run_args(tmp_path, work)), cwd=ROOT, check=True, capture_output=True, timeout=600)
    manifest = json.loads((d / "manifest.json").read_text())
    assert (d / "done").exists() and manifest["attempts"] == 2 and manifest["state_at_start"] == "resume"
    assert metrics(d) == metrics(reference)
    assert evals(d) == evals(reference)


def test_make_replicate_with_two_devices(tmp_path, work):
    """`make replicate-grpo SCALE=smoke ARGS="trainer.devices=2"`: the cell runs as two processes."""
    out = tmp_path / "out"
    # -o setup: the suite is installed, never reinstalled here
    make = ["make", "-o", "setup", f"PY={sys.executable}"]
    done = subprocess.run([*make, "replicate-grpo", "SCALE=smoke",
                           f"ARGS=trainer.devices=2 out_dir={out} work_dir={work}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (manifest_path,) = out.glob("grpo/*/*/seed-*/manifest.json")
    manifest = json.loads(manifest_path.read_text())
    assert manifest["world_size"] == 2 and len(set(manifest["adapter_sha1_by_rank"])) == 1
    assert (manifest_path.parent / "done").exists()
    assert "| arith | GRPO | 1 |" in done.stdout  # the replication's tables, from the run rank 0 wrote
