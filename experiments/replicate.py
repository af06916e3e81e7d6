"""A whole replication: arms x seeds of one method at one scale, launched, then its tables printed.

    python -m experiments.replicate --method grpo                     # cpu scale, local
    python -m experiments.replicate --method grpo --scale smoke
    python -m experiments.replicate --method grpo --cluster slurm --no-wait
    python -m experiments.replicate --method grpo trainer.lr=1e-3     # extra Hydra overrides

The arms and seeds are data: `replications/<method>/conf/replication.yaml`. Every cell's config is
composed and checked before anything starts (a bad config fails here, not in a job). Cells whose
run directory is `done` are skipped, unfinished ones resume, finished ones are never overwritten
without --force (a cell's state and time estimate: `experiments.plan`). Local cells run through
submitit's local executor, a few at a time, each with its share of the cores. At the end it prints
the method's section of the report, the same tables `make paper` builds for it
(`paper.build.method_tables`), then every failed cell. A bad setting or argument is one line
`error: ...` and exit status 2, before anything runs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Collection
from dataclasses import replace
from pathlib import Path
from typing import Any, NoReturn

import experiments.plan as plans
from common.config import SEED_LIMIT, RunConfig
from experiments.plan import (
    Cell,
    CellState,
    Replication,
    _plain_config,
    estimate_seconds,
    load_replication,
    minutes,
    plan_text,
    refusal,
)
from experiments.plan_memory import check_cells
from experiments.run import compose

# the cells, their states, time estimates and the replication file are experiments.plan's; importable here too
__all__ = [
    "RESERVED", "Cell", "CellState", "Replication", "UsageError", "cell_config", "check_extra_overrides",
    "collect_tables", "estimate_seconds", "failure_text", "launch_local", "load_replication", "main",
    "minutes", "one_line", "parse_args", "plan", "plan_text", "refusal", "run_cell",
    "seed_list", "tuned_overrides", "tuning_path", "validate_cells",
]


def tuning_path(out_dir: str | Path, method: str, scale: str) -> Path:
    """Where `make tune-<method>` writes what it selected (experiments/tune.py)."""
    return Path(out_dir) / method / f"tuning-{scale}.json"


def tuned_overrides(out_dir: str | Path, method: str, scale: str) -> dict[str, str]:
    """arm -> the override its dev sweep selected, from `tuning_path` (no sweep run: {})."""
    path = tuning_path(out_dir, method, scale)
    if not path.exists():
        return {}
    return {arm: a["override"] for arm, a in json.loads(path.read_text())["arms"].items()
            if a.get("override")}


# Settings a replication sets for each cell, never an extra override: they name the cell's run folder and
# its progress line, so an override would run another cell under this one's name (ARGS=seed=7 ran seed 7
# while the progress showed seed 0). Where each belongs instead:
RESERVED = {"seed": "SEEDS (--seeds)",
            "arm": "the replication's arms (replications/<method>/conf/replication.yaml; --arms)",
            "method": "the target (make replicate-<method>, --method)", "scale": "SCALE (--scale)"}


def check_extra_overrides(overrides: Collection[str]) -> None:
    """Raise ValueError (one line) on an extra override of a setting in RESERVED (`+seed=`, `~arm` too)."""
    for override in overrides:
        key = override.split("=", 1)[0].lstrip("+~")
        if key in RESERVED:
            raise ValueError(f"{override} in the extra overrides (ARGS) is refused: a cell's {key} is set by "
                             f"{RESERVED[key]}, not by an override")


def plan(method: str, scale: str, seeds: list[int] | None = None, extra_overrides: tuple[str, ...] = (),
         arms: list[str] | None = None) -> list[Cell]:
    """Every (arm, seed) cell, with its config composed and checked. An arm that `make tune-<method>`
    tuned at this scale runs at its selected setting (after the arm's own overrides, before the
    command line's, which still win; those may not set a cell's seed, arm, method or scale)."""
    check_extra_overrides(extra_overrides)
    rep = load_replication(method)
    if scale not in rep.seeds:
        raise ValueError(f"{method} has no scale {scale!r}; choose one of {sorted(rep.seeds)}")
    chosen = arms or rep.arms_at(scale)
    missing = sorted(set(chosen) - set(rep.arms))
    if missing:
        raise ValueError(f"{method} has no arm(s) {missing}; its arms are {list(rep.arms)}")
    elsewhere = [a for a in chosen if a not in rep.arms_at(scale)]
    if elsewhere:
        raise ValueError(f"{method}'s arm(s) {elsewhere} run only at scale(s) "
                         f"{sorted({s for a in elsewhere for s in rep.arm_scales[a]})}, not {scale!r}")
    cells = []
    out_dir = compose(method, (f"scale={scale}", *extra_overrides)).out_dir
    tuned = tuned_overrides(out_dir, method, scale)
    for arm in chosen:
        if arm in tuned:
            print(f"[replicate] {arm}: {tuned[arm]}, selected on the dev split "
                  f"({tuning_path(out_dir, method, scale)})", file=sys.stderr)
        for seed in seeds if seeds is not None else rep.seeds_of(arm, scale):
            overrides = (f"scale={scale}", f"seed={seed}", f"arm={arm}", *rep.arms[arm],
                         *([tuned[arm]] if arm in tuned else []), *extra_overrides)
            cfg = _plain_config(method, overrides)
            env = cfg["env"].get("tag") or cfg["env"]["name"]
            cells.append(Cell(method, env, arm, seed, scale, overrides, cfg["out_dir"], cfg["work_dir"],
                              cfg["trainer"]["steps"]))
    return cells


def cell_config(cell: Cell) -> RunConfig:
    return compose(cell.method, cell.overrides)


def validate_cells(cells: list[Cell]) -> list[RunConfig]:
    """Compose and check every cell (environment and method settings included); raise on the first error."""
    from common.fit import resolve
    from replications import METHODS

    cfgs = []
    for cell in cells:
        cfg = cell_config(cell)
        try:
            resolve(cfg, METHODS)
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"cell {cell.name}: {e}") from e
        if (cfg.scale == "paper" and cfg.model.kind == "pretrained"
                and not Path(cfg.model.path or "").exists()):
            raise ValueError(f"cell {cell.name}: scale=paper needs the model locally; "
                             f"model.path={cfg.model.path!r} does not exist "
                             f"(download {cfg.model.hf_id} to a local folder and pass model.path=...)")
        cfgs.append(cfg)
    return cfgs


def run_cell(cell: Cell) -> dict[str, Any]:
    """Run one cell in this process: resume if unfinished, skip if done; a finished run of other
    settings is refused with the difference (unless force=true), by `fit`."""
    from common.fit import fit
    from replications import METHODS

    if cell.done and "force=true" not in cell.overrides:
        return {"status": "skipped", "run_dir": str(cell.run_dir)}
    run_dir = fit(cell_config(cell), METHODS)
    return {"status": "done", "run_dir": str(run_dir.path)}


# ---- local launch ------------------------------------------------------------------------------
def failure_text(error: Exception) -> str:
    """How a cell's job failed, after '<cell> failed:'. A refused or stopped run (`RunRefused`,
    `RunStopped`: lock contention, other settings, a full disk, a read-only folder) is its one line;
    anything else the end of its traceback. submitit hands back the job's traceback as text, whose
    last line of a one-line kind is '<module>.<class>: <message>'."""
    from common.fit import RunStopped
    from common.records import RunRefused

    lines = str(error).strip().splitlines()
    for kind in (RunRefused, RunStopped):
        prefix = f"{kind.__module__}.{kind.__qualname__}: "
        said = [line[len(prefix):] for line in lines if line.startswith(prefix)]
        if said:
            return f" {said[-1]}"
    return "\n" + "\n".join(lines[-15:])


def launch_local(cells: list[Cell], parallel: int, work_dir: str) -> list[str]:
    """Run cells through submitit's local executor, `parallel` at a time; returns failure messages."""
    import submitit

    todo = [c for c in cells if not c.done or "force=true" in c.overrides]
    if not todo:
        return []
    parallel = max(1, min(parallel, len(todo)))
    cores = os.cpu_count() or 1

    def threads(cell: Cell) -> int:  # each cell's share of the cores, split again among its ranks
        ranks = _plain_config(cell.method, cell.overrides)["trainer"]["devices"]
        return max(1, cores // (parallel * max(1, ranks)))

    executor = submitit.AutoExecutor(folder=Path(work_dir) / "submitit" / "%j", cluster="local")
    executor.update_parameters(timeout_min=24 * 60)
    # the share of the cores first: a cell naming its own threads wins (make verify: the committed run's)
    pending = [Cell(**{**c.__dict__,
                       "overrides": (f"trainer.threads={threads(c)}", *c.overrides, "progress=false")})
               for c in todo]
    running: list[tuple[Cell, Any]] = []
    failures: list[str] = []
    last = 0.0
    while pending or running:
        while pending and len(running) < parallel:
            cell = pending.pop(0)
            running.append((cell, executor.submit(run_cell, cell)))
        for cell, job in list(running):
            if job.done():
                running.remove((cell, job))
                try:
                    job.result()
                except Exception as e:  # report, keep going with the other cells
                    failures.append(f"{cell.name} failed:{failure_text(e)}")
        if time.monotonic() - last > 15:
            line = plans.progress_line(cells, {c.name for c in pending}, {c.name for c, _ in running})
            print(f"[replicate] {line}", flush=True)
            last = time.monotonic()
        time.sleep(0.5)
    return failures


# ---- tables -------------------------------------------------------------------------------
def collect_tables(method: str, scale: str, cells: list[Cell]) -> str:
    """What a replication prints at the end (here and in `python -m slurm collect`): the cells that
    are not done, then the method's section of the report as `make paper` builds it, from the runs
    at `scale` under the cells' out_dir."""
    from paper.build import method_tables

    missing = [c.name for c in cells if not c.done]
    head = (f"{len(missing)} of {len(cells)} cells not done (not counted; no claim is verified on them): "
            + ", ".join(missing) + "\n\n") if missing else ""
    results = Path(cells[0].out_dir) if cells else Path("results")
    where = (f"[replicate] {method} at {scale} scale: its section of the report, as `make paper` builds it "
             f"from {results}/\n\n")
    # the runs record the scale their config names (CCPO's `--scale dyad` composes `scale: cpu`)
    recorded = {_plain_config(c.method, c.overrides).get("scale", scale) for c in cells} or {scale}
    return where + head + method_tables(method, results, recorded.pop() if len(recorded) == 1 else None)


# ---- command line -----------------------------------------------------------------------------
class UsageError(Exception):
    """A command-line argument that cannot be used; main prints it as one line."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # argparse would print the usage block and exit
        raise UsageError(f"{message} (see python -m experiments.replicate --help)")


def seed_list(text: str) -> list[int]:
    """'0,1,2' -> [0, 1, 2]."""
    try:
        seeds = [int(s) for s in text.split(",")]
    except ValueError:
        seeds = []
    if not seeds or any(not 0 <= s < SEED_LIMIT for s in seeds):
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of seeds >= 0 "
                                         "(and < 2^63), e.g. SEEDS=0,1,2")
    return seeds


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = _Parser(prog="python -m experiments.replicate", description=__doc__,
                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", required=True)
    p.add_argument("--scale", default="cpu",
                   help="smoke | cpu | small | paper, or another paper setup of the method "
                        "(conf/scale/paper_*.yaml)")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"])
    p.add_argument("--seeds", type=seed_list, default=None,
                   help="comma-separated seeds (default: the replication's seeds for the scale)")
    p.add_argument("--arms", default=None, help="comma-separated arms (default: all)")
    p.add_argument("--force", action="store_true", help="rerun finished cells (overwrites their results)")
    p.add_argument("--force-design", action="store_true",
                   help="run the cells the design check blocks (their arm's claims all void or design nulls)")
    p.add_argument("--no-wait", action="store_true", help="SLURM: submit and return the job ids")
    p.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    p.add_argument("--verbose", action="store_true",
                   help="SLURM dry run: also the whole sbatch script and every cell's config")
    p.add_argument("--out-dir", default=None,
                   help="write the records under this folder instead of the scale's (results/ at cpu scale)")
    p.add_argument("--profile", default=None, help="cluster profile (slurm/profiles/<name>.yaml)")
    p.add_argument("--parallel", type=int, default=None,
                   help="local: cells at once (default: replication.yaml)")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every cell")
    return p.parse_args(argv)


def one_line(error: BaseException, method: str = "<name>") -> str:
    """A Hydra, OmegaConf or argument error as one line: what was wrong and, where known, the choices."""
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import OmegaConfBaseException

    def first(e: BaseException) -> str:
        return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)

    if not isinstance(error, HydraException | OmegaConfBaseException):  # our own messages: every line counts
        return (" ".join(line.strip() for line in str(error).splitlines() if line.strip())
                or type(error).__name__)
    if isinstance(error, MissingConfigException) and error.missing_cfg_file:
        choices = f"; choose one of {', '.join(error.options)}" if error.options else ""
        return f"no config {error.missing_cfg_file!r}{choices}"
    if isinstance(error, OverrideParseException):
        lines = [line.strip() for line in str(error).splitlines()
                 if line.strip() and not line.startswith("See http")]
        return ": ".join(lines) + " (an override is key=value, e.g. trainer.lr=1e-3)"
    cause = error.__cause__
    text = first(error).rstrip(".")
    if isinstance(cause, OmegaConfBaseException):
        text += f": {first(cause)}"
    elif isinstance(error, OmegaConfBaseException) and error.full_key:
        text += f" (in {error.full_key})"
    if isinstance(error, OmegaConfBaseException) or isinstance(cause, OmegaConfBaseException):
        text += f"; python -m experiments.run method={method} --cfg job prints every setting"
    return text


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    method = "<name>"
    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv))
        method = args.method
        arms = args.arms.split(",") if args.arms else None
        extra = (*args.overrides, *(("force=true",) if args.force else ()),
                 *((f"out_dir={args.out_dir}",) if args.out_dir else ()))
        cells = plan(args.method, args.scale, args.seeds, extra, arms)
        memory = check_cells(cells)  # paper scales: each arm's memory plan, printed; its refusal (or None)
        validate_cells(cells)
        if memory:
            raise ValueError(memory)
    except (UsageError, ValueError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {one_line(e, method)}", file=sys.stderr)
        return 2
    parallel = args.parallel or load_replication(args.method).parallel.get(args.scale, 1)
    blocks = plans.design_blocks(cells)
    if args.dry_run and args.cluster == "local":
        print(plan_text(cells, parallel, blocked=None if args.force_design else blocks))
        if args.force_design:
            print(plans.design_text(blocks, True))
        return 0
    refused = refusal(cells)
    if refused and not args.dry_run:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    if blocks:
        print(plans.design_text(blocks, args.force_design))
        cells = ([replace(c, overrides=(*c.overrides, "force_design=true")) if c.name in blocks else c
                  for c in cells] if args.force_design else [c for c in cells if c.name not in blocks])
    if args.cluster == "slurm":
        from slurm.launch import launch

        return launch(cells, args.profile or "slurm", wait=not args.no_wait, dry_run=args.dry_run,
                      run=run_cell, validate=validate_cells, aggregate=collect_tables, verbose=args.verbose)
    t0 = time.time()
    failures: list[str] = []
    try:
        failures = launch_local(cells, parallel, cells[0].work_dir if cells else ".cache")
        print(collect_tables(args.method, args.scale, cells))
    except Exception as e:  # noqa: BLE001 - whatever broke, the cells that failed are still listed below
        failures.append(f"the replication stopped: {type(e).__name__}: {e}")
    finally:
        print(f"\n[replicate] {len(cells)} cells, {time.time() - t0:.0f} s")
        for f in failures:
            print(f"\n[replicate] FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    # Run the importable module's main: the run_cell that jobs unpickle then lives in
    # `experiments.replicate` (the cells in `experiments.plan`), which a job can import, not in this
    # script's `__main__`.
    from experiments.replicate import main as replicate_main

    sys.exit(replicate_main())
