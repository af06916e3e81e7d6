"""What became of submitted cells: launch records, SLURM states (sacct), run directories, logs.

A launch is recorded as `<work_dir>/launches/<id>.json` next to submitit's folder
`<work_dir>/launches/<id>/` (sbatch script, pickles, one stdout/stderr log per array task), so
`python -m slurm status|collect` can pick it up from another shell, long after the launch.

The state of a cell is read from three places, in this order of trust:
1. its run directory: the `done` marker means finished, whatever SLURM says;
2. submitit's result pickle: an exception raised by the cell, with its traceback;
3. `sacct`: FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL ... for a job that died without
   a result; PENDING, RUNNING, REQUEUED ... for a job still on its way.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from submitit.core.utils import JobPaths, pickle_load

# SLURM job states after which a job will not run again (without a requeue from outside).
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL",
            "DEADLINE", "REVOKED", "SPECIAL_EXIT"}
RUNNING = {"RUNNING", "COMPLETING", "CONFIGURING", "SIGNALING", "STAGE_OUT", "RESIZING"}


@dataclass
class Entry:
    """One cell of a launch and the array task that runs it (None: done before the launch)."""

    cell: dict[str, Any]  # dataclasses.asdict(cell): rebuilds the Cell for the tables at the end
    label: str  # method/env/arm/seed-k
    run_dir: str  # absolute
    job_id: str | None = None  # "<array job id>_<index>"
    folder: str | None = None  # submitit's folder pattern (".../%j")

    def paths(self, task: int = 0) -> JobPaths:
        assert self.job_id and self.folder, f"{self.label} was not submitted"
        return JobPaths(self.folder, job_id=self.job_id, task_id=task)


@dataclass
class Launch:
    """The record of one `--cluster slurm` launch of a replication."""

    id: str
    method: str
    scale: str
    cwd: str  # where the launch ran; the jobs run there too (sbatch --chdir)
    work_dir: str  # absolute
    profile: dict[str, Any]
    cell_type: str  # "module:QualName" of the cells, to rebuild them
    aggregate: str | None = None  # "module:function" printing the tables at the end (None: not importable)
    entries: list[Entry] = field(default_factory=list)
    array_job_id: str | None = None
    created: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))

    @staticmethod
    def new_id(method: str, scale: str) -> str:
        return f"{time.strftime('%Y%m%d-%H%M%S')}-{method}-{scale}-{uuid.uuid4().hex[:4]}"

    @property
    def path(self) -> Path:
        return Path(self.work_dir) / "launches" / f"{self.id}.json"

    @property
    def folder(self) -> Path:
        """submitit's folder: one sub-folder per array job (`%j` = <array id>_<index>)."""
        return Path(self.work_dir) / "launches" / self.id / "%j"

    def save(self) -> Path:
        from common.util import atomic_write_json

        atomic_write_json(self.path, dataclasses.asdict(self))
        return self.path

    @classmethod
    def load(cls, path: Path) -> Launch:
        data = json.loads(Path(path).read_text())
        data["entries"] = [Entry(**e) for e in data["entries"]]
        return cls(**data)

    def cells(self) -> list[Any]:
        """The cells of this launch (all of them, also those done before it), as the planner's type."""
        cls = load_entry(self.cell_type)
        cells = []
        for entry in self.entries:
            values = dict(entry.cell)
            for key in ("out_dir", "work_dir"):  # relative to where the launch ran
                if key in values and not Path(values[key]).is_absolute():
                    values[key] = str(Path(self.cwd) / values[key])
            if isinstance(values.get("overrides"), list):
                values["overrides"] = tuple(values["overrides"])
            cells.append(cls(**values))
        return cells


def main_module(module: str) -> str:
    """`__main__` of a module run with `python -m pkg.mod` as its importable name (`pkg.mod`); any
    other module name unchanged."""
    if module != "__main__":
        return module
    spec = getattr(sys.modules.get("__main__"), "__spec__", None)
    return spec.name if spec is not None else module


def entry_point(obj: Callable[..., Any]) -> str | None:
    """'module:QualName' of a function or class that another process can import; None for a lambda,
    a local function or a script's `__main__`."""
    module, qualname = main_module(obj.__module__), obj.__qualname__
    return None if module == "__main__" or "<" in qualname else f"{module}:{qualname}"


def load_entry(name: str) -> Any:
    """The object named 'module:QualName' (imported generically: the launcher imports no method)."""
    module, sep, qualname = name.partition(":")
    if not sep or not module or not qualname:
        raise ValueError(f"{name!r} is not of the form module:function")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def launches(work_dir: str | Path) -> list[Path]:
    """Launch records under `<work_dir>/launches/`, oldest first."""
    folder = Path(work_dir) / "launches"
    return sorted(folder.glob("*.json"), key=lambda p: (p.stat().st_mtime, p.name))


# ---------------------------------------------------------------------------------------- sacct
@dataclass(frozen=True)
class SacctRow:
    state: str  # first word of sacct's State ("CANCELLED by 0" -> CANCELLED)
    exit_code: str  # "<code>:<signal>"
    elapsed: str
    nodes: str


_ARRAY = re.compile(r"^(?P<base>\d+)_\[(?P<ranges>[^\]]+)\]$")


def _expand(job_id: str) -> list[str]:
    """'12_3' -> ['12_3']; '12_[0-2,5%4]' (tasks not started yet) -> ['12_0', '12_1', '12_2', '12_5']."""
    match = _ARRAY.match(job_id)
    if not match:
        return [job_id]
    out = []
    for part in match.group("ranges").split("%")[0].split(","):
        low, _, high = part.partition("-")
        out += [f"{match.group('base')}_{i}" for i in range(int(low), int(high or low) + 1)]
    return out


def parse_sacct(text: str) -> dict[str, SacctRow]:
    rows: dict[str, SacctRow] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 5 or "." in parts[0]:
            continue
        row = SacctRow(state=parts[1].split()[0] if parts[1] else "UNKNOWN", exit_code=parts[2],
                       elapsed=parts[3], nodes=parts[4])
        for job_id in _expand(parts[0]):
            rows[job_id] = row
    return rows


def sacct(job_ids: list[str]) -> dict[str, SacctRow] | None:
    """Current state of array tasks / jobs, one sacct call; None if sacct does not answer."""
    bases = sorted({j.split("_")[0] for j in job_ids})
    if not bases:
        return {}
    cmd = ["sacct", "-X", "-n", "-P", "-o", "JobID,State,ExitCode,Elapsed,NodeList", "-j", ",".join(bases)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_sacct(out)


# ------------------------------------------------------------------------------------ cell state
@dataclass
class CellState:
    entry: Entry
    slurm: str  # SLURM state, "-" when not submitted or not known yet
    outcome: str  # done | running | pending | failed
    detail: str = ""

    @property
    def finished(self) -> bool:
        return self.outcome in ("done", "failed")


def run_progress(run_dir: Path) -> str:
    """'step 12, attempt 2' from the run directory (cheap: counts metrics lines)."""
    if not run_dir.exists():
        return "no run directory yet"
    metrics = run_dir / "metrics.jsonl"
    steps = sum(1 for line in metrics.read_text().splitlines() if line.strip()) if metrics.exists() else 0
    try:
        attempts = json.loads((run_dir / "manifest.json").read_text()).get("attempts", 1)
    except (OSError, ValueError):
        attempts = 1
    return f"{steps} step(s) logged" + (f", attempt {attempts}" if attempts > 1 else "")


def read_result(entry: Entry) -> tuple[str, Any] | None:
    """submitit's ("success", value) | ("error", traceback) of task 0, or None if not written."""
    path = entry.paths().result_pickle
    if not path.exists():
        return None
    try:
        return pickle_load(path)
    except Exception as error:  # noqa: BLE001 - a half-written or unreadable pickle is reported, not raised
        return ("error", f"unreadable result {path}: {error!r}")


def classify(entry: Entry, row: SacctRow | None) -> CellState:
    run_dir = Path(entry.run_dir)
    if (run_dir / "done").exists():
        return CellState(entry, row.state if row else "-", "done", "done")
    if entry.job_id is None:
        return CellState(entry, "-", "failed", "was done at launch but its done marker is gone")
    result = read_result(entry)
    slurm = row.state if row else "SUBMITTED"  # sacct lags sbatch by a moment
    if result is not None:
        kind, value = result
        if kind == "error":
            last = [line for line in str(value).strip().splitlines() if line.strip()]
            return CellState(entry, slurm, "failed", f"raised: {last[-1] if last else value}")
        return CellState(entry, slurm, "failed", f"returned {value!r} but {run_dir}/done is missing")
    if row is None:
        return CellState(entry, slurm, "pending", "not in sacct yet")
    if row.state in TERMINAL:
        return CellState(entry, slurm, "failed", f"ended {row.state} (exit {row.exit_code}) without a result")
    if row.state in RUNNING:
        return CellState(entry, slurm, "running", run_progress(run_dir))
    return CellState(entry, slurm, "pending", run_progress(run_dir) if run_dir.exists() else "")


def tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    # a progress bar rewrites its line with carriage returns: keep what a terminal would show
    return [line.rstrip("\r").rsplit("\r", 1)[-1] for line in text.rstrip().splitlines()[-lines:]]


def failure_report(state: CellState, lines: int = 15) -> str:
    """The failed cell named with its SLURM state, its error and the tail of its log."""
    e = state.entry
    head = f"FAILED {e.label}: SLURM job {e.job_id or '-'} state {state.slurm}; {state.detail}"
    if not e.job_id:
        return head
    paths = e.paths()
    log = tail(paths.stderr, lines) or tail(paths.stdout, lines)
    out = [head, f"  run dir: {e.run_dir}", f"  logs:    {paths.stderr}  (and {paths.stdout.name})"]
    out += [f"  | {line}" for line in log] or ["  | (the log is empty: the job may not have started)"]
    return "\n".join(out)
