"""A multi-process run under SLURM: one job whose srun step runs one task per rank (Lightning's
SLURMEnvironment), against the dev cluster (marked slurm); and the dry run of a multi-node job,
its batch script and srun layout (no cluster needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurm.jobs import Launch, launches

REPO = Path(__file__).resolve().parents[2]
REPLICATE = [sys.executable, "-m", "experiments.replicate", "--method", "grpo", "--scale", "smoke",
             "--cluster", "slurm"]


def _run(cmd: list[str], env: dict[str, str] | None = None,
         timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


def _sacct_steps(job_id: str) -> dict[str, str]:
    """Step name -> its number of tasks."""
    out = subprocess.run(["sacct", "-n", "-P", "-j", job_id, "-o", "JobID,NTasks"], capture_output=True,
                         text=True, timeout=30)
    return dict(line.split("|") for line in out.stdout.splitlines() if "|" in line)


@pytest.mark.slurm
def test_two_ranks_run_as_one_job_of_two_tasks(slurm_cluster, tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    done = _run([*REPLICATE, "--profile", "local", f"out_dir={out}", f"work_dir={work}", "trainer.devices=2"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (record_path,) = launches(work)
    (entry,) = Launch.load(record_path).entries
    assert entry.job_id and "_" not in entry.job_id  # one job, not an array of one task per rank
    assert _sacct_steps(entry.job_id)[f"{entry.job_id}.0"] == "2"  # its srun step: two tasks
    assert all(entry.paths(task).stdout.exists() for task in (0, 1))  # a log per task

    run_dir = Path(entry.run_dir)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["ranks_started_by"] == "srun"
    assert manifest["slurm"]["slurm_job_id"] == entry.job_id and manifest["attempts"] == 1
    first, second = manifest["adapter_sha1_by_rank"]
    assert first == second
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [0, 1, 2, 3]  # rank 0 alone writes
    final = json.loads((run_dir / "eval.json").read_text())["final"]
    assert final["step"] == 4 and final["n_tasks"] == 32 and (run_dir / "done").exists()


def test_dry_run_shows_a_multi_node_job(tmp_path):
    """trainer.num_nodes > 1: checked against the profile, the batch script asks for every node's
    tasks, and the srun layout says which rank runs where."""
    args = [*REPLICATE, "--dry-run", "--verbose", "--profile", "slurm-gpu", f"out_dir={tmp_path / 'out'}",
            f"work_dir={tmp_path / 'work'}", "trainer.accelerator=gpu", "trainer.devices=8",
            "trainer.num_nodes=2"]
    refused = _run(args)
    assert refused.returncode == 2
    assert "trainer.num_nodes=2 but profile slurm-gpu has nodes=1" in refused.stderr

    shown = _run(args, env={"REPLICATE_SLURM_NODES": "2"})
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8"):
        assert line in text
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    # a failed rank ends the others instead of leaving them in a collective
    assert "--kill-on-bad-exit=1" in srun
    assert "# srun: 2 node(s) x 8 task(s) per node = 16 ranks" in text
    assert ("#   node 0: ranks 0, 1, 2, 3, 4, 5, 6, 7, each on GPU SLURM_LOCALID of 8 on its node; "
            "rank 0 writes") in text
    assert "#   node 1: ranks 8, 9, 10, 11, 12, 13, 14, 15," in text
    assert not launches(tmp_path / "work")  # nothing submitted, nothing recorded
