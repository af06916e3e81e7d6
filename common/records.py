"""Run directories: the only thing `paper/` reads, and the checkpoints that belong to each.

    <out_dir>/<method>/<env>/<arm>/.seed-<k>.lock
                        one process per run folder, whatever its work_dir (beside the folder it guards)
    <out_dir>/<method>/<env>/<arm>/seed-<k>/
        config.yaml     the resolved RunConfig
        manifest.json   git sha + dirty flag, package versions, host, SLURM ids, seeds, times,
                        config_hash, the checkpoint folder
        metrics.jsonl   one JSON object per RL step ({"step": s, ...})
        samples.jsonl   a few groups' texts, rewards and advantages every `log.samples_every` steps
                        (`common.samples`), one JSON object per group ({"step": s, ...})
        eval.json       {"initial": {...}, "final": {...}, "history": [{...}, ...]}
        adapters/       the final policy's adapters, <adapter>/ each in PEFT's format (`common.fit`;
                        ignored by git), and method_state.pt where the method keeps a state
        done            written last; a run without it is unfinished (never aggregated)
    <out_dir>/.forcing/<method>/<env>/<arm>/seed-<k>/
                        a forced rerun of a finished run, swapped in for it when done
    <work_dir>/checkpoints/
        <run key>-<config hash>/       identity.json (run folder, config hash), last.ckpt, prev.ckpt

A run's identity (`common.run_identity`) is its folder's absolute path (the run key is a hash of it)
and the hash of its resolved config (settings in RESUME_IRRELEVANT left out): a checkpoint is
resumed only by the run that wrote it, so two runs of one cell (smoke and cpu scale, two out_dirs)
never share one.

Every write is atomic (temp file + rename) and readable by the group (mode 0o666 & ~umask). An
unfinished run is resumed: metrics (and samples) of steps at or after the checkpoint's step are
dropped and recomputed; a torn last metrics line is dropped with a warning; a checkpoint that cannot
be loaded falls back, with a warning, to the one before. A finished run is never overwritten: asked again
with the same config it is skipped, with another config refused, and under `force` rerun in
`.forcing/` while the finished records stay in place until the rerun is done.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
import warnings
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from common.provenance import provenance
from common.run_identity import YAML_LOADER, config_changes, config_hash, recorded_changes, run_key
from common.util import atomic_write_json, atomic_write_text

__all__ = ["STAGING", "YAML_LOADER", "RecordWarning", "RunDir", "RunRefused", "config_changes", "config_hash",
           "process_rank", "recorded_changes", "run_key"]

STAGING = ".forcing"  # under out_dir; paper/ skips folders whose name starts with a dot


class RecordWarning(UserWarning):
    """Something in a run's records was repaired on resume (a torn line, a corrupt checkpoint)."""


class RunRefused(ValueError):
    """A run that cannot start as asked (a finished or unfinished run of other settings, a checkpoint
    of another run or none that loads); the message is one line: what is wrong and what to do."""


def _unloadable(path: Path) -> str | None:
    """Why torch cannot load a checkpoint (one line), or None if it can."""
    import torch

    try:
        torch.load(path, map_location="cpu", weights_only=False)
    except Exception as e:  # noqa: BLE001 - any failure means: do not hand it to Lightning
        first = (str(e).strip().splitlines() or [""])[0]
        return f"{type(e).__name__}: {first}"[:200]
    return None


def process_rank() -> int:
    """This process's global rank in a multi-process run, known before torch.distributed starts, read
    as Lightning reads it: RANK (torchrun), LOCAL_RANK (a process Lightning's launcher started beside
    rank 0, single node), SLURM_PROCID (srun, one task per rank); 0 in a single process."""
    for key in ("RANK", "LOCAL_RANK", "SLURM_PROCID"):
        value = os.environ.get(key)
        if value:
            return int(value)
    return 0


class RunDir:
    """One run's record folder, and the checkpoints that belong to it alone.

    `path` is the folder `paper/` reads. The records are written into `building`: `path` itself,
    or, for a forced rerun of a finished run, `staging`, swapped in for `path` by `mark_done`.
    """

    def __init__(self, path: Path, checkpoints: Path, writer: bool | None = None,
                 staging: Path | None = None):
        self.path = Path(path)
        self.checkpoints = Path(checkpoints)  # one sub-folder per (run folder, config): see checkpoint_dir
        self.staging = (Path(staging) if staging is not None
                        else self.path.parent / f".{self.path.name}{STAGING}")
        self.building = self.path
        self.config_hash: str | None = None  # set by prepare
        self.resume_checkpoint: Path | None = None  # set by prepare: the checkpoint to resume from, verified
        # In a multi-process run only global rank 0 writes the record.
        self.writer = process_rank() == 0 if writer is None else writer

    @classmethod
    def for_run(cls, out_dir: str, work_dir: str, method: str, env: str, arm: str, seed: int) -> RunDir:
        rel = Path(method) / env / arm / f"seed-{seed}"
        return cls(Path(out_dir) / rel, Path(work_dir) / "checkpoints", staging=Path(out_dir) / STAGING / rel)

    # ---- state --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return (self.path / "done").exists()

    @property
    def checkpoint_dir(self) -> Path:
        """This run's checkpoints: keyed by the folder being written and the config's hash."""
        return self.checkpoints / f"{run_key(self.building)}-{(self.config_hash or 'unkeyed')[:12]}"

    @property
    def lock_path(self) -> Path:
        """One process per run folder (a forced rerun included). Beside the folder, not in work_dir: two
        runs of one cell with different work_dirs write the same folder, so they must take the same lock;
        beside the folder a symlink leads to (make compare links finished runs), so both paths share it."""
        folder = self.path.resolve()
        return folder.parent / f".{folder.name}.lock"

    def prepare(self, force: bool, config: dict[str, Any] | None = None) -> str:
        """Make the run ready to train; returns 'fresh', 'resume' or 'finished' (nothing to do).

        A finished run asked again with the same config is 'finished'; with another config it is
        refused with the difference, unless `force`: then it is rerun in `staging` and swapped in
        by `mark_done`, the finished records untouched until then (a forced rerun killed partway
        resumes there when forced again with the same config). An unfinished run asked with
        another config is refused (resuming it would mix two experiments), unless `force`, which
        restarts it. A checkpoint without a run folder is stale and is removed.
        """
        self.config_hash = config_hash(config) if config is not None else None
        if self.writer:
            self._finish_interrupted_swap()
        if self.done:
            changes = recorded_changes(self.path, config)
            if not force:
                if changes:
                    raise RunRefused(
                        f"{self.path} is a finished run with other settings ({'; '.join(changes)}); "
                        "pass force=true (FORCE=1) to rerun it with these (the finished records stay until "
                        "the rerun is done), or restore its settings")
                return "finished"
            self.building = self.staging
            # resumed, as any unfinished run
            killed_rerun_of_these = recorded_changes(self.staging, config) == []
            if self.writer and not killed_rerun_of_these:
                self._discard(self.staging)
        else:
            changes = recorded_changes(self.path, config)
            if not force and changes:
                raise RunRefused(f"{self.path} holds an unfinished run with other settings "
                                 f"({'; '.join(changes)}); pass force=true (FORCE=1) to restart it, or "
                                 "restore its settings to resume it")
            if self.writer:
                self._discard(self.staging)  # a rerun of a finished run that is gone
                if force or not (self.path / "config.yaml").exists():
                    self._discard(self.path)
        if self.writer:
            self.building.mkdir(parents=True, exist_ok=True)
        self.resume_checkpoint = self._checkpoint_to_resume()
        return "resume" if self.resume_checkpoint is not None else "fresh"

    def _discard(self, folder: Path) -> None:
        """Remove a run folder and every checkpoint written for it."""
        shutil.rmtree(folder, ignore_errors=True)
        for stale in self.checkpoints.glob(f"{run_key(folder)}-*"):
            shutil.rmtree(stale, ignore_errors=True)

    def _checkpoint_to_resume(self) -> Path | None:
        """last.ckpt, or prev.ckpt (with a warning) when last.ckpt is missing or cannot be loaded."""
        folder = self.checkpoint_dir
        last, prev = folder / "last.ckpt", folder / "prev.ckpt"
        if not last.exists() and not prev.exists():
            return None
        self._check_identity()
        last_error = _unloadable(last) if last.exists() else "missing"
        if last_error is None:
            return last
        prev_error = _unloadable(prev) if prev.exists() else "missing"
        if prev_error is not None:
            raise RunRefused(f"cannot resume {self.building}: {last} ({last_error}) and {prev} "
                             f"({prev_error}) cannot be loaded; delete {folder} to restart the run from "
                             "step 0")
        warnings.warn(f"{last} cannot be loaded ({last_error}); resuming from the checkpoint before it, "
                      f"{prev}", RecordWarning, stacklevel=3)
        if self.writer and last.exists():  # out of the way: the next save must not rotate it into prev.ckpt
            os.replace(last, folder / "last.ckpt.corrupt")
        return prev

    def _identity(self) -> dict[str, Any]:
        return {"run_dir": str(self.building.resolve()), "config_hash": self.config_hash}

    def _check_identity(self) -> None:
        path = self.checkpoint_dir / "identity.json"
        try:
            found = json.loads(path.read_text())
        except (OSError, ValueError):
            raise RunRefused(f"{self.checkpoint_dir} holds checkpoints but no readable identity.json, so "
                             f"they cannot be told to belong to {self.building}; delete that folder to "
                             "restart the run") from None
        expected = self._identity()
        if found.get("run_dir") != expected["run_dir"] or (
                expected["config_hash"] is not None and found.get("config_hash") != expected["config_hash"]):
            raise RunRefused(f"{self.checkpoint_dir} holds checkpoints of another run "
                             f"({found.get('run_dir')}, config {str(found.get('config_hash'))[:12]}), "
                             f"not of {expected['run_dir']} "
                             f"(config {str(expected['config_hash'])[:12]}); delete that folder to restart "
                             "this run")

    # ---- forced reruns ------------------------------------------------------------------
    @property
    def _replaced(self) -> Path:
        return self.staging.with_name(self.staging.name + ".replaced")

    def _swap_in(self) -> None:
        """Put the finished forced rerun (staging, marked done) in the place of the run it replaces.

        Two renames: a crash between them leaves the rerun, marked done, in staging, and the next
        `prepare` finishes the swap (`_finish_interrupted_swap`); records are never lost.
        """
        if self.path.exists():
            shutil.rmtree(self._replaced, ignore_errors=True)
            os.rename(self.path, self._replaced)
        os.rename(self.staging, self.path)
        shutil.rmtree(self._replaced, ignore_errors=True)
        self.building = self.path
        # the replaced run's checkpoints go; the rerun's become the run folder's own
        for old in self.checkpoints.glob(f"{run_key(self.path)}-*"):
            shutil.rmtree(old, ignore_errors=True)
        for moved in self.checkpoints.glob(f"{run_key(self.staging)}-*"):
            target = self.checkpoints / f"{run_key(self.path)}{moved.name[len(run_key(self.staging)):]}"
            os.rename(moved, target)
            identity = target / "identity.json"
            found = json.loads(identity.read_text()) if identity.exists() else {}
            atomic_write_json(identity, {**found, "run_dir": str(self.path.resolve())})

    def _finish_interrupted_swap(self) -> None:
        if (self.staging / "done").exists():
            self._swap_in()
            self.update_manifest(checkpoints=str(self.checkpoint_dir.absolute()))
        elif self._replaced.exists():
            if self.path.exists():
                shutil.rmtree(self._replaced, ignore_errors=True)
            else:
                os.rename(self._replaced, self.path)

    # ---- writes -------------------------------------------------------------------------
    def write_config(self, cfg: Any) -> None:
        if not self.writer:
            return
        data = asdict(cfg) if not isinstance(cfg, dict) else cfg
        atomic_write_text(self.building / "config.yaml", yaml.safe_dump(data, sort_keys=False))

    def write_manifest(self, extra: dict[str, Any]) -> None:
        if not self.writer:
            return
        previous = self._manifest()
        manifest = {
            **provenance(),
            "argv": sys.argv,
            "started": previous.get("started", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
            "attempts": previous.get("attempts", 0) + 1,
            "config_hash": self.config_hash,
            "checkpoints": str(self.checkpoint_dir.absolute()),
            **extra,
        }
        atomic_write_json(self.building / "manifest.json", manifest)

    def update_manifest(self, **fields: Any) -> None:
        if not self.writer:
            return
        manifest = self._manifest()
        manifest.update(fields)
        atomic_write_json(self.building / "manifest.json", manifest)

    def _manifest(self) -> dict[str, Any]:
        """The manifest written so far ({} before the first). One that cannot be read (torn, or edited by
        hand) counts as none, with a warning: it holds provenance only, which write_manifest writes anew,
        and refusing it would leave the run unable ever to resume."""
        path = self.building / "manifest.json"
        try:
            manifest = self.read_json("manifest.json")
        except ValueError as e:  # json.JSONDecodeError and UnicodeDecodeError are ValueErrors
            why = f"{type(e).__name__}: {e}"
        else:
            if manifest is None or isinstance(manifest, dict):
                return manifest or {}
            why = f"a JSON {type(manifest).__name__}, not an object"
        warnings.warn(f"{path} cannot be read ({why}); read as no previous manifest: its attempts count and "
                      "start time begin again", RecordWarning, stacklevel=3)
        return {}

    def read_json(self, name: str) -> Any:
        p = self.building / name
        return json.loads(p.read_text()) if p.exists() else None

    def read_metrics(self) -> list[dict[str, Any]]:
        """The metric rows so far. A torn last line (a write cut short, by a full disk or a crash) is
        dropped with a warning; any other line that is not a JSON object is an error naming it."""
        return self._read_rows("metrics.jsonl", "metrics row")

    def read_samples(self) -> list[dict[str, Any]]:
        """The sample rows so far (samples.jsonl, `log.samples_every`), read as `read_metrics` reads."""
        return self._read_rows("samples.jsonl", "sample row")

    def _read_rows(self, name: str, what: str) -> list[dict[str, Any]]:
        p = self.building / name
        if not p.exists():
            return []
        lines = p.read_text().split("\n")  # after a final newline, the last item is ""
        rows = []
        for n, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                if n == len(lines):  # no newline after it: the write of this line never finished
                    warnings.warn(f"{p}: dropped its torn last line {n} ({len(line)} characters, a write cut "
                                  "short); its step is recomputed", RecordWarning, stacklevel=3)
                    break
                raise RunRefused(f"{p} line {n} is not valid JSON ({e.msg}); "
                                 "repair or delete that line") from None
            if not isinstance(row, dict) or not isinstance(row.get("step"), int):
                raise RunRefused(f"{p} line {n} is not a {what} (a JSON object with an integer step)")
            rows.append(row)
        return rows

    def truncate_metrics(self, before_step: int) -> None:
        """Keep only rows of steps < before_step (a resumed run recomputes the rest); samples.jsonl, where
        there is one, likewise, so a killed and resumed run neither repeats nor loses a sample."""
        if not self.writer:
            return
        rows = [r for r in self.read_metrics() if r["step"] < before_step]
        atomic_write_text(self.building / "metrics.jsonl",
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
        if (self.building / "samples.jsonl").exists():
            samples = [r for r in self.read_samples() if r["step"] < before_step]
            atomic_write_text(self.building / "samples.jsonl",
                              "".join(json.dumps(r, sort_keys=True) + "\n" for r in samples))

    def append_metrics(self, row: dict[str, Any]) -> None:
        self._append_rows("metrics.jsonl", [row])

    def append_samples(self, rows: list[dict[str, Any]]) -> None:
        """One step's sample rows, appended at once (rank 0 only, as every record)."""
        self._append_rows("samples.jsonl", rows)

    def _append_rows(self, name: str, rows: list[dict[str, Any]]) -> None:
        if not self.writer or not rows:
            return
        with open(self.building / name, "a") as f:
            f.write("".join(json.dumps(row, sort_keys=True, default=float) + "\n" for row in rows))
            f.flush()
            os.fsync(f.fileno())

    def write_eval(self, evals: dict[str, Any]) -> None:
        if not self.writer:
            return
        atomic_write_json(self.building / "eval.json", evals)

    def keep_checkpoint(self, written: Path) -> None:
        """Make a checkpoint just written (in checkpoint_dir) the last one: last.ckpt becomes
        prev.ckpt, the fallback when the new one turns out corrupt."""
        if not self.writer:
            return
        folder = self.checkpoint_dir
        if not (folder / "identity.json").exists():
            atomic_write_json(folder / "identity.json", self._identity())
        if (folder / "last.ckpt").exists():
            os.replace(folder / "last.ckpt", folder / "prev.ckpt")
        os.replace(written, folder / "last.ckpt")

    def mark_done(self) -> None:
        """Mark the run finished; a forced rerun then takes the place of the run it replaces."""
        if not self.writer:
            return
        self.update_manifest(finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        atomic_write_text(self.building / "done", time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
        if self.building != self.path:
            self._swap_in()
            self.update_manifest(checkpoints=str(self.checkpoint_dir.absolute()))
