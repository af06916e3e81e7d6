"""Cluster profiles: what one SLURM job of a replication asks for.

A profile is a YAML file in `slurm/profiles/` (`local`, `slurm`, `slurm-gpu`) or any YAML file
you pass by path (`PROFILE=~/my-cluster.yaml`; `base: slurm-gpu` inherits a shipped profile).
Every field can be overridden from the environment without editing a file:
`REPLICATE_SLURM_<FIELD>=<yaml value>`, e.g.

    REPLICATE_SLURM_PARTITION=long REPLICATE_SLURM_ACCOUNT=my-lab REPLICATE_SLURM_TIME_MIN=240 \\
    REPLICATE_SLURM_SETUP='[module load cuda/12.4, source .venv/bin/activate]' \\
        make replicate-grpo CLUSTER=slurm PROFILE=slurm-gpu SCALE=paper
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

PROFILE_DIR = Path(__file__).resolve().parent / "profiles"
ENV_PREFIX = "REPLICATE_SLURM_"
DEFAULT_PROFILE = "slurm"
WHOLE_NODE = "node"  # mem_gb: node -> sbatch --mem=0 (all the memory of each node)
GPU_REQUESTS = ("gpus-per-node", "gres")
# environment variables PyTorch renamed (the old names still work with a deprecation warning): a setup
# line that exports one is refused, naming the current one
RENAMED_VARIABLES = {"NCCL_ASYNC_ERROR_HANDLING": "TORCH_NCCL_ASYNC_ERROR_HANDLING",
                     "NCCL_BLOCKING_WAIT": "TORCH_NCCL_BLOCKING_WAIT",
                     "NCCL_DESYNC_DEBUG": "TORCH_NCCL_DESYNC_DEBUG"}


@dataclass(frozen=True)
class SlurmProfile:
    """Resources and site settings of one job (one cell of a replication = one array task)."""

    name: str = DEFAULT_PROFILE
    partition: str | None = None  # sbatch --partition; None = the cluster's default partition
    account: str | None = None  # sbatch --account (charged allocation); None = your default
    qos: str | None = None  # sbatch --qos
    time_min: int = 120  # wall-clock limit of one attempt; a longer cell is requeued from its checkpoint
    nodes: int = 1  # nodes per cell; must equal trainer.num_nodes
    gpus_per_node: int = 0  # GPUs per node; > 0 must equal trainer.devices (one srun task per GPU)
    # CPUs of each task (one task per rank: per GPU, or per process of trainer.devices on CPU)
    cpus_per_task: int = 2
    mem_gb: float | str = 8  # memory per node (sbatch --mem=<n>G); "node": all of each node's (--mem=0)
    # how the GPUs are asked for: "gpus-per-node" (sbatch --gpus-per-node=N) or "gres" (--gres=gpu:N
    # alone, for sites whose SLURM schedules GPUs only as generic resources); never both
    gpu_request: str = "gpus-per-node"
    array_parallelism: int = 64  # cells of one replication that may run at the same time
    max_requeues: int = 3  # time-limit requeues before a cell is given up (submitit's max_num_timeout)
    signal_delay_s: int = 120  # the requeue signal (USR2) comes this long before the time limit
    setup: list[str] = field(default_factory=list)  # shell lines run before srun (module load, venv, ...)
    sbatch: dict[str, Any] = field(default_factory=dict)  # any other sbatch option, e.g. {constraint: a100}
    srun_args: list[str] = field(default_factory=list)  # extra arguments of the srun line
    python: str | None = None  # the job's Python command; None = this interpreter (sys.executable)
    poll_s: int = 60  # at most this many seconds between two sacct calls while waiting

    def describe(self) -> str:
        where = " ".join(f"{k}={v}" for k, v in (("partition", self.partition), ("account", self.account),
                                                  ("qos", self.qos)) if v)
        gpus = f" x {self.gpus_per_node} GPU" if self.gpus_per_node else ""
        mem = "all memory of each node" if self.whole_node_memory else f"{self.mem_gb:g} GB/node"
        return (f"profile {self.name}: {where or 'default partition'}, {self.nodes} node(s){gpus}, "
                f"{self.cpus_per_task} CPU/task, {mem}, {self.time_min} min")

    @property
    def whole_node_memory(self) -> bool:
        return self.mem_gb == WHOLE_NODE

    def submit_errors(self) -> list[str]:
        """What a real submission refuses (a dry run only notes it): GPUs without a partition land on the
        cluster's default partition, usually CPU-only, where the job pends forever or sbatch refuses it."""
        if self.gpus_per_node and not self.partition:
            return [f"profile {self.name} requests {self.gpus_per_node} GPU(s) per node but names no "
                    "partition: set partition: in the profile or REPLICATE_SLURM_PARTITION=<your GPU "
                    "partition> (nothing submitted)"]
        return []


FIELDS = {f.name: f for f in dataclasses.fields(SlurmProfile)}


def available_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def _read_yaml(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"cluster profile {path} must be a YAML mapping of fields; "
                         f"got {type(data).__name__}")
    return data


def _profile_file(name: str) -> Path:
    path = Path(name).expanduser()
    if name.endswith((".yaml", ".yml")) or os.sep in name:
        if not path.is_file():
            raise ValueError(f"cluster profile file {path} does not exist")
        return path
    shipped = PROFILE_DIR / f"{name}.yaml"
    if not shipped.is_file():
        raise ValueError(f"unknown cluster profile {name!r}; choose one of {available_profiles()} "
                         "or pass the path of a YAML file (see slurm/README.md)")
    return shipped


def _raw_profile(name: str, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    if name in seen:
        raise ValueError(f"cluster profiles inherit in a loop: {' -> '.join((*seen, name))}")
    path = _profile_file(name)
    data = _read_yaml(path)
    base = data.pop("base", None)
    merged = _raw_profile(str(base), (*seen, name)) if base else {}
    merged.update(data)
    merged["name"] = path.stem if path.parent == PROFILE_DIR else str(path)
    return merged


def env_overrides(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """`REPLICATE_SLURM_<FIELD>=<yaml value>` -> {field: value}; an unknown field is an error."""
    environ = dict(os.environ if environ is None else environ)
    out: dict[str, Any] = {}
    for key, text in environ.items():
        if not key.startswith(ENV_PREFIX):
            continue
        name = key[len(ENV_PREFIX):].lower()
        if name not in FIELDS or name == "name":
            known = ", ".join(ENV_PREFIX + f.upper() for f in FIELDS if f != "name")
            raise ValueError(f"unknown cluster profile override {key}; known: {known}")
        out[name] = yaml.safe_load(text) if text.strip() else None
    return out


def load_profile(name: str | None = None, overrides: dict[str, Any] | None = None,
                 environ: dict[str, str] | None = None) -> SlurmProfile:
    """The profile `name` (shipped name or YAML path), then REPLICATE_SLURM_* variables, then `overrides`."""
    data = _raw_profile(name or DEFAULT_PROFILE)
    data.update(env_overrides(environ))
    data.update(overrides or {})
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ValueError(f"cluster profile {data['name']}: unknown field(s) {unknown}; "
                         f"known: {sorted(FIELDS)}")
    if isinstance(data.get("setup"), str):  # one shell line given as a plain string
        data["setup"] = [data["setup"]]
    if isinstance(data.get("srun_args"), str):
        data["srun_args"] = data["srun_args"].split()
    profile = SlurmProfile(**data)
    _check(profile)
    return profile


def _check(p: SlurmProfile) -> None:
    errors = []
    for name in ("time_min", "nodes", "cpus_per_task", "array_parallelism", "poll_s"):
        value = getattr(p, name)
        if not isinstance(value, int) or value < 1:
            errors.append(f"{name} must be an integer >= 1; got {value!r}")
    if not isinstance(p.gpus_per_node, int) or p.gpus_per_node < 0:
        errors.append(f"gpus_per_node must be an integer >= 0; got {p.gpus_per_node!r}")
    if p.mem_gb != WHOLE_NODE and (isinstance(p.mem_gb, bool) or not isinstance(p.mem_gb, int | float)
                                   or p.mem_gb <= 0):
        errors.append(f"mem_gb must be a number > 0 or {WHOLE_NODE!r} (all of each node's memory); "
                      f"got {p.mem_gb!r}")
    if p.gpu_request not in GPU_REQUESTS:
        errors.append(f"gpu_request must be one of {list(GPU_REQUESTS)}; got {p.gpu_request!r}")
    if not isinstance(p.max_requeues, int) or p.max_requeues < 0:
        errors.append(f"max_requeues must be an integer >= 0; got {p.max_requeues!r}")
    limit_s = p.time_min * 60 if isinstance(p.time_min, int) else 0
    if not isinstance(p.signal_delay_s, int) or not 0 < p.signal_delay_s < limit_s:
        errors.append(f"signal_delay_s must be an integer between 1 and time_min*60; "
                      f"got {p.signal_delay_s!r}")
    if not isinstance(p.setup, list) or not all(isinstance(s, str) for s in p.setup):
        errors.append(f"setup must be a list of shell lines; got {p.setup!r}")
    else:
        for line in p.setup:
            for old, new in RENAMED_VARIABLES.items():
                if re.search(rf"(?<![A-Z_]){old}=", line):
                    errors.append(f"setup line {line!r}: {old} is PyTorch's old name; use {new}")
    if not isinstance(p.sbatch, dict):
        errors.append(f"sbatch must be a mapping of sbatch options; got {p.sbatch!r}")
    elif p.gpu_request == "gres" and ({"gpus-per-node", "gpus_per_node"} & set(p.sbatch)):
        errors.append("gpu_request is gres but sbatch also sets gpus-per-node: ask for the GPUs one way")
    if errors:
        raise ValueError(f"cluster profile {p.name} is invalid:\n  - " + "\n  - ".join(errors))
