"""What the run entry points report when a run cannot go on (issue 34): lock contention, a folder it may
not write and a full disk are one line `error: ...`, never a traceback; python -m experiments.run and a
local replication's cells alike."""

from __future__ import annotations

import errno
import os
import sys

import pytest
from filelock import FileLock

from common.fit import RunStopped, storage_problem
from common.records import RunDir
from experiments.replicate import failure_text, launch_local, plan


def _main(tmp_path, monkeypatch, capsys, *overrides: str) -> tuple[int, str]:
    """python -m experiments.run method=grpo scale=smoke ..., in this process: (exit status, stderr)."""
    from experiments.run import main

    monkeypatch.setattr(sys, "argv", ["experiments.run"])
    with pytest.raises(SystemExit) as exit_:
        main(["method=grpo", "scale=smoke", f"out_dir={tmp_path / 'out'}", f"work_dir={tmp_path / 'work'}",
              "progress=false", *overrides])
    return int(exit_.value.code or 0), capsys.readouterr().err.strip()


def _run_dir(tmp_path) -> RunDir:
    return RunDir.for_run(str(tmp_path / "out"), str(tmp_path / "work"), "grpo", "arith", "default", 0)


def _one_line(err: str) -> str:
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_a_run_another_process_is_running_is_one_line(tmp_path, monkeypatch, capsys):
    lock = _run_dir(tmp_path).lock_path
    lock.parent.mkdir(parents=True)
    with FileLock(str(lock)):
        code, err = _main(tmp_path, monkeypatch, capsys)
    assert code == 2
    assert _one_line(err).startswith(f"error: another process is running {_run_dir(tmp_path).path} "
                                     f"(lock {lock}); ")


def test_a_full_disk_is_one_line(tmp_path, monkeypatch, capsys):
    import common.records

    def full(path, text):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(common.records, "atomic_write_text", full)
    code, err = _main(tmp_path, monkeypatch, capsys)
    config = _run_dir(tmp_path).path / "config.yaml"
    assert code == 1
    assert _one_line(err) == (f"error: the run stopped: cannot write {config} (No space left on device); "
                              "free space on that disk (or choose another out_dir / work_dir), then run "
                              "again: it resumes")


def test_a_read_only_folder_is_one_line(tmp_path, monkeypatch, capsys):
    def read_only(self, force, config=None):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self.path))

    monkeypatch.setattr(RunDir, "prepare", read_only)
    code, err = _main(tmp_path, monkeypatch, capsys)
    assert code == 1
    assert _one_line(err) == (f"error: the run stopped: cannot write {_run_dir(tmp_path).path} (Read-only "
                              "file system); the file system is mounted read-only: "
                              "choose a writable out_dir / work_dir")


def test_a_write_that_names_no_file_names_the_run_folders_and_other_errors_keep_their_traceback():
    line = storage_problem(OSError(errno.ENOSPC, "No space left on device"), "out/grpo/arith/default/seed-0",
                           "work")
    assert line and "cannot write the run's files (in out/grpo/arith/default/seed-0 or work)" in line
    # a bug: its traceback
    assert storage_problem(OSError(errno.EBADF, "Bad file descriptor"), "out", "work") is None


def test_a_non_storage_error_of_a_run_is_not_made_one_line(tmp_path, monkeypatch):
    from common import fit as run_module
    from common.config import RunConfig

    def broken(self, force, config=None):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(RunDir, "prepare", broken)
    monkeypatch.setattr(run_module, "resolve",
                        lambda cfg, methods: run_module.Resolved(cfg, None, None, _run_dir(tmp_path)))
    with pytest.raises(OSError, match="Bad file descriptor") as error:
        run_module.fit(RunConfig(out_dir=str(tmp_path / "out"), work_dir=str(tmp_path / "work")), {})
    assert not isinstance(error.value, RunStopped)


def test_failure_text_keeps_a_traceback_for_anything_but_a_refusal_or_a_stop():
    trace = ("Job (task=0) failed during processing with trace:\n----------------------\n"
             "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nKeyError: 'step'\n\n"
             "----------------------\nYou can check full logs")
    assert (failure_text(Exception(trace)).startswith("\n")
            and "KeyError: 'step'" in failure_text(Exception(trace)))
    stopped = trace.replace("KeyError: 'step'", "common.fit.RunStopped: the run stopped: cannot write x "
                            "(Read-only file system); choose")
    assert (failure_text(Exception(stopped))
            == " the run stopped: cannot write x (Read-only file system); choose")


@pytest.mark.e2e
def test_a_local_cell_another_process_is_running_fails_in_one_line(tmp_path):
    """make replicate-<m>: the cell's job (submitit, another process) is refused; its failure is one line."""
    (cell,) = plan("grpo", "smoke", seeds=[0], extra_overrides=(f"out_dir={tmp_path / 'out'}",
                                                                 f"work_dir={tmp_path / 'work'}"))
    lock = RunDir.for_run(cell.out_dir, cell.work_dir, cell.method, cell.env, cell.arm, cell.seed).lock_path
    lock.parent.mkdir(parents=True)
    with FileLock(str(lock)):
        failures = launch_local([cell], 1, cell.work_dir)
    assert failures == [f"{cell.name} failed: another process is running {cell.run_dir} (lock {lock}); wait "
                        "for it or stop it before starting this run again"]
