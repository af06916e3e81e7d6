"""Against a real SLURM cluster (slurmctld + slurmd + slurmdbd on this machine, see conftest.py):
the GRPO smoke replication as a job array, a requeued cell that resumes, failures reported."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurm.jobs import Launch, launches
from slurm.launch import collect, launch
from tests.helpers import last_checkpoint

pytestmark = pytest.mark.slurm
REPO = Path(__file__).resolve().parents[2]

SMOKE = [sys.executable, "-m", "experiments.replicate", "--method", "grpo", "--scale", "smoke",
         "--cluster", "slurm", "--profile", "local"]


def _run(cmd: list[str], timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def _steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line)["step"] for line in path.read_text().splitlines() if line.strip()]


def _wait_for(predicate, timeout: float, what: str, detail=lambda: "") -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out after {timeout:.0f}s waiting for {what}\n{detail()}"
        time.sleep(0.2)


def _state(job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    return out.stdout.strip()


def _checkpoint_stamp(run_dir: Path) -> tuple[str, int] | None:
    ckpt = last_checkpoint(run_dir)
    try:
        return (ckpt.name, ckpt.stat().st_mtime_ns) if ckpt is not None else None
    except OSError:  # replaced between the listing and the stat
        return None


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory):
    """The SFT warm starts of the first smoke run, reused by later ones (each test has its own work dir)."""
    return tmp_path_factory.mktemp("warmstart")


def test_grpo_smoke_replication_through_slurm(slurm_cluster, tmp_path, warm_cache):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [*SMOKE, "--seeds", "0,1", f"out_dir={out}", f"work_dir={work}"]
    first = _run(cmd)
    assert first.returncode == 0, first.stdout + first.stderr
    (record_path,) = launches(work)
    record = Launch.load(record_path)
    assert record.array_job_id
    assert [e.job_id for e in record.entries] == [f"{record.array_job_id}_{i}" for i in (0, 1)]
    # progress while waiting
    assert "0/2 done · RUNNING 2" in first.stderr and "2/2 done" in first.stderr
    for seed, entry in enumerate(record.entries):
        run_dir = out / "grpo" / "arith" / "grpo" / f"seed-{seed}"
        assert entry.run_dir == str(run_dir)
        for name in ("config.yaml", "manifest.json", "metrics.jsonl", "eval.json", "done"):
            assert (run_dir / name).is_file(), f"{run_dir / name} missing"
        manifest = json.loads((run_dir / "manifest.json").read_text())
        assert manifest["slurm"]["slurm_array_job_id"] == record.array_job_id
        assert manifest["slurm"]["slurm_array_task_id"] == str(seed)
        assert manifest["attempts"] == 1 and manifest["seed"] == seed
        assert _steps(run_dir) == list(range(len(_steps(run_dir)))) and len(_steps(run_dir)) == 4
        assert "final" in json.loads((run_dir / "eval.json").read_text())
    # the runs table of make paper's grpo section
    assert "| arith | GRPO | 2 | 0, 1 | smoke |" in first.stdout
    assert record.aggregate == "experiments.replicate:collect_tables"
    shutil.copytree(work / "warmstart", warm_cache, dirs_exist_ok=True)

    # a rerun is idempotent: nothing is submitted, finished results are not touched, the table is printed
    done_marks = {p: p.stat().st_mtime_ns for p in out.rglob("done")}
    again = _run(cmd)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "2 done, 0 already queued, 0 to submit" in again.stdout
    assert "| arith | GRPO | 2 | 0, 1 | smoke |" in again.stdout
    assert {p: p.stat().st_mtime_ns for p in out.rglob("done")} == done_marks
    assert launches(work) == [record_path]  # nothing submitted, nothing recorded

    status = _run([sys.executable, "-m", "slurm", "status", "--work-dir", str(work), record.id])
    assert status.returncode == 0 and "2/2 done" in status.stdout, status.stdout + status.stderr


def test_requeued_cell_resumes_from_its_checkpoint(slurm_cluster, tmp_path, warm_cache):
    """`scontrol requeuehold` then `release` (from outside), then USR2 (submitit's time-limit path): the
    cell resumes twice from its last Lightning checkpoint and finishes with one metrics row per step."""
    out, work = tmp_path / "out", tmp_path / "work"
    shutil.copytree(warm_cache, work / "warmstart")
    cmd = [*SMOKE, "--no-wait", f"out_dir={out}", f"work_dir={work}", "trainer.steps=16",
           "trainer.checkpoint_every=2"]
    submit = _run(cmd)
    assert submit.returncode == 0, submit.stdout + submit.stderr
    assert "not waiting" in submit.stdout
    (entry,) = Launch.load(launches(work)[-1]).entries
    job, run_dir = entry.job_id, Path(entry.run_dir)

    def attempts() -> int:
        try:
            return json.loads((run_dir / "manifest.json").read_text())["attempts"]
        except (OSError, ValueError, KeyError):
            return 0

    _wait_for(lambda: last_checkpoint(run_dir) is not None and len(_steps(run_dir)) >= 3, 300,
              "the first checkpoint")
    # requeue and hold: attempt 2 starts when the test releases it, not while a slow `twice` below runs
    # (on a loaded machine attempt 2 could otherwise train to the end before the test looks)
    subprocess.run(["scontrol", "requeuehold", job], check=True)
    _wait_for(lambda: _state(job) == "PENDING", 120, "the requeued job to wait")
    # while it waits to run again, follow it ...
    status = _run([sys.executable, "-m", "slurm", "status", "--work-dir", str(work)])
    assert job in status.stdout and any(s in status.stdout for s in ("REQUEUED", "PENDING", "RUNNING")), \
        status.stdout + status.stderr
    twice = _run(cmd)  # ... and launching again does not submit it twice
    assert "0 done, 1 already queued, 0 to submit" in twice.stdout, twice.stdout + twice.stderr
    first = _checkpoint_stamp(run_dir)  # attempt 1 is gone: its last checkpoint stays as it is
    assert attempts() == 1 and first is not None
    subprocess.run(["scontrol", "release", job], check=True)

    def trained_again() -> bool:  # attempt 2 wrote a checkpoint of its own
        return attempts() >= 2 and _checkpoint_stamp(run_dir) not in (None, first)

    def where() -> str:  # what a timeout shows: the job's state, the run's records, the job's log
        log = entry.paths().stderr
        return (f"job {job}: {_state(job) or 'not in squeue'}; attempts {attempts()}; steps "
                f"{_steps(run_dir)}; checkpoint {_checkpoint_stamp(run_dir)} (attempt 1: {first})\n"
                + (log.read_text()[-3000:] if log.exists() else "no job log"))

    _wait_for(trained_again, 300, "the second attempt's first checkpoint", where)
    subprocess.run(["scancel", "--signal=USR2", job], check=True)

    collected = _run([sys.executable, "-m", "slurm", "collect", "--work-dir", str(work)])
    assert collected.returncode == 0, collected.stdout + collected.stderr
    assert "1/1 cells done" in collected.stdout and "| arith | GRPO | 1 | 0 | smoke |" in collected.stdout
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["attempts"] == 3 and manifest["state_at_start"] == "resume"
    assert manifest["slurm"]["slurm_job_id"] == job
    assert _steps(run_dir) == list(range(16))  # continued, no step lost or duplicated
    assert (run_dir / "done").exists() and "final" in json.loads((run_dir / "eval.json").read_text())
    log = entry.paths().stderr.read_text()
    assert "DUE TO JOB REQUEUE" in log and "Caught signal SIGUSR2" in log


def test_failed_and_cancelled_cells_are_reported(slurm_cluster, fakes, tmp_path, capsys):
    cells = [fakes.FakeCell("fake", "env", arm, 0, "smoke", (), str(tmp_path / "out"), str(tmp_path / "work"))
             for arm in ("ok", "raises", "hangs")]
    refused = launch(cells, "local", wait=True, dry_run=False, validate=fakes.fake_validate,
                     aggregate=fakes.fake_aggregate, run=fakes.fake_run,
                     profile_overrides={"partition": "nope"})
    assert refused == 2 and "sbatch refused the job array" in capsys.readouterr().err
    assert not (tmp_path / "work" / "launches").exists() or not launches(tmp_path / "work")

    rc = launch(cells, "local", wait=False, dry_run=False, validate=fakes.fake_validate,
                aggregate=fakes.fake_aggregate, run=fakes.fake_run)
    assert rc == 0
    record = Launch.load(launches(tmp_path / "work")[-1])
    hangs = record.entries[2]
    _wait_for(lambda: "fake run" in (hangs.paths().stderr.read_text() if hangs.paths().stderr.exists()
                                     else ""),
              120, "the `hangs` cell to start")
    subprocess.run(["scancel", hangs.job_id], check=True)
    capsys.readouterr()

    assert collect(record, fakes.fake_aggregate, wait=True) == 1
    out = capsys.readouterr().out
    assert "1/3 cells done, 2 failed:" in out
    raised = next(block for block in out.split("FAILED ")[1:] if block.startswith("fake/env/raises"))
    assert f"SLURM job {record.entries[1].job_id} state FAILED" in raised
    assert "raised: ValueError: trainer.lr must be > 0 at run time" in raised
    assert "  | ValueError: trainer.lr must be > 0" in raised  # the log tail
    cancelled = next(block for block in out.split("FAILED ")[1:] if block.startswith("fake/env/hangs"))
    assert f"SLURM job {hangs.job_id} state CANCELLED" in cancelled
    assert "  | fake run of fake/env/hangs" in cancelled
    assert "aggregate fake/smoke: 1/3 cells; 2 missing" in out
