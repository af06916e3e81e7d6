"""End to end: a finished run re-asked is skipped or refused, FORCE reruns it beside the finished
records and swaps it in, and its checkpoints are its own (real runs on the tiny model)."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def run(out, work, *extra):
    args = [f"out_dir={out}", f"work_dir={work}", "scale=smoke", "progress=false", "trainer.threads=1",
            "trainer.steps=4", "trainer.checkpoint_every=1", "eval.max_tasks=4", "sft.steps=20", *extra]
    return subprocess.run([sys.executable, "-m", "experiments.run", "method=grpo", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def test_a_finished_run_is_skipped_refused_or_forced(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    first = run(out, work)
    assert first.returncode == 0, first.stderr[-3000:]
    d = out / "grpo" / "arith" / "default" / "seed-0"
    manifest = json.loads((d / "manifest.json").read_text())
    checkpoints = Path(manifest["checkpoints"])
    assert checkpoints.parent == (work / "checkpoints").absolute()
    assert json.loads((checkpoints / "identity.json").read_text()) == {"run_dir": str(d.resolve()),
                                                                      "config_hash": manifest["config_hash"]}
    assert (checkpoints / "last.ckpt").exists() and (checkpoints / "prev.ckpt").exists()
    # as the difference shows it
    lr = json.dumps(yaml.safe_load((d / "config.yaml").read_text())["trainer"]["lr"])
    finished = (d / "metrics.jsonl").read_text()

    again = run(out, work)
    assert again.returncode == 0 and f"already finished, skipped: {d}" in again.stdout, again.stderr[-3000:]

    other = run(out, work, "trainer.lr=0.5")
    assert other.returncode != 0 and f"trainer.lr: {lr} -> 0.5" in other.stderr, other.stderr[-3000:]
    assert (d / "metrics.jsonl").read_text() == finished

    forced = run(out, work, "trainer.lr=0.5", "force=true")
    assert forced.returncode == 0, forced.stderr[-3000:]
    assert (d / "done").exists() and (d / "metrics.jsonl").read_text() != finished
    assert not any(p.is_file() for p in (out / ".forcing").rglob("*"))
    after = json.loads((d / "manifest.json").read_text())
    assert after["config_hash"] != manifest["config_hash"] and after["attempts"] == 1
    assert ([p.name for p in (work / "checkpoints").iterdir() if p.is_dir()]
            == [Path(after["checkpoints"]).name])
    assert f"already finished, skipped: {d}" in run(out, work, "trainer.lr=0.5").stdout


def test_two_work_dirs_racing_for_one_run_folder_leave_one_complete_run(tmp_path):
    """Issue 34: a second process of the same run folder with another work_dir, started while the first
    runs, is refused in one line; the first run's records are complete and its own."""
    out = tmp_path / "out"
    d = out / "grpo" / "arith" / "default" / "seed-0"
    args = [f"out_dir={out}", "scale=smoke", "progress=false", "trainer.threads=1", "trainer.steps=12",
            "trainer.checkpoint_every=1", "eval.max_tasks=4", "sft.steps=60"]
    command = [sys.executable, "-m", "experiments.run", "method=grpo", *args]
    first = subprocess.Popen([*command, f"work_dir={tmp_path / 'work-a'}"], cwd=ROOT, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (d / "config.yaml").exists():  # written once the first holds the lock
            assert first.poll() is None, first.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the first run wrote no config.yaml in 300 s"
            time.sleep(0.2)
        second = subprocess.run([*command, f"work_dir={tmp_path / 'work-b'}"], cwd=ROOT, capture_output=True,
                                text=True, timeout=600)
        raced = first.poll() is None  # the second ran while the first did
        stdout, stderr = first.communicate(timeout=600)
    finally:
        first.kill()
        first.wait()
    state = "was still running" if raced else "had finished"
    assert second.returncode == 2, (f"the second exited {second.returncode}; when it ended the first "
                                    f"{state}\n" + second.stdout[-2000:])
    assert raced, "the first run finished before the second was refused: the race was not run"
    err = second.stderr.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: another process is running {d}"), err
    assert first.returncode == 0, stderr[-3000:]
    assert (d / "done").exists() and len((d / "metrics.jsonl").read_text().splitlines()) == 12
    assert json.loads((d / "eval.json").read_text())["final"]
    assert yaml.safe_load((d / "config.yaml").read_text())["work_dir"] == str(tmp_path / "work-a")
    assert json.loads((d / "manifest.json").read_text())["attempts"] == 1
    assert not (tmp_path / "work-b" / "checkpoints").exists()
