"""Equal tuning (`make tune-<method>`): every arm gets the same small sweep on the dev split, and the
replication then runs each arm at the setting it selected, automatically.

    python -m experiments.tune --method iapo                          # cpu scale, the default grid
    python -m experiments.tune --method iapo --grid trainer.lr=5e-4,1e-3,2e-3 --arms grpo,iapo
    make tune-iapo SCALE=cpu

The sweep is data: `tune:` in `replications/<method>/conf/replication.yaml` (all keys optional):

    tune:
      arms: [grpo, iapo]                     # default: every arm
      grid: {trainer.lr: [5e-4, 1e-3, 2e-3]} # one setting; default: the scale's lr x 0.5, 1, 2
      seeds: {cpu: [0]}                      # default: [0]
      metric: mean@k                         # the final dev evaluation's metric to maximize

Every (arm, value, seed) is one run with `eval.split=dev` (never the held-out split) under
`<work_dir>/tune/<method>/<scale>/<setting>-<value>/` (e.g. `lr-0.001`), with the same steps, seeds
and warm start as the replication. Per arm the value with the highest mean dev metric over the seeds
wins (ties: the first in grid order). The selection and every score go to
`<out_dir>/<method>/tuning-<scale>.json` (commit it beside the results); `make replicate-<method>` at
that scale then appends each arm's selected setting to its overrides and says so. Every arm had the
same grid, seeds and steps: the baseline is tuned exactly as much as the method.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from common.provenance import cpu_info
from common.util import atomic_write_json
from experiments.replicate import (
    Cell,
    launch_local,
    load_replication,
    one_line,
    plan,
    seed_list,
    tuning_path,
    validate_cells,
)
from experiments.run import compose, conf_dir

DEFAULT_FACTORS = (0.5, 1.0, 2.0)  # the scale's learning rate times these, when the replication names no grid


@dataclass
class Sweep:
    arms: list[str]
    setting: str  # one dotted config key, e.g. trainer.lr
    values: list[Any]
    seeds: list[int]
    metric: str = "mean@k"
    # (arm, value index) -> its seeds' cells
    cells: dict[tuple[str, int], list[Cell]] = field(default_factory=dict)


def _parse(text: str) -> Any:
    """A grid value from the command line: a number where it reads as one (YAML reads 1e-3 as text)."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return yaml.safe_load(text)


def _value_label(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_of(method: str, scale: str, grid: str | None = None, arms: list[str] | None = None,
             seeds: list[int] | None = None, extra: tuple[str, ...] = ()) -> Sweep:
    """The sweep to run: command line first, then the replication's `tune:`, then the defaults."""
    rep = load_replication(method)
    spec = yaml.safe_load((conf_dir(method) / "replication.yaml").read_text()).get("tune") or {}
    unknown = set(spec) - {"arms", "grid", "seeds", "metric"}
    if unknown:
        raise ValueError(f"{method}'s replication.yaml tune: unknown keys {sorted(unknown)}; "
                         "it takes arms, grid, seeds, metric")
    if grid:
        key, _, text = grid.partition("=")
        if not key or not text:
            raise ValueError(f"--grid {grid!r}: write one setting and its values, "
                             "e.g. trainer.lr=5e-4,1e-3,2e-3")
        values = [_parse(v) for v in text.split(",")]
        setting = key
    elif spec.get("grid"):
        if len(spec["grid"]) != 1:
            raise ValueError(f"{method}'s tune.grid sweeps one setting; got {sorted(spec['grid'])}")
        ((setting, values),) = spec["grid"].items()
    else:
        lr = compose(method, (f"scale={scale}", *extra)).trainer.lr
        setting, values = "trainer.lr", [float(f"{lr * f:.3g}") for f in DEFAULT_FACTORS]
    if len(values) < 2 or len(set(map(str, values))) != len(values):
        raise ValueError(f"a sweep needs at least two distinct values of {setting}; got {values}")
    chosen = arms or spec.get("arms") or rep.arms_at(scale)
    missing = sorted(set(chosen) - set(rep.arms))
    if missing:
        raise ValueError(f"{method} has no arm(s) {missing}; its arms are {list(rep.arms)}")
    run_seeds = seeds or (spec.get("seeds") or {}).get(scale) or [0]
    return Sweep(list(chosen), setting, list(values), list(run_seeds), spec.get("metric", "mean@k"))


def plan_sweep(method: str, scale: str, sweep: Sweep, extra: tuple[str, ...] = ()) -> list[Cell]:
    """One cell per (arm, value, seed): the replication's cell with the value set and dev evaluated."""
    work_dir = compose(method, (f"scale={scale}", *extra)).work_dir
    cells: list[Cell] = []
    for i, value in enumerate(sweep.values):
        out_dir = (Path(work_dir) / "tune" / method / scale
                   / f"{sweep.setting.rsplit('.', 1)[-1]}-{_value_label(value)}")
        overrides = (*extra, f"{sweep.setting}={value}", "eval.split=dev", f"out_dir={out_dir}")
        for arm in sweep.arms:
            arm_cells = plan(method, scale, sweep.seeds, overrides, [arm])
            sweep.cells[arm, i] = arm_cells
            cells += arm_cells
    return cells


def dev_score(cell: Cell, metric: str) -> float | None:
    """The final dev evaluation's `metric` of a finished cell (None if it did not finish)."""
    path = cell.run_dir / "eval.json"
    if not (cell.run_dir / "done").exists() or not path.exists():
        return None
    return float(json.loads(path.read_text())["final"][metric])


def select(sweep: Sweep) -> dict[str, Any]:
    """Per arm: each value's mean dev score over the seeds and the value with the highest (ties: the
    first in grid order). An arm with a value whose runs did not all finish selects nothing."""
    arms: dict[str, Any] = {}
    for arm in sweep.arms:
        scores: dict[str, float | None] = {}
        for i, value in enumerate(sweep.values):
            values = [dev_score(c, sweep.metric) for c in sweep.cells[arm, i]]
            scores[_value_label(value)] = (sum(v for v in values if v is not None) / len(values)
                                           if values and all(v is not None for v in values) else None)
        complete = all(s is not None for s in scores.values())
        best = (max(range(len(sweep.values)), key=lambda i: (scores[_value_label(sweep.values[i])], -i))
                if complete else None)
        arms[arm] = {"scores": scores, "selected": sweep.values[best] if best is not None else None,
                     "override": f"{sweep.setting}={sweep.values[best]}" if best is not None else None}
    return arms


def write_selection(method: str, scale: str, sweep: Sweep, arms: dict[str, Any], out_dir: str) -> Path:
    path = tuning_path(out_dir, method, scale)
    atomic_write_json(path, {
        "method": method, "scale": scale, "split": "dev", "metric": f"final {sweep.metric}",
        "setting": sweep.setting, "grid": sweep.values, "seeds": sweep.seeds, "arms": arms,
        "budget": "every arm: the same grid, seeds, steps and warm start", "cpu": cpu_info(),
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return path


def table(sweep: Sweep, arms: dict[str, Any]) -> str:
    labels = [_value_label(v) for v in sweep.values]
    lines = [f"| arm | {' | '.join(f'{sweep.setting}={v}' for v in labels)} | selected |",
             "|" + " --- |" * (len(labels) + 2)]
    for arm, a in arms.items():
        cells = [f"{a['scores'][v]:.3f}" if a["scores"][v] is not None else "not done" for v in labels]
        lines.append(f"| {arm} | {' | '.join(cells)} | "
                     f"{a['selected'] if a['selected'] is not None else '—'} |")
    return "\n".join(lines)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.tune", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", required=True)
    p.add_argument("--scale", default="cpu")
    p.add_argument("--grid", default=None, help="one setting and its values, e.g. trainer.lr=5e-4,1e-3,2e-3")
    p.add_argument("--arms", default=None,
                   help="comma-separated arms (default: the replication's tune.arms, or all)")
    p.add_argument("--seeds", type=seed_list, default=None,
                   help="comma-separated seeds (default: tune.seeds, or 0)")
    p.add_argument("--parallel", type=int, default=None,
                   help="cells at once (default: the replication's parallel)")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every cell")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    try:
        extra = tuple(args.overrides)
        sweep = sweep_of(args.method, args.scale, args.grid, args.arms.split(",") if args.arms else None,
                         args.seeds, extra)
        cells = plan_sweep(args.method, args.scale, sweep, extra)
        validate_cells(cells)
        out_dir = compose(args.method, (f"scale={args.scale}", *extra)).out_dir
    except (ValueError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {one_line(e, args.method)}", file=sys.stderr)
        return 2
    print(f"[tune] {args.method} at {args.scale} scale: {sweep.setting} in {sweep.values} x arms "
          f"{sweep.arms} x seeds {sweep.seeds} = {len(cells)} runs, evaluated on the dev split", flush=True)
    parallel = args.parallel or load_replication(args.method).parallel.get(args.scale, 1)
    failures = launch_local(cells, parallel, cells[0].work_dir)
    arms = select(sweep)
    path = write_selection(args.method, args.scale, sweep, arms, out_dir)
    print(table(sweep, arms))
    print(f"\n[tune] wrote {path}: make replicate-{args.method} SCALE={args.scale} runs each arm at its "
          "selected setting")
    for f in failures:
        print(f"\n[tune] FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    from experiments.tune import main as tune_main

    sys.exit(tune_main())
