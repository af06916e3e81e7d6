"""A whole replication: arms x seeds of one method at one scale, launched, then aggregated.

    python -m replications.replicate --method grpo                     # cpu scale, local
    python -m replications.replicate --method grpo --scale smoke
    python -m replications.replicate --method grpo --cluster slurm --no-wait
    python -m replications.replicate --method grpo trainer.lr=1e-3     # extra Hydra overrides

The arms and seeds are data: `replications/<method>/conf/replication.yaml`. Every cell's config is
composed and checked before anything starts (a bad config fails here, not in a job). Cells whose
run directory is `done` are skipped, unfinished ones resume, finished ones are never overwritten
without --force. Local cells run through submitit's local executor, a few at a time, each with
its share of the cores.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from common.config import RunConfig
from common.records import finished_with
from replications.run import compose, conf_dir


@dataclass(frozen=True)
class Cell:
    """One (arm, seed) training run of a replication."""

    method: str
    env: str
    arm: str
    seed: int
    scale: str
    overrides: tuple[str, ...]
    out_dir: str
    work_dir: str
    steps: int = 0

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.method / self.env / self.arm / f"seed-{self.seed}"

    @property
    def done(self) -> bool:
        """Finished with this cell's own config: a finished run of other settings (another
        trainer.lr, say) is not this cell's result, and `run_cell` refuses it with the difference."""
        return (self.run_dir / "done").exists() and finished_with(self.run_dir, _plain_config(self.method, self.overrides))

    @property
    def name(self) -> str:
        return f"{self.method}/{self.env}/{self.arm}/seed-{self.seed}"


@dataclass
class Replication:
    arms: dict[str, list[str]]
    seeds: dict[str, list[int]]
    parallel: dict[str, int] = field(default_factory=dict)


def load_replication(method: str) -> Replication:
    path = conf_dir(method) / "replication.yaml"
    data = yaml.safe_load(path.read_text())
    unknown = set(data) - {"arms", "seeds", "parallel"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    return Replication({k: list(v or []) for k, v in data["arms"].items()}, data["seeds"], data.get("parallel", {}))


def plan(method: str, scale: str, seeds: list[int] | None = None, extra_overrides: tuple[str, ...] = (),
         arms: list[str] | None = None) -> list[Cell]:
    """Every (arm, seed) cell, with its config composed and checked."""
    rep = load_replication(method)
    if scale not in rep.seeds:
        raise ValueError(f"{method} has no scale {scale!r}; choose one of {sorted(rep.seeds)}")
    chosen = arms or list(rep.arms)
    missing = sorted(set(chosen) - set(rep.arms))
    if missing:
        raise ValueError(f"{method} has no arm(s) {missing}; its arms are {list(rep.arms)}")
    cells = []
    for arm in chosen:
        for seed in seeds if seeds is not None else rep.seeds[scale]:
            overrides = (f"scale={scale}", f"seed={seed}", f"arm={arm}", *rep.arms[arm], *extra_overrides)
            cfg = compose(method, overrides)
            env = cfg.env.get("tag") or cfg.env["name"]
            cells.append(Cell(method, env, arm, seed, scale, overrides, cfg.out_dir, cfg.work_dir, cfg.trainer.steps))
    return cells


def cell_config(cell: Cell) -> RunConfig:
    return compose(cell.method, cell.overrides)


@functools.lru_cache(maxsize=256)
def _plain_config(method: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    """A cell's resolved config as plain data, composed once (`Cell.done` is asked often)."""
    return asdict(compose(method, overrides))


def validate_cells(cells: list[Cell]) -> list[RunConfig]:
    """Compose and check every cell (environment and method settings included); raise on the first error."""
    from common.run import resolve
    from replications import METHODS

    cfgs = []
    for cell in cells:
        cfg = cell_config(cell)
        try:
            resolve(cfg, METHODS)
        except (ValueError, FileNotFoundError) as e:
            raise ValueError(f"cell {cell.name}: {e}") from e
        if cfg.scale == "paper" and cfg.model.kind == "pretrained" and not Path(cfg.model.path or "").exists():
            raise ValueError(f"cell {cell.name}: scale=paper needs the model locally; model.path={cfg.model.path!r} does not exist "
                             f"(download {cfg.model.hf_id} to a local folder and pass model.path=...)")
        cfgs.append(cfg)
    return cfgs


def run_cell(cell: Cell) -> dict[str, Any]:
    """Run one cell in this process: resume if unfinished, skip if done; a finished run of other
    settings is refused with the difference (unless force=true), by `fit`."""
    from common.run import fit
    from replications import METHODS

    if cell.done and "force=true" not in cell.overrides:
        return {"status": "skipped", "run_dir": str(cell.run_dir)}
    run_dir = fit(cell_config(cell), METHODS)
    return {"status": "done", "run_dir": str(run_dir.path)}


# ---- local launch ------------------------------------------------------------------------------
def progress_line(cells: list[Cell], queued: Collection[str] = (), running: Collection[str] = ()) -> str:
    """One status per cell: queued (waiting in this launch), steps (running: a forced rerun's old
    `done` does not count), or done."""
    parts = []
    for c in cells:
        p = c.run_dir / "metrics.jsonl"
        steps = len(p.read_text().splitlines()) if p.exists() else 0
        parts.append("queued" if c.name in queued else "done" if c.done and c.name not in running else f"{steps}/{c.steps}")
    return " | ".join(f"{c.arm}/s{c.seed}: {s}" for c, s in zip(cells, parts, strict=True))


def launch_local(cells: list[Cell], parallel: int, work_dir: str) -> list[str]:
    """Run cells through submitit's local executor, `parallel` at a time; returns failure messages."""
    import submitit

    todo = [c for c in cells if not c.done or "force=true" in c.overrides]
    if not todo:
        return []
    parallel = max(1, min(parallel, len(todo)))
    threads = max(1, (os.cpu_count() or 1) // parallel)
    executor = submitit.AutoExecutor(folder=Path(work_dir) / "submitit" / "%j", cluster="local")
    executor.update_parameters(timeout_min=24 * 60)
    pending = [Cell(**{**c.__dict__, "overrides": (*c.overrides, f"trainer.threads={threads}", "progress=false")})
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
                    tail = "\n".join(str(e).strip().splitlines()[-15:])
                    failures.append(f"{cell.name} failed:\n{tail}")
        if time.monotonic() - last > 15:
            line = progress_line(cells, {c.name for c in pending}, {c.name for c, _ in running})
            print(f"[replicate] {line}", flush=True)
            last = time.monotonic()
        time.sleep(0.5)
    return failures


# ---- aggregate -----------------------------------------------------------------------------
def aggregate(method: str, scale: str, cells: list[Cell]) -> str:
    """A table of held-out mean@k before (warm start) and after RL, per arm, over finished seeds."""
    from common.stats import mean_ci

    rows, missing = [], [c.name for c in cells if not c.done]
    by_arm: dict[tuple[str, str], list[Cell]] = {}
    for c in cells:
        by_arm.setdefault((c.env, c.arm), []).append(c)
    summary: dict[str, Any] = {"method": method, "scale": scale, "missing": missing, "arms": {}}
    for (env, arm), arm_cells in by_arm.items():
        evals = [json.loads((c.run_dir / "eval.json").read_text()) for c in arm_cells if c.done]
        if not evals:
            rows.append(f"| {env} | {arm} | 0/{len(arm_cells)} | - | - | - | - |")
            continue
        init = [e["initial"]["mean@k"] for e in evals if "initial" in e]
        final = [e["final"]["mean@k"] for e in evals]
        passk = [e["final"]["pass@k"] for e in evals]
        delta = [e["final"]["mean@k"] - e["initial"]["mean@k"] for e in evals if "initial" in e]
        cell = {name: mean_ci(v) for name, v in (("initial", init), ("final", final), ("pass@k", passk), ("delta", delta)) if v}
        summary["arms"][f"{env}/{arm}"] = {"n": len(evals), **{k: list(v) for k, v in cell.items()}}

        def fmt(key: str, cell: dict[str, tuple[float, float, float]] = cell) -> str:
            if key not in cell:
                return "-"
            m, lo, hi = cell[key]
            return f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if lo == lo else f"{m:.3f}"

        rows.append(f"| {env} | {arm} | {len(evals)}/{len(arm_cells)} | {fmt('initial')} | {fmt('final')} | {fmt('delta')} | {fmt('pass@k')} |")
    k = "k"
    header = (f"## {method} ({scale} scale): held-out mean@{k}, mean [95% bootstrap CI] over seeds\n\n"
              f"| env | arm | seeds done | warm start (SFT) | after RL | change | pass@{k} after RL |\n|---|---|---|---|---|---|---|")
    table = "\n".join([header, *rows])
    if missing:
        table += f"\n\n{len(missing)} of {len(cells)} cells missing (not aggregated; no claim is verified on them): " + ", ".join(missing)
    if cells:
        out = Path(cells[0].out_dir) / method
        out.mkdir(parents=True, exist_ok=True)
        (out / f"summary-{scale}.md").write_text(table + "\n")
        (out / f"summary-{scale}.json").write_text(json.dumps(summary, indent=2) + "\n")
    return table


def method_report(method: str, scale: str, cells: list[Cell]) -> None:
    """A method's own report, when it has one: `replications/<method>/report.py` (or `claims.py`) with
    `main(["--results", out_dir, "--scale", scale])`, which prints it and writes it next to the summary."""
    import importlib
    import importlib.util

    for name in ("report", "claims"):
        if cells and importlib.util.find_spec(f"replications.{method}.{name}") is not None:
            importlib.import_module(f"replications.{method}.{name}").main(["--results", cells[0].out_dir, "--scale", scale])


# ---- command line -----------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m replications.replicate", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", required=True)
    p.add_argument("--scale", default="cpu", choices=["smoke", "cpu", "paper"])
    p.add_argument("--cluster", default="local", choices=["local", "slurm"])
    p.add_argument("--seeds", default=None, help="comma-separated seeds (default: the replication's seeds for the scale)")
    p.add_argument("--arms", default=None, help="comma-separated arms (default: all)")
    p.add_argument("--force", action="store_true", help="rerun finished cells (overwrites their results)")
    p.add_argument("--no-wait", action="store_true", help="SLURM: submit and return the job ids")
    p.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    p.add_argument("--profile", default=None, help="cluster profile (slurm/profiles/<name>.yaml)")
    p.add_argument("--parallel", type=int, default=None, help="local: cells at once (default: replication.yaml)")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every cell")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    arms = args.arms.split(",") if args.arms else None
    extra = tuple(args.overrides) + (("force=true",) if args.force else ())
    try:
        cells = plan(args.method, args.scale, seeds, extra, arms)
        validate_cells(cells)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.cluster == "slurm":
        from slurm.launch import launch_slurm

        return launch_slurm(cells, args.profile or "slurm", wait=not args.no_wait, dry_run=args.dry_run)
    if args.dry_run:
        for c in cells:
            print(f"{c.name}: {' '.join(c.overrides)}{'  (done: skipped)' if c.done and not args.force else ''}")
        return 0
    parallel = args.parallel or load_replication(args.method).parallel.get(args.scale, 1)
    t0 = time.time()
    failures = launch_local(cells, parallel, cells[0].work_dir if cells else ".cache")
    print(aggregate(args.method, args.scale, cells))
    method_report(args.method, args.scale, cells)
    print(f"\n[replicate] {len(cells)} cells, {time.time() - t0:.0f} s")
    for f in failures:
        print(f"\n[replicate] FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
