"""End to end: a finished run re-asked is skipped or refused, FORCE reruns it beside the finished
records and swaps it in, and its checkpoints are its own (real runs on the tiny model)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def run(out, work, *extra):
    args = [f"out_dir={out}", f"work_dir={work}", "scale=smoke", "progress=false", "trainer.threads=1",
            "trainer.steps=4", "trainer.checkpoint_every=1", "eval.max_tasks=4", "sft.steps=20", *extra]
    return subprocess.run([sys.executable, "-m", "replications.run", "method=grpo", *args], cwd=ROOT,
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
    lr = json.dumps(yaml.safe_load((d / "config.yaml").read_text())["trainer"]["lr"])  # as the difference shows it
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
    assert [p.name for p in (work / "checkpoints").iterdir() if p.is_dir()] == [Path(after["checkpoints"]).name]
    assert f"already finished, skipped: {d}" in run(out, work, "trainer.lr=0.5").stdout
