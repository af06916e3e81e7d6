"""Submit a replication's cells to SLURM as one job array (submitit), wait, print the tables.

    make replicate-grpo CLUSTER=slurm [PROFILE=slurm-gpu] [WAIT=0] [DRY_RUN=1] [SEEDS=0,1] [FORCE=1]

The launcher knows nothing of the methods: the caller (`experiments.replicate`) hands it the
cells and three functions, `run(cell)` (one training run, inside the job), `validate(cells)`
(their configs, checked before anything is submitted) and `aggregate(method, scale, cells)` (the
text printed at the end). The launch record keeps `aggregate` by its importable name, so
`python -m slurm collect` imports it later without importing any method here.

One cell (arm x seed) = one array task = `run(cell)` inside `CellJob`, a submitit
`Checkpointable`. Requeue is owned by submitit alone: on the USR2 signal SLURM sends
`signal_delay_s` before the time limit (or on `scancel --signal=USR2`), submitit calls
`CellJob.checkpoint()`, which resubmits the same cell, and requeues the job; the new attempt's
`run` resumes from the last Lightning checkpoint (saved every trainer.checkpoint_every steps).
Lightning runs with `SLURMEnvironment(auto_requeue=False)`, so it installs no requeue handler of
its own. A requeue from outside (`scontrol requeue`, preemption with PreemptMode=REQUEUE, node
failure) restarts the same submission, and resumes the same way.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import submitit
import yaml

from slurm import monitor
from slurm.jobs import Entry, Launch, classify, entry_point, launches, load_entry, main_module, sacct
from slurm.profiles import SlurmProfile, load_profile
from slurm.sbatch import JobShape, job_shape, label, make_executor, sbatch_script, srun_layout

_FORCE = re.compile(r"^\+{0,2}force=(true|True|1|yes)$")


# ----------------------------------------------------------------------------------- the job
class CellJob(submitit.helpers.Checkpointable):
    """One cell, run by submitit inside its SLURM job (every srun task calls it; Lightning ranks them)."""

    def __init__(self, cell: Any, run: Callable[[Any], Any]):
        self.cell = cell
        self.run = run  # one training run of a cell, e.g. experiments.replicate.run_cell

    def __call__(self) -> Any:
        overrides = list(self.cell.overrides)
        if not any(o.lstrip("+").startswith("progress=") for o in overrides):
            overrides.append("progress=false")  # a batch log is read with `tail`: no progress bars in it
        if _started_by_this_job(self.cell):
            # FORCE=1 restarts a run once; a requeued attempt of the same job resumes what it restarted
            overrides = [o for o in overrides if not _FORCE.match(o)]
        return self.run(dataclasses.replace(self.cell, overrides=tuple(overrides)))

    def checkpoint(self, *args: Any, **kwargs: Any) -> submitit.helpers.DelayedSubmission:
        # Nothing to save here: the training state is Lightning's last checkpoint, written every
        # trainer.checkpoint_every steps. Resubmitting the same cell resumes from it.
        return submitit.helpers.DelayedSubmission(CellJob(self.cell, self.run))


def _started_by_this_job(cell: Any) -> bool:
    """Whether an earlier attempt of this very SLURM job (same id: a requeue) started the run."""
    job = os.environ.get("SLURM_JOB_ID")
    try:
        manifest = json.loads((Path(cell.run_dir) / "manifest.json").read_text())
    except (OSError, ValueError):
        return False
    return job is not None and (manifest.get("slurm") or {}).get("slurm_job_id") == job


# ---------------------------------------------------------------------------------- launch
def _plain(cfg: Any) -> Any:
    if dataclasses.is_dataclass(cfg) and not isinstance(cfg, type):
        return dataclasses.asdict(cfg)
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(cfg, DictConfig):
            return OmegaConf.to_container(cfg, resolve=True)
    except ImportError:
        pass
    return cfg


def _forced(cells: Sequence[Any]) -> bool:
    return any(_FORCE.match(o) for c in cells for o in getattr(c, "overrides", ()))


def importable(cell: Any) -> Any:
    """The same cell as an instance of its importable class. Run as `python -m experiments.replicate`,
    the planner's Cell lives in `__main__`, which neither the jobs nor `make collect` can import."""
    cls = type(cell)
    module = main_module(cls.__module__)
    if module == cls.__module__ or not dataclasses.is_dataclass(cell):
        return cell
    real = getattr(importlib.import_module(module), cls.__qualname__)
    return real(**{f.name: getattr(cell, f.name) for f in dataclasses.fields(cell)})


def importable_function(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The same function from its importable module (see `importable`), so that the jobs unpickle
    `experiments.replicate.run_cell`, not a copy of `__main__`."""
    module = main_module(fn.__module__)
    if module == fn.__module__:
        return fn
    real: Callable[..., Any] = getattr(importlib.import_module(module), fn.__qualname__)
    return real


def find_in_flight(work_dir: Path, run_dirs: set[str]) -> dict[str, Entry]:
    """Cells of earlier launches still queued or running (so a rerun does not submit them twice)."""
    candidates = []
    for path in launches(work_dir):
        try:
            record = Launch.load(path)
        except (OSError, ValueError, TypeError):
            continue
        candidates += [e for e in record.entries if e.job_id and e.run_dir in run_dirs]
    if not candidates:
        return {}
    rows = sacct([e.job_id for e in candidates if e.job_id]) or {}
    out = {}
    for e in candidates:
        if e.job_id in rows and classify(e, rows[e.job_id]).outcome in ("pending", "running"):
            out[e.run_dir] = e
    return out


Aggregate = Callable[[str, str, list[Any]], str]  # (method, scale, cells) -> the text printed at the end


def launch(cells: Sequence[Any], profile_name: str | None, wait: bool, dry_run: bool, *,
           run: Callable[[Any], Any], validate: Callable[[list[Any]], list[Any]], aggregate: Aggregate,
           profile_overrides: dict[str, Any] | None = None, verbose: bool = False) -> int:
    """Submit `cells` as one job array, each running `run(cell)`; `validate(cells)` returns their
    configs (raises ValueError to refuse); `aggregate(method, scale, cells)` is printed at the end
    and recorded by name for `python -m slurm collect`. 0 = all done, 1 = some failed or missing,
    2 = refused. A dry run prints a summary (`dry_run_summary`); `verbose` adds the whole sbatch
    script and every cell's resolved config."""
    cells = [importable(c) for c in cells]
    run = importable_function(run)
    if not cells:
        print("nothing to run: the plan has no cells")
        return 0
    try:
        profile = load_profile(profile_name, profile_overrides)
        configs = validate(cells)
        shape = job_shape(profile, cells, configs)
        if not dry_run and profile.submit_errors():
            raise ValueError(profile.submit_errors()[0])
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    method, scale = cells[0].method, cells[0].scale
    cwd = os.getcwd()
    work_dir = Path(cells[0].work_dir).absolute()
    forced = _forced(cells)
    run_dirs = {label(c): str(Path(c.run_dir).absolute()) for c in cells}
    # a cell says whether it is finished with its own settings (`done`); one finished with others is run
    # (and refused)
    done = {label(c) for c in cells if not forced and c.done}
    # never two jobs on one run directory, FORCE=1 or not: scancel the earlier one to restart a cell
    in_flight = find_in_flight(work_dir, {run_dirs[label(c)] for c in cells if label(c) not in done})
    todo = [c for c in cells if label(c) not in done and run_dirs[label(c)] not in in_flight]

    cell_type = f"{type(cells[0]).__module__}:{type(cells[0]).__qualname__}"
    record = Launch(id=Launch.new_id(method, scale), method=method, scale=scale, cwd=cwd,
                    work_dir=str(work_dir), profile=dataclasses.asdict(profile), cell_type=cell_type,
                    aggregate=entry_point(aggregate))
    executor = make_executor(record.folder, profile, shape, f"{method}-{scale}", cwd, offline=dry_run)
    print(f"[slurm] {method} scale={scale}: {len(cells)} cell(s): {len(done)} done, {len(in_flight)} already "
          f"queued, {len(todo)} to submit; {profile.describe()}")

    if dry_run:
        script = sbatch_script(executor, len(todo))
        print(dry_run_summary(profile, shape, todo, script, record.folder.parent))
        if not verbose:
            return 0
        by_label = dict(zip((label(c) for c in cells), configs, strict=True))
        print(f"\n# sbatch script ({len(todo)} cell(s); nothing is submitted in a dry run)\n")
        print(script)
        print(srun_layout(shape) + "\n")
        for i, cell in enumerate(todo):
            print(f"# [{i}] {label(cell)} -> {cell.run_dir}\n# overrides: {' '.join(cell.overrides)}")
            print(yaml.safe_dump(_plain(by_label[label(cell)]), sort_keys=False))
        return 0

    jobs: dict[str, str] = {}
    if todo:
        if shutil.which("sbatch") is None or shutil.which("srun") is None:
            print("error: sbatch/srun not found: run this on a SLURM login node (or start the dev cluster: "
                  "make slurm-up, then PROFILE=local); nothing was submitted", file=sys.stderr)
            return 2
        try:
            submitted = executor.submit_array([CellJob(c, run) for c in todo])
        except Exception as error:  # noqa: BLE001 - sbatch's own message is the useful part
            shutil.rmtree(record.folder.parent, ignore_errors=True)
            message = str(error).strip().splitlines()
            print(f"error: sbatch refused the job array ({profile.describe()}):\n  "
                  + "\n  ".join(message[-5:])
                  + "\nnothing was submitted; fix the profile (see slurm/README.md) and launch again",
                  file=sys.stderr)
            return 2
        jobs = {label(c): j.job_id for c, j in zip(todo, submitted, strict=True)}
        record.array_job_id = submitted[0].job_id.split("_")[0]
    for cell in cells:
        name, run_dir = label(cell), run_dirs[label(cell)]
        if run_dir in in_flight:
            other = in_flight[run_dir]
            record.entries.append(Entry(dataclasses.asdict(cell), name, run_dir, other.job_id, other.folder))
        else:
            record.entries.append(Entry(dataclasses.asdict(cell), name, run_dir, jobs.get(name),
                                        str(record.folder) if name in jobs else None))
    for entry in record.entries:
        where = "done before this launch" if entry.job_id is None else (
            f"job {entry.job_id}" + ("" if entry.label in jobs else " (queued by an earlier launch)"))
        print(f"[slurm]   {entry.label}: {where}")
    if todo:  # a launch that submits nothing is not recorded: `make status` keeps showing the last real one
        record.save()
        what = (f"job array {record.array_job_id} ({len(todo)} cells)" if len(todo) > 1
                else f"job {record.array_job_id}")
        print(f"[slurm] submitted {what}; logs in {record.folder.parent}")
        print(f"[slurm] launch recorded in {record.path}")
    if not wait:
        print("[slurm] not waiting: `make status` shows progress; `make collect` waits, reports failures and "
              "prints the tables")
        return 0
    return collect(record, aggregate, wait=True)


SHOWN_CELLS = 12  # a dry run's summary names this many cells, then counts the rest


def dry_run_summary(profile: SlurmProfile, shape: JobShape, todo: Sequence[Any], script: str,
                    folder: Path) -> str:
    """What a dry run prints by default: the cells, the array, the resources (the script's #SBATCH lines),
    where the scripts and logs would go; tens of lines, where the script and the cells' configs are
    thousands (VERBOSE=1 prints those)."""
    lines = [f"[slurm] dry run, nothing submitted: {len(todo)} cell(s) to submit"
             + (f" as one job array of {len(todo)} tasks, at most {profile.array_parallelism} at once"
                if len(todo) > 1 else "")]
    lines += [f"  {label(c)}" for c in todo[:SHOWN_CELLS]]
    if len(todo) > SHOWN_CELLS:
        lines.append(f"  ... and {len(todo) - SHOWN_CELLS} more")
    ranks = shape.nodes * shape.tasks_per_node
    lines.append(f"  each cell: {shape.nodes} node(s) x {shape.tasks_per_node} task(s) = {ranks} rank(s); "
                 "the job's resources:")
    lines += ["    " + line for line in script.splitlines()
              if line.startswith("#SBATCH") and not line.startswith(("#SBATCH --output", "#SBATCH --error"))]
    lines.append(f"  scripts and logs would go under {folder}")
    lines += [f"  note: a real launch is refused: {e}" for e in profile.submit_errors()]
    lines.append("  VERBOSE=1 (--verbose) prints the sbatch script and every cell's config")
    return "\n".join(lines)


def collect(record: Launch, aggregate: Aggregate | None = None, wait: bool = True) -> int:
    """Wait for a launch's cells (or not), name each failure with its state and log, then print
    `aggregate(method, scale, cells)` (default: the function the launch recorded by name)."""
    if aggregate is None:
        if not record.aggregate:
            print(f"error: launch {record.id} records no tables function; pass one: "
                  "python -m slurm collect --entry module:function", file=sys.stderr)
            return 2
        try:
            aggregate = load_entry(record.aggregate)
        except (ImportError, AttributeError, ValueError) as error:
            print(f"error: cannot import {record.aggregate!r}, the tables function launch {record.id} "
                  f"recorded ({error}); pass one: python -m slurm collect --entry module:function",
                  file=sys.stderr)
            return 2
    entries = record.entries
    poll_s = float(record.profile.get("poll_s", 60))
    try:
        if wait:
            states = monitor.wait(entries, poll_s=poll_s)
        else:
            states = monitor.snapshot(entries, sacct([e.job_id for e in entries if e.job_id]))
    except KeyboardInterrupt:
        print("\n[slurm] stopped waiting; the jobs keep running: `make status`, then `make collect`",
              file=sys.stderr)
        return 130
    text, missing = monitor.report(states)
    live = [s for s in states if not s.finished]
    if live:
        text += f"\n{len(live)} cell(s) still queued or running: " + ", ".join(s.entry.label for s in live)
    print(text)
    print()
    try:
        print(aggregate(record.method, record.scale, record.cells()))
    except Exception as error:  # noqa: BLE001 - the failures above are the part that must not be lost
        print(f"error: the tables could not be built: {type(error).__name__}: {error}", file=sys.stderr)
        return 1
    return 0 if missing == 0 else 1
