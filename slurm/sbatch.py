"""What a launch asks of SLURM: one shape for every task of the job array (checked against each
cell's trainer settings), its sbatch parameters and srun layout, and the submitit executor that
writes and submits the batch script (slurm/launch.py submits through it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import submitit

from slurm.profiles import SlurmProfile


# ----------------------------------------------------------------------- resources per cell
@dataclass(frozen=True)
class JobShape:
    nodes: int
    tasks_per_node: int  # = trainer.devices: one srun task per device (Lightning's SLURMEnvironment)
    gpus_per_node: int


def _get(obj: Any, name: str, default: Any = None) -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    try:
        return obj[name] if hasattr(obj, "keys") else getattr(obj, name, default)
    except (KeyError, AttributeError):
        return default


def label(cell: Any) -> str:
    return getattr(cell, "name", None) or f"{cell.method}/{cell.env}/{cell.arm}/seed-{cell.seed}"


def job_shape(profile: SlurmProfile, cells: Sequence[Any], configs: Sequence[Any]) -> JobShape:
    """The one shape of every array task, checked against each cell's trainer settings: a run
    smaller or larger than the job that holds it is an error, never a silent change."""
    errors: list[str] = []
    shapes: dict[JobShape, list[str]] = {}
    gpus = profile.gpus_per_node
    for cell, cfg in zip(cells, configs, strict=True):
        trainer = _get(cfg, "trainer", {})
        accel = str(_get(trainer, "accelerator", "cpu"))
        devices, num_nodes = _get(trainer, "devices", 1), _get(trainer, "num_nodes", 1)
        name = label(cell)
        if not isinstance(devices, int) or devices < 1:
            errors.append(f"{name}: trainer.devices={devices!r}; under SLURM it must be the number of "
                          "devices per node")
            continue
        if num_nodes != profile.nodes:
            errors.append(f"{name}: trainer.num_nodes={num_nodes} but profile {profile.name} has "
                          f"nodes={profile.nodes}; set trainer.num_nodes={profile.nodes} or "
                          f"REPLICATE_SLURM_NODES={num_nodes}")
        if gpus and accel == "cpu":
            errors.append(f"{name}: profile {profile.name} has {gpus} GPU(s) per node but "
                          "trainer.accelerator=cpu; set trainer.accelerator=gpu (or use a CPU profile: "
                          "PROFILE=slurm)")
        elif gpus and devices != gpus:
            errors.append(f"{name}: trainer.devices={devices} but profile {profile.name} has "
                          f"gpus_per_node={gpus} (one srun task per GPU); set trainer.devices={gpus} or "
                          f"REPLICATE_SLURM_GPUS_PER_NODE={devices}")
        elif not gpus and accel in ("gpu", "cuda"):
            errors.append(f"{name}: trainer.accelerator={accel} but profile {profile.name} has no GPUs; "
                          f"use PROFILE=slurm-gpu or set REPLICATE_SLURM_GPUS_PER_NODE={devices}")
        shapes.setdefault(JobShape(profile.nodes, devices, gpus), []).append(name)
    if not errors and len(shapes) > 1:
        kinds = "; ".join(f"{s.tasks_per_node} device(s) x {s.nodes} node(s): {', '.join(n)}"
                          for s, n in shapes.items())
        errors.append(f"the cells of one job array must share their resources; got {kinds}")
    if errors:
        raise ValueError("the cells do not fit the cluster profile (nothing submitted):\n  - "
                         + "\n  - ".join(errors))
    return next(iter(shapes))


# -------------------------------------------------------------------------------- submitit
class _OfflineSlurmExecutor(submitit.SlurmExecutor):
    """A SlurmExecutor that builds scripts where SLURM is not installed (--dry-run)."""

    @classmethod
    def affinity(cls) -> int:
        return 2


def sbatch_parameters(profile: SlurmProfile, shape: JobShape, job_name: str, cwd: str) -> dict[str, Any]:
    params: dict[str, Any] = {
        "job_name": job_name,
        "time": profile.time_min,
        "nodes": shape.nodes,
        "ntasks_per_node": shape.tasks_per_node,
        "cpus_per_task": profile.cpus_per_task,
        "mem": "0" if profile.whole_node_memory else f"{profile.mem_gb:g}G",  # 0: all of each node's
        "array_parallelism": profile.array_parallelism,
        "signal_delay_s": profile.signal_delay_s,
        "setup": list(profile.setup),
        "srun_args": srun_args(profile, shape),
        # the jobs run where the launch ran (relative out_dir / work_dir); requeue explicitly allowed
        "additional_parameters": {"chdir": cwd, "requeue": True, **profile.sbatch},
    }
    for key in ("partition", "account", "qos"):
        if getattr(profile, key):
            params[key] = getattr(profile, key)
    if shape.gpus_per_node and profile.gpu_request == "gres":  # one way of asking, never both
        params["gres"] = f"gpu:{shape.gpus_per_node}"
    elif shape.gpus_per_node:
        params["gpus_per_node"] = shape.gpus_per_node
    return params


def srun_args(profile: SlurmProfile, shape: JobShape) -> list[str]:
    """The profile's srun arguments; with several ranks, a task that fails ends the others (which
    would otherwise wait for it in a collective until the process group's timeout)."""
    args = list(profile.srun_args)
    if (shape.nodes * shape.tasks_per_node > 1
            and not any(a.startswith(("--kill-on-bad-exit", "-K")) for a in args)):
        args.append("--kill-on-bad-exit=1")
    return args


def srun_layout(shape: JobShape) -> str:
    """How srun lays out one cell's ranks (printed by a dry run under its batch script)."""
    ranks = shape.nodes * shape.tasks_per_node
    if ranks == 1:
        return "# srun: 1 task: one process trains the cell"
    device = (f"GPU SLURM_LOCALID of {shape.gpus_per_node} on its node" if shape.gpus_per_node
              else "its share of the node's CPUs")
    lines = [f"# srun: {shape.nodes} node(s) x {shape.tasks_per_node} task(s) per node = {ranks} ranks of "
             f"one DDP run (Lightning's SLURMEnvironment: rank = SLURM_PROCID, MASTER_ADDR = the first node "
             f"of SLURM_NODELIST)"]
    for node in range(shape.nodes):
        ranks_here = ", ".join(str(node * shape.tasks_per_node + t) for t in range(shape.tasks_per_node))
        lines.append(f"#   node {node}: ranks {ranks_here}, each on {device}"
                     + ("; rank 0 writes the records" if node == 0 else ""))
    return "\n".join(lines)


def make_executor(folder: Path, profile: SlurmProfile, shape: JobShape, job_name: str, cwd: str,
                  offline: bool = False) -> submitit.SlurmExecutor:
    cls = _OfflineSlurmExecutor if offline else submitit.SlurmExecutor
    executor = cls(folder=folder, max_num_timeout=profile.max_requeues, python=profile.python)
    executor.update_parameters(**sbatch_parameters(profile, shape, job_name, cwd))
    return executor


def sbatch_script(executor: submitit.SlurmExecutor, n_jobs: int) -> str:
    """The batch script submitit submits for `n_jobs` cells (an array when n_jobs > 1)."""
    from submitit.slurm.slurm import _make_sbatch_string  # what SlurmExecutor itself writes

    params = dict(executor.parameters)
    if n_jobs > 1:
        params["map_count"] = n_jobs
    return _make_sbatch_string(command=executor._submitit_command_str, folder=executor.folder, **params)
