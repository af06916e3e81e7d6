"""End to end: real runs of the GRPO pipeline on the tiny model (marked e2e; they run in CI)."""

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


def run_args(out, work, arm, steps=10):
    # each label is its own out_dir (arm= names only the replication's arms, whose settings it applies)
    return [f"out_dir={Path(out) / arm}", f"work_dir={work}", "scale=smoke", "progress=false",
            "trainer.threads=1", f"trainer.steps={steps}", "trainer.checkpoint_every=2", "eval.max_tasks=8",
            "sft.steps=20", "log.samples_every=3"]


def run_dir(out, arm):
    return Path(out) / arm / "grpo" / "arith" / "default" / "seed-0"


def metrics(path):
    rows = [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rows]


def samples(path):
    return [json.loads(line) for line in (path / "samples.jsonl").read_text().splitlines()]


def evals(path):
    e = json.loads((path / "eval.json").read_text())
    return {k: e[k] for k in ("initial", "final")}


def python(*args):
    return [sys.executable, "-m", "experiments.run", "method=grpo", *args]


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One uninterrupted run."""
    out, work = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("work")
    subprocess.run(python(*run_args(out, work, "a")), cwd=ROOT, check=True, capture_output=True, timeout=600)
    return out, work


def test_run_directory_is_complete(reference):
    out, _ = reference
    d = run_dir(out, "a")
    assert {p.name for p in d.iterdir()} >= {"config.yaml", "manifest.json", "metrics.jsonl", "eval.json",
                                             "done"}
    manifest = json.loads((d / "manifest.json").read_text())
    assert manifest["git_sha"] and "torch" in manifest["packages"] and manifest["seed"] == 0
    # the warm start's code fingerprint
    assert {"envs.testbeds.arith", "common.warmstart"} <= set(manifest["warmstart"]["code"])
    rows = metrics(d)
    assert [r["step"] for r in rows] == list(range(10))
    # every third step and the last, two groups each (log.samples_groups' default)
    assert [(r["step"], r["group"]) for r in samples(d)] == [(s, g) for s in (0, 3, 6, 9) for g in (0, 1)]
    assert rows[-1]["generated_tokens_total"] == sum(r["generated_tokens"] for r in rows)
    for r in rows:  # strictly on-policy: ratio is exactly 1, so nothing is ever clipped
        assert r["clip_fraction"] == 0.0
        assert r["logprob_diff_max"] < 1e-4  # training recomputes the sampled logprobs


def test_same_seed_same_metrics(reference, tmp_path):
    out, work = reference
    # without the sample log: logging it takes nothing from the run's random streams
    subprocess.run(python(*run_args(out, work, "b"), "log.samples_every=0"), cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    assert not (run_dir(out, "b") / "samples.jsonl").exists()
    assert metrics(run_dir(out, "b")) == metrics(run_dir(out, "a"))
    assert evals(run_dir(out, "b")) == evals(run_dir(out, "a"))


def test_finished_run_is_not_overwritten(reference):
    out, work = reference
    d = run_dir(out, "a")
    before = (d / "metrics.jsonl").read_text()
    subprocess.run(python(*run_args(out, work, "a")), cwd=ROOT, check=True, capture_output=True, timeout=600)
    assert (d / "metrics.jsonl").read_text() == before


def test_sigkill_then_resume_gives_the_same_metrics(reference):
    out, work = reference
    d = run_dir(out, "killed")
    proc = subprocess.Popen(python(*run_args(out, work, "killed")), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        ckpt = last_checkpoint(d)
        n = len((d / "metrics.jsonl").read_text().splitlines()) if (d / "metrics.jsonl").exists() else 0
        if ckpt is not None and n >= 5:
            break
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (d / "done").exists(), "the run finished before it could be killed; the test proves nothing"
    killed_at = len((d / "metrics.jsonl").read_text().splitlines())
    assert 0 < killed_at < 10
    subprocess.run(python(*run_args(out, work, "killed")), cwd=ROOT, check=True, capture_output=True,
                   timeout=600)
    assert (d / "done").exists()
    assert json.loads((d / "manifest.json").read_text())["attempts"] == 2
    assert metrics(d) == metrics(run_dir(out, "a"))
    assert samples(d) == samples(run_dir(out, "a"))  # none repeated, none lost
    assert evals(d) == evals(run_dir(out, "a"))
