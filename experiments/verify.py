"""`make verify`: rerun a pinned sample of committed cells and say whether the code still makes them.

    python -m experiments.verify                    # every method's pinned cells (make verify)
    python -m experiments.verify --method grpo      # one method (make verify METHOD=grpo)
    python -m experiments.verify --dry-run          # which cells, and how long they took when committed

**The sample.** Each method's `conf/replication.yaml` may list `verify:` cells as `arm` or `arm@seed`;
without it, seed 0 of the replication's first arm (its main arm) at the scale. Each is rerun with exactly
its committed settings into a fresh folder under `<work_dir>/verify/` (the committed records are never
touched), warm starts taken from the cache like any run (keyed by the code they were built from).

**The verdict per cell.**
- `identical`: on a machine of the committed run's CPU class (the same architecture, the same
  kernel-relevant instruction-set flags and the same torch, transformers and peft as its manifest
  records) and with the same fixed `PYTHONHASHSEED` (make sets 0), the rerun's `eval.json` and every
  metrics row equal the committed ones number for number (timing fields aside). On such a machine
  anything else is `differs`: a run is bit-identical there.
- `statistically equal`: on another CPU class (or a committed manifest that records none), float
  results differ from the first step, so the rerun is one more draw of the arm: its final `mean@k`
  must fall in the 95% prediction interval of the committed seeds of that arm
  (`common.stats.prediction_interval`); outside it, `differs`.
Exit status 0 when no cell differs, 1 otherwise, 2 for a bad argument.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from common import stats
from common.provenance import cpu_info, package_versions
from experiments.replicate import Cell, estimate_seconds, launch_local, load_replication, minutes, plan

METRIC = "mean@k"  # the final metric compared across CPU classes
CLASS_PACKAGES = ("torch", "transformers", "peft")  # versions that change float results
TIMING = re.compile(r"(^|_)time|seconds|_s$")  # metric names that hold wall-clock times, never compared


@dataclass
class Check:
    cell: Cell  # the committed cell
    rerun: Path  # where the rerun wrote its records
    outcome: str  # identical | statistically equal | differs | failed
    detail: str

    def line(self) -> str:
        return f"{self.cell.name}: {self.outcome} ({self.detail})"


def pinned(method: str, scale: str) -> list[Cell]:
    """The committed cells `make verify` reruns for `method` (see the module docstring)."""
    rep = load_replication(method)
    wanted = rep.verify or [rep.arms_at(scale)[0]]
    cells = []
    for item in wanted:
        arm, _, seed = item.partition("@")
        cells += plan(method, scale, [int(seed or 0)], arms=[arm])
    return cells


def rerun_cell(cell: Cell, folder: Path) -> Cell:
    """`cell` with its records written under `folder`, on as many torch threads as the committed run had
    (a replication runs cells side by side on a share of the cores; another thread count sums floats in
    another order: IAPO's pinned cell, 1 thread committed, differed rerun on 2)."""
    try:
        threads = json.loads((cell.run_dir / "manifest.json").read_text()).get("torch_threads")
    except (OSError, ValueError):
        threads = None
    pin = (f"trainer.threads={threads}",) if isinstance(threads, int) and threads > 0 else ()
    return replace(cell, overrides=(*cell.overrides, f"out_dir={folder}", *pin), out_dir=str(folder))


def cpu_class(manifest: dict[str, Any]) -> tuple[Any, ...] | None:
    """What decides a run's float results: architecture, instruction-set flags, float-relevant packages,
    and Python's string-hash seed (a random one moves floats in the last bits from process to process).
    None when the manifest does not record the CPU or a fixed hash seed (runs from before it did)."""
    cpu = manifest.get("cpu")
    if not cpu or manifest.get("python_hash_seed") in (None, "random"):
        return None
    packages = manifest.get("packages", {})
    return (cpu.get("machine"), tuple(sorted(cpu.get("flags", []))),
            tuple(packages.get(p) for p in CLASS_PACKAGES), manifest["python_hash_seed"])


def this_class() -> tuple[Any, ...]:
    cpu, packages = cpu_info(), package_versions()
    return (cpu["machine"], tuple(sorted(cpu["flags"])), tuple(packages.get(p) for p in CLASS_PACKAGES),
            os.environ.get("PYTHONHASHSEED"))


def without_timing(x: Any) -> Any:
    """`x` with every wall-clock field left out (recursively)."""
    if isinstance(x, dict):
        return {k: without_timing(v) for k, v in x.items() if not TIMING.search(k)}
    if isinstance(x, list):
        return [without_timing(v) for v in x]
    return x


def records(run_dir: Path) -> dict[str, Any]:
    """A run's results as compared: eval.json and the metrics rows, timing fields aside."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return without_timing({"eval.json": json.loads((run_dir / "eval.json").read_text()),
                           "metrics.jsonl": rows})


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two JSON values first differ ('metrics.jsonl[3].loss: -0.14 vs -0.15'), or None if equal."""
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(a.keys() | b.keys()):
            if key not in a or key not in b:
                return f"{where}.{key}: only in the {'rerun' if key in b else 'committed run'}"
            found = first_difference(a[key], b[key], f"{where}.{key}" if where else key)
            if found:
                return found
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: {len(a)} vs {len(b)} entries"
        return next((d for i, (x, y) in enumerate(zip(a, b, strict=True))
                     if (d := first_difference(x, y, f"{where}[{i}]"))), None)
    return None if a == b else f"{where}: {a!r} (committed) vs {b!r} (rerun)"


def arm_finals(cell: Cell) -> list[float]:
    """Final `METRIC` of every finished committed seed of the cell's arm."""
    values = []
    for run in sorted(cell.run_dir.parent.glob("seed-*")):
        if (run / "done").exists() and (run / "eval.json").exists():
            final = json.loads((run / "eval.json").read_text()).get("final") or {}
            if isinstance(final.get(METRIC), int | float):
                values.append(float(final[METRIC]))
    return values


def judge(cell: Cell, rerun: Path) -> Check:
    """Compare a finished rerun with the committed records of `cell` (see the module docstring)."""
    manifest = json.loads((cell.run_dir / "manifest.json").read_text())
    committed_class = cpu_class(manifest)
    if committed_class == this_class():
        difference = first_difference(records(cell.run_dir), records(rerun))
        if difference is None:
            rows = len(records(rerun)["metrics.jsonl"])
            return Check(cell, rerun, "identical", f"eval.json and {rows} metrics rows, number for number")
        return Check(cell, rerun, "differs", f"same CPU class, yet {difference}")
    why = "the committed manifest records no CPU" if committed_class is None else "another CPU class"
    finals = arm_finals(cell)
    got = json.loads((rerun / "eval.json").read_text())["final"].get(METRIC)
    mean, lo, hi = stats.prediction_interval(finals)
    if not isinstance(got, int | float) or lo != lo:
        return Check(cell, rerun, "differs",
                     f"{why}; no final {METRIC} to compare, or fewer than 2 committed seeds")
    inside = lo <= got <= hi
    return Check(cell, rerun, "statistically equal" if inside else "differs",
                 f"{why}: final {METRIC} {got:.4f} {'inside' if inside else 'outside'} [{lo:.4f}, {hi:.4f}], "
                 f"the 95% prediction interval of the {len(finals)} committed seeds (mean {mean:.4f})")


def verify(cells: list[Cell], folder: Path) -> list[Check]:
    """Rerun each committed cell into `folder`, one at a time, and judge it."""
    checks = []
    for cell in cells:
        if not cell.done:
            checks.append(Check(cell, folder, "failed",
                                f"no finished committed run of these settings: {cell.state()}"))
            continue
        rerun = rerun_cell(cell, folder)
        failures = launch_local([rerun], 1, cell.work_dir)
        if failures:
            checks.append(Check(cell, rerun.run_dir, "failed", failures[0].splitlines()[-1]))
        else:
            checks.append(judge(cell, rerun.run_dir))
        print(f"[verify] {checks[-1].line()}", flush=True)
    return checks


def main(argv: list[str] | None = None) -> int:
    from replications import METHODS

    p = argparse.ArgumentParser(prog="python -m experiments.verify", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default=None, help="one method (default: every method)")
    p.add_argument("--scale", default="cpu")
    p.add_argument("--dry-run", action="store_true", help="list the pinned cells and their committed times")
    args = p.parse_args(argv)
    methods = [args.method] if args.method else list(METHODS)
    try:
        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method {unknown[0]!r}; choose one of {', '.join(METHODS)}")
        cells = [c for m in methods for c in pinned(m, args.scale)]
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    total = sum(estimate_seconds(c) or 0.0 for c in cells)
    print(f"[verify] {len(cells)} pinned cell(s), {minutes(total)} by their committed times: "
          + ", ".join(c.name for c in cells), flush=True)
    if args.dry_run:
        return 0
    folder = Path(cells[0].work_dir if cells else ".cache") / "verify" / time.strftime("%Y%m%d-%H%M%S")
    checks = verify(cells, folder)
    print(f"\n[verify] reruns in {folder}")
    for c in checks:
        print(c.line())
    bad = [c for c in checks if c.outcome in ("differs", "failed")]
    print(f"[verify] {len(checks) - len(bad)} of {len(checks)} cell(s) reproduced")
    return 1 if bad else 0


if __name__ == "__main__":
    from experiments.verify import main as verify_main

    sys.exit(verify_main())
