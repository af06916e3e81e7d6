"""Run records: one run's checkpoints are its own, finished runs are never mixed up or lost, and a
crash (a torn metrics line, a corrupt checkpoint, a forced rerun killed partway) loses nothing."""

import copy
import json
import os
import stat
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from common.config import RunConfig
from common.records import RecordWarning, RunDir, RunRefused, run_key
from common.util import atomic_write_text


def _config(**trainer) -> dict:
    cfg = asdict(RunConfig())
    cfg["trainer"].update(trainer)
    return cfg


def _run(root: Path, out: str = "results") -> RunDir:
    return RunDir.for_run(str(root / out), str(root / "work"), "grpo", "arith", "grpo", 0)


def _start(run: RunDir, config: dict, force: bool = False, steps: int = 2) -> str:
    """What `fit` does up to a checkpoint at `steps`: prepare, config, manifest, metrics rows."""
    state = run.prepare(force, config)
    run.write_config(config)
    run.write_manifest({})
    for step in range(steps):
        run.append_metrics({"step": step, "lr": config["trainer"]["lr"]})
    _checkpoint(run, steps)
    return state


def _checkpoint(run: RunDir, next_step: int) -> None:
    tmp = run.checkpoint_dir / "next.ckpt.tmp"
    tmp.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rl": {"next_step": next_step}}, tmp)
    run.keep_checkpoint(tmp)


def _finish(run: RunDir, config: dict, steps: int = 2) -> None:
    _start(run, config, steps=steps)
    run.write_eval({"final": {"step": steps}})
    run.mark_done()


def _next_step(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=False)["rl"]["next_step"]


# ---- a run's identity ---------------------------------------------------------------------------
def test_two_runs_of_one_cell_never_share_checkpoints(tmp_path):
    """The reproduced bug: a cpu run killed at step 1, a smoke run of the same cell finished, the cpu
    run again: it resumed from the smoke run's finished checkpoint."""
    cpu, smoke = _run(tmp_path, "results"), _run(tmp_path, "runs/smoke")
    _start(cpu, _config(lr=1e-3), steps=1)
    _finish(smoke, _config(lr=1e-2, steps=4), steps=4)
    assert cpu.checkpoint_dir != smoke.checkpoint_dir

    again = _run(tmp_path, "results")
    assert again.prepare(False, _config(lr=1e-3)) == "resume"
    assert again.resume_checkpoint is not None and _next_step(again.resume_checkpoint) == 1
    identity = json.loads((again.checkpoint_dir / "identity.json").read_text())
    assert identity == {"run_dir": str(cpu.path.resolve()), "config_hash": again.config_hash}
    assert json.loads((cpu.path / "manifest.json").read_text())["config_hash"] == again.config_hash


def test_irrelevant_settings_keep_the_identity(tmp_path):
    run = _run(tmp_path)
    _start(run, _config(lr=1e-3), steps=1)
    other = {**_config(lr=1e-3), "progress": False, "loggers": [],
             "out_dir": str((tmp_path / "results").resolve())}
    again = _run(tmp_path)
    assert again.prepare(False, other) == "resume" and again.checkpoint_dir == run.checkpoint_dir


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    a, b = _run(tmp_path, "a"), _run(tmp_path, "b")
    _start(a, _config(), steps=1)
    _start(b, _config(), steps=1)
    (a.checkpoint_dir / "identity.json").write_text((b.checkpoint_dir / "identity.json").read_text())
    with pytest.raises(RunRefused, match="holds checkpoints of another run") as error:
        _run(tmp_path, "a").prepare(False, _config())
    assert str(b.path.resolve()) in str(error.value) and "\n" not in str(error.value)


# ---- one process per run folder (issue 34) ------------------------------------------------------------
def test_the_run_lock_is_beside_the_run_folder_whatever_the_work_dir(tmp_path):
    a = RunDir.for_run(str(tmp_path / "results"), str(tmp_path / "work-a"), "grpo", "arith", "grpo", 3)
    b = RunDir.for_run(str(tmp_path / "results"), str(tmp_path / "work-b"), "grpo", "arith", "grpo", 3)
    assert (a.lock_path == b.lock_path
            == (tmp_path / "results" / "grpo" / "arith" / "grpo" / ".seed-3.lock").resolve())
    a.path.mkdir(parents=True)
    # a folder reached through a symlink takes the lock beside its target
    (tmp_path / "linked").symlink_to(a.path)
    assert RunDir(tmp_path / "linked", tmp_path / "work-c" / "checkpoints").lock_path == a.lock_path


def test_a_run_of_a_folder_another_work_dir_is_writing_is_refused_in_one_line(tmp_path, monkeypatch):
    """The race of issue 34: a second process of the same run folder with another work_dir; the first
    holds the lock, the second is refused before it touches anything."""
    from filelock import FileLock

    from common import fit as run_module

    cfg = RunConfig(out_dir=str(tmp_path / "results"), work_dir=str(tmp_path / "work-b"))
    run_b = RunDir.for_run(cfg.out_dir, cfg.work_dir, "grpo", "arith", "default", 0)
    monkeypatch.setattr(run_module, "resolve",
                        lambda cfg, methods: run_module.Resolved(cfg, None, None, run_b))
    first = RunDir.for_run(cfg.out_dir, str(tmp_path / "work-a"), "grpo", "arith", "default", 0)
    first.lock_path.parent.mkdir(parents=True)
    with (FileLock(str(first.lock_path)),
          pytest.raises(RunRefused, match="another process is running") as error):
        run_module.fit(cfg, {})
    assert "\n" not in str(error.value) and str(run_b.path) in str(error.value)
    assert not run_b.path.exists() and not (tmp_path / "work-b" / "checkpoints").exists()


def test_a_finished_run_asked_again_with_another_config_is_refused_with_the_difference(tmp_path):
    _finish(_run(tmp_path), _config(lr=1e-3))
    with pytest.raises(RunRefused, match=r"trainer\.lr: 0\.001 -> 0\.01") as error:
        _run(tmp_path).prepare(False, _config(lr=0.01))
    assert "force=true" in str(error.value) and "\n" not in str(error.value)


def test_a_finished_run_asked_again_with_its_config_is_skipped(tmp_path, monkeypatch, capsys):
    from common import fit as run_module

    run = _run(tmp_path)
    _finish(run, _config(lr=1e-3))
    before = {p.name: p.read_text() for p in run.path.iterdir()}
    cfg = RunConfig(out_dir=str(tmp_path / "results"), work_dir=str(tmp_path / "work"))
    cfg.trainer.lr = 1e-3
    monkeypatch.setattr(run_module, "resolve",
                        lambda cfg, methods: run_module.Resolved(cfg, None, None, _run(tmp_path)))
    run_module.fit(cfg, {})
    assert capsys.readouterr().out.strip() == f"already finished, skipped: {run.path}"
    assert {p.name: p.read_text() for p in run.path.iterdir()} == before

    cfg.trainer.lr = 0.01
    with pytest.raises(RunRefused, match=r"trainer\.lr: 0\.001 -> 0\.01"):
        run_module.fit(cfg, {})


def test_a_cell_finished_with_other_settings_is_not_done(tmp_path):
    from experiments.replicate import Cell, cell_config

    cell = Cell("grpo", "arith", "grpo", 0, "smoke", ("scale=smoke", "seed=0", "arm=grpo"),
                str(tmp_path / "out"), str(tmp_path / "work"))
    config = asdict(cell_config(cell))
    run = RunDir(cell.run_dir, tmp_path / "work" / "checkpoints")
    _finish(run, config)
    assert cell.done
    other = copy.deepcopy(config)
    other["trainer"]["lr"] = 0.01
    run.write_config(other)
    assert not cell.done


# ---- forced reruns ------------------------------------------------------------------------------
def test_a_forced_rerun_killed_partway_keeps_the_finished_records_and_resumes(tmp_path):
    from paper.load import load_results

    old = _run(tmp_path)
    _finish(old, _config(lr=1e-3), steps=3)
    finished = {p.name: p.read_text() for p in old.path.iterdir()}

    forced = _run(tmp_path)
    assert _start(forced, _config(lr=0.01), force=True, steps=2) == "fresh"  # ... and killed here
    assert {p.name: p.read_text() for p in old.path.iterdir()} == finished
    results = load_results(tmp_path / "results")  # paper/ sees the finished run only, nothing of the rerun
    assert [r.path for r in results.runs] + [p.path for p in results.problems] == [old.path]

    again = _run(tmp_path)
    assert again.prepare(True, _config(lr=0.01)) == "resume"
    assert again.building == forced.building != again.path and _next_step(again.resume_checkpoint) == 2
    again.write_manifest({})
    again.truncate_metrics(2)
    again.append_metrics({"step": 2, "lr": 0.01})
    _checkpoint(again, 3)
    again.write_eval({"final": {"step": 3}})
    again.mark_done()

    assert again.building == again.path
    assert ([json.loads(line)["lr"] for line in (old.path / "metrics.jsonl").read_text().splitlines()]
            == [0.01] * 3)
    assert (old.path / "done").exists() and not forced.staging.exists()
    assert json.loads((old.path / "manifest.json").read_text())["attempts"] == 2
    # the rerun's checkpoints are now the run folder's own; the replaced run's are gone
    checkpoints = sorted(p.name for p in (tmp_path / "work" / "checkpoints").iterdir() if p.is_dir())
    assert checkpoints == [again.checkpoint_dir.name] and checkpoints[0].startswith(run_key(old.path))
    assert _run(tmp_path).prepare(False, _config(lr=0.01)) == "finished"


def test_a_forced_rerun_with_other_settings_than_its_killed_attempt_restarts(tmp_path):
    _finish(_run(tmp_path), _config(lr=1e-3))
    _start(_run(tmp_path), _config(lr=0.01), force=True)
    again = _run(tmp_path)
    assert again.prepare(True, _config(lr=0.1)) == "fresh"
    assert not (again.building / "metrics.jsonl").exists()


@pytest.mark.parametrize("cut", ["after the done marker", "after moving the old run aside"])
def test_a_swap_cut_short_is_finished_by_the_next_prepare(tmp_path, cut):
    _finish(_run(tmp_path), _config(lr=1e-3))
    forced = _run(tmp_path)
    _start(forced, _config(lr=0.01), force=True)
    atomic_write_text(forced.building / "done", "now\n")
    if cut == "after moving the old run aside":
        os.rename(forced.path, forced.staging.with_name(forced.staging.name + ".replaced"))
    assert _run(tmp_path).prepare(False, _config(lr=0.01)) == "finished"
    assert json.loads((forced.path / "metrics.jsonl").read_text().splitlines()[0])["lr"] == 0.01
    assert (not forced.staging.exists()
            and not forced.staging.with_name(forced.staging.name + ".replaced").exists())


# ---- crashes ------------------------------------------------------------------------------------
def test_a_torn_last_metrics_line_is_dropped_with_a_warning(tmp_path):
    run = _run(tmp_path)
    _start(run, _config(), steps=3)
    with open(run.path / "metrics.jsonl", "a") as f:
        f.write('{"lr": 0.001, "st')  # the disk filled up mid-line
    with pytest.warns(RecordWarning, match=r"metrics\.jsonl: dropped its torn last line 4"):
        run.truncate_metrics(3)
    assert [r["step"] for r in run.read_metrics()] == [0, 1, 2]


def test_a_bad_metrics_line_before_the_last_is_an_error_naming_file_and_line(tmp_path):
    run = _run(tmp_path)
    _start(run, _config(), steps=1)
    (run.path / "metrics.jsonl").write_text('{"step": 0}\n{"step": 1, "x"\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics\.jsonl line 2 is not valid JSON") as error:
        run.read_metrics()
    assert str(run.path / "metrics.jsonl") in str(error.value)
    (run.path / "metrics.jsonl").write_text('{"step": 0}\n7\n')
    with pytest.raises(ValueError, match=r"line 2 is not a metrics row"):
        run.read_metrics()


def test_the_previous_checkpoint_is_kept_beside_the_last(tmp_path):
    run = _run(tmp_path)
    _start(run, _config(), steps=1)
    _checkpoint(run, 2)
    assert (_next_step(run.checkpoint_dir / "last.ckpt") == 2
            and _next_step(run.checkpoint_dir / "prev.ckpt") == 1)


def test_a_corrupt_last_checkpoint_falls_back_to_the_previous_one(tmp_path):
    run = _run(tmp_path)
    _start(run, _config(), steps=1)
    _checkpoint(run, 2)
    last = run.checkpoint_dir / "last.ckpt"
    last.write_bytes(last.read_bytes()[:100])  # truncated
    again = _run(tmp_path)
    with pytest.warns(RecordWarning, match=r"last\.ckpt cannot be loaded .*resuming from .*prev\.ckpt"):
        assert again.prepare(False, _config()) == "resume"
    assert (again.resume_checkpoint == run.checkpoint_dir / "prev.ckpt"
            and _next_step(again.resume_checkpoint) == 1)
    _checkpoint(again, 2)  # the corrupt one was moved aside, so the good one stays the fallback
    assert _next_step(run.checkpoint_dir / "prev.ckpt") == 1


def test_both_checkpoints_corrupt_is_a_one_line_error_naming_them(tmp_path):
    run = _run(tmp_path)
    _start(run, _config(), steps=1)
    _checkpoint(run, 2)
    for name in ("last.ckpt", "prev.ckpt"):
        (run.checkpoint_dir / name).write_bytes(b"\0" * 64)
    with pytest.raises(RunRefused, match="cannot be loaded") as error:
        _run(tmp_path).prepare(False, _config())
    message = str(error.value)
    assert "last.ckpt" in message and "prev.ckpt" in message and "\n" not in message


@pytest.mark.parametrize("text", ['{"attempts": 1, "sta', "[1, 2]",
                                  "\udcff".encode("utf-8", "surrogatepass").decode("latin-1")])
def test_a_corrupt_manifest_of_an_unfinished_run_is_read_as_none_with_a_warning(tmp_path, text):
    """Issue 34: a hand-corrupted manifest.json made every resume crash with a traceback."""
    run = _run(tmp_path)
    _start(run, _config(), steps=1)
    (run.path / "manifest.json").write_text(text, encoding="latin-1")
    again = _run(tmp_path)
    assert again.prepare(False, _config()) == "resume"
    with pytest.warns(RecordWarning,
                      match=r"manifest\.json cannot be read \(.*\); read as no previous manifest"):
        again.write_manifest({"state_at_start": "resume"})
    manifest = json.loads((run.path / "manifest.json").read_text())
    assert manifest["attempts"] == 1 and manifest["state_at_start"] == "resume"
    assert manifest["config_hash"] == again.config_hash


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o027, 0o640)])
def test_record_files_are_readable_by_the_group(tmp_path, umask, mode):
    previous = os.umask(umask)
    try:
        run = _run(tmp_path)
        _finish(run, _config())
        run.truncate_metrics(1)
    finally:
        os.umask(previous)
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "eval.json", "done"):
        assert stat.S_IMODE((run.path / name).stat().st_mode) == mode, name
    assert stat.S_IMODE((run.checkpoint_dir / "identity.json").stat().st_mode) == mode
    assert stat.S_IMODE(run.path.stat().st_mode) == 0o777 & ~umask
