"""Head to head (#23): every method on every environment where it applies, GRPO beside it, one command.

    python -m experiments.compare --scale smoke --envs arith,toolplan-k4
        # = make compare SCALE=smoke ENVS=...
    python -m experiments.compare --methods canopy --seeds 0,1,2 --dry-run
    python -m experiments.compare --cluster slurm --no-wait

**Where a method runs.** The environments are `experiments/compare.yaml` (env tag -> environment and
the *home* replication arm whose scale sets the budget there; a column may add Hydra `overrides`, composed
after the home's `scale=`, `arm=`, to be another setting of the environment, and `scales`, the home's scale
whose budget it takes at each compare scale, existing at those only). A method runs on an environment when
everything it `needs` (a class attribute of its Method) is in what the environment class `offers`
(envs/api/features.py): `applicable`. GRPO and CANOPY need nothing, so they run everywhere; with
`--methods` naming others, GRPO runs only beside them, and the matrix shows only the environments where
one of them applies (or that `--envs` named).

**One cell** is (environment, method, seed). Its config is the home arm's config at the scale (model,
warm start, environment settings, steps, tasks, group size, lr, tokens per turn, evaluation: the
*budget*, equal for every method on that environment) with the method's *recipe* in place of the
home's (`RECIPE`: its `method.*` settings from its compare arm, `Method.compare_arm`, and the trainer
and model settings that define the method rather than the budget). The config is written as Hydra
overrides of the method's own tree and checked to compose back to exactly that config
(`experiments.compare_config`). The method runs its compare arm; GRPO runs its `grpo` arm, on the
same seeds (the home replication's seeds at the home's scale, or `--seeds`), paired by seed.

**Equal steps** cells go to `<out_dir>/compare/steps/<method>/<env>/<arm>/seed-<k>/` (out_dir: the
scale's, `results/` at cpu, `runs/smoke/` at smoke). A cell whose config equals a finished run of the
method's own replication (`<out_dir>/<method>/<env>/<any arm>/seed-<k>`, equal in every setting but
the arm's name and out_dir) is not run again: its folder is a relative symlink to that run.

**Equal generated tokens.** When the equal-steps cells of a method and GRPO are finished on an
environment and the method generated more than `TOKEN_TOLERANCE` more or fewer training tokens than
GRPO (mean over the seeds), GRPO runs again with its steps scaled by that ratio, as CCPO's
`grpo-center-tokens` arm did (#18), into
`<out_dir>/compare/tokens/<method>/grpo/<env>/grpo/seed-<k>/`; within the tolerance the equal-steps
GRPO run is the equal-tokens one too. Locally the token cells run after the step cells in the same
command; on SLURM, the next `make compare` submits them.

**The plan as data.** Every run but a dry run writes `<out_dir>/compare/plan-<scale>.json`
(`write_plan`): the methods, env tags, where each method applies and each env's seeds, for the whole
comparison (not only the --envs/--methods run), so that paper/head_to_head.py draws the matrix without
importing the runner or the methods. The cpu scale's is committed with `results/`.

Before the cells start, a launch prints how many will run and how long they will take, from the recorded
runs' own timings at the scale (`estimate_line`; a dry run prints every cell's). At the end it prints the
comparison (`paper/head_to_head.py`, as `make paper` builds it). A bad setting is one line `error: ...`
and exit status 2 before anything runs. Cells that `make compare-design` found cannot tell (void or design
null, experiments/compare_design.py) do not run unless --force-design (FORCE_DESIGN=1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common.records import config_changes
from common.util import atomic_write_json
from experiments.compare_config import (
    COMPARE_FILE,
    RECIPE,
    Setting,
    applicable,
    compare_arm,
    home_env,
    home_seeds,
    hydra_value,
    load_settings,
    matrix,
    overrides_for,
    target_config,
)
from experiments.replicate import (
    Cell,
    _plain_config,
    launch_local,
    load_replication,
    one_line,
    plan_text,
    refusal,
    seed_list,
)

BASELINE = "grpo"
STEPS_DIR, TOKENS_DIR = "compare/steps", "compare/tokens"  # under a scale's out_dir
TOKEN_TOLERANCE = 0.10  # as paper/claims.py: generated tokens differing by more are a budget difference

# the declarations and one cell's config are experiments.compare_config's; importable from here too
__all__ = [
    "BASELINE", "COMPARE_FILE", "RECIPE", "STEPS_DIR", "TOKENS_DIR", "TOKEN_TOLERANCE", "CompareCell", "Plan",
    "Setting", "applicable", "cells_for", "compare_arm", "compare_tables", "generated_tokens", "hydra_value",
    "home_env", "home_seeds", "link_reused", "load_settings", "main", "matrix", "matrix_text",
    "overrides_for", "parse_args", "plan", "reusable", "target_config", "token_cells", "estimate_line",
]


# ---- the comparison as data, for the paper -------------------------------------------------------
def plan_data(scale: str) -> dict[str, Any]:
    """The whole comparison at `scale` as declared, whatever --envs and --methods chose to run: every
    method of the registry, every env tag of compare.yaml (in its order), where each method applies
    and each env's seeds (the home's at its scale for `scale`): the paper's matrix and its missing cells."""
    from replications import METHODS

    settings = {t: s for t, s in load_settings().items() if home_seeds(s, scale) is not None}  # a budget
    applies = matrix(list(METHODS), settings, scale)
    return {"scale": scale, "baseline": BASELINE, "methods": list(METHODS), "envs": list(settings),
            "applies": {m: {t: applies[m, t] for t in settings} for m in METHODS},
            "seeds": {t: home_seeds(s, scale) or [] for t, s in settings.items()}}


def write_plan(out_root: str | Path, scale: str) -> Path:
    """Write `plan_data(scale)` where the records go (every run of `make compare` but a dry run)."""
    from paper.head_to_head import plan_path  # where the paper reads it

    path = plan_path(Path(out_root), scale)
    atomic_write_json(path, plan_data(scale))
    return path


# ---- cells ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CompareCell(Cell):
    """A cell of the comparison: done when its folder holds a finished run of its settings, the arm's
    name aside (a reused run of the method's own replication may carry another arm name)."""

    def recorded_changes(self) -> list[str] | None:
        changes = super().recorded_changes()
        return None if changes is None else [c for c in changes if c.split(":", 1)[0] != "arm"]


def cells_for(method: str, setting: Setting, scale: str, seeds: list[int], arm: str, out_sub: str,
              extra: tuple[str, ...] = (), steps: int | None = None,
              out_root: str | None = None) -> list[CompareCell]:
    target = target_config(method, setting, scale, arm, out_sub, out_root)
    if steps is not None:
        target["trainer"]["steps"] = steps
    overrides = overrides_for(method, target, scale)
    return [CompareCell(method, setting.tag, arm, seed, scale, (*overrides, f"seed={seed}", *extra),
                        target["out_dir"], target["work_dir"], target["trainer"]["steps"])
            for seed in seeds]


@dataclass
class Plan:
    cells: list[CompareCell]
    skipped: list[str]  # (method, env) pairs left out at this scale, with the reason
    settings: dict[str, Setting]
    methods: list[str]
    out_root: str | None = None  # where the records go (None: each scale's out_dir)
    scale: str = "cpu"


def plan(scale: str, envs: list[str] | None = None, methods: list[str] | None = None,
         seeds: list[int] | None = None, extra: tuple[str, ...] = (), out_root: str | None = None) -> Plan:
    """Every equal-steps cell: each applicable (method, env) pair and GRPO, on the same seeds. With `methods`
    naming others than GRPO, GRPO runs only beside them: an environment none of them applies to is left out
    (said in `skipped` when `envs` named it, else not shown at all)."""
    from replications import METHODS

    settings = load_settings()
    named = set(envs or [])
    if envs:
        unknown = [e for e in envs if e not in settings and e not in {s.env for s in settings.values()}]
        if unknown:
            raise ValueError(f"ENVS: {unknown} not in experiments/compare.yaml; "
                             f"choose from {', '.join(settings)}")
        settings = {t: s for t, s in settings.items() if t in envs or s.env in envs and s.env not in settings}
    chosen = methods or list(METHODS)
    unknown = [m for m in chosen if m not in METHODS]
    if unknown:
        raise ValueError(f"METHODS: unknown {unknown}; choose from {', '.join(METHODS)}")
    chosen = [BASELINE, *[m for m in chosen if m != BASELINE]]
    cells: list[CompareCell] = []
    skipped: list[str] = []
    others = [m for m in chosen if m != BASELINE] if methods else []
    for tag, s in list(settings.items()):
        env_settings = home_env(s, scale)  # what the column's environment offers as its home arm sets it
        if others and not any(applicable(m, s.env, env_settings) for m in others):
            if tag in named or s.env in named:
                skipped.append(f"{tag}: {', '.join(others)} does not apply (GRPO runs only beside it)")
            else:
                del settings[tag]
            continue
        column_seeds = home_seeds(s, scale)  # the home replication's at the scale of the column's budget
        if column_seeds is None:
            skipped.append(f"{tag}: {s.absent(scale)}")
            continue
        for m in chosen:
            if not applicable(m, s.env, env_settings):
                continue
            if scale not in load_replication(m).seeds:
                skipped.append(f"{m} on {tag}: {m} has no scale {scale}")
                continue
            cells += cells_for(m, s, scale, seeds if seeds is not None else column_seeds, compare_arm(m, s),
                               STEPS_DIR, extra, out_root=out_root)
    return Plan(cells, skipped, settings, chosen, out_root, scale)


def reusable(cell: CompareCell) -> Path | None:
    """A finished run of the method's own replication with this cell's settings (arm name aside)."""
    own = Path(cell.out_dir).parent.parent / cell.method / cell.env  # <out_dir>/compare/steps -> <out_dir>
    want = _plain_config(cell.method, cell.overrides)
    for run in sorted(own.glob(f"*/seed-{cell.seed}")):
        if (run / "done").exists() and (run / "config.yaml").exists():
            changes = config_changes(yaml.safe_load((run / "config.yaml").read_text()), want)
            if all(c.split(":", 1)[0] == "arm" for c in changes):
                return run
    return None


def link_reused(cells: list[CompareCell], dry_run: bool = False) -> dict[str, Path]:
    """Symlink every cell that a finished run of the method's own replication already holds; name -> run."""
    out = {}
    for c in cells:
        if c.run_dir.exists() or c.run_dir.is_symlink():
            continue
        run = reusable(c) if c.out_dir.endswith(STEPS_DIR) else None
        if run is None:
            continue
        out[c.name] = run
        if not dry_run:
            c.run_dir.parent.mkdir(parents=True, exist_ok=True)
            c.run_dir.symlink_to(os.path.relpath(run.resolve(), c.run_dir.parent.resolve()))
    return out


def generated_tokens(run_dir: Path) -> float | None:
    """Training tokens the run generated (the last metrics row's generated_tokens_total)."""
    path = run_dir / "metrics.jsonl"
    if not (run_dir / "done").exists() or not path.exists():
        return None
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return float(rows[-1].get("generated_tokens_total", 0.0)) if rows else 0.0


def token_cells(p: Plan, scale: str, extra: tuple[str, ...] = ()) -> tuple[list[CompareCell], list[str]]:
    """GRPO at the method's generated tokens, for every pair whose step cells are done and differ in tokens
    by more than TOKEN_TOLERANCE; and the pairs still waiting for their step cells."""
    by_pair: dict[tuple[str, str], list[CompareCell]] = {}
    for c in p.cells:
        by_pair.setdefault((c.method, c.env), []).append(c)
    cells, waiting = [], []
    for (method, tag), own in by_pair.items():
        base = by_pair.get((BASELINE, tag), [])
        if method == BASELINE or not base:
            continue
        pairs = [(m, g) for m in own for g in base if m.seed == g.seed]
        tokens = [(generated_tokens(m.run_dir), generated_tokens(g.run_dir))
                  for m, g in pairs if m.done and g.done]
        if len(tokens) < len(pairs) or not tokens:
            waiting.append(f"{method} on {tag}")
            continue
        mean_m, mean_g = (sum(t[i] or 0.0 for t in tokens) / len(tokens) for i in (0, 1))
        if mean_g <= 0 or abs(mean_m / mean_g - 1) <= TOKEN_TOLERANCE:
            continue
        steps = max(1, round(base[0].steps * mean_m / mean_g))
        cells += cells_for(BASELINE, p.settings[tag], scale, [g.seed for _, g in pairs],
                           compare_arm(BASELINE), f"{TOKENS_DIR}/{method}", extra, steps=steps,
                           out_root=p.out_root)
    return cells, waiting


# ---- the comparison as text ----------------------------------------------------------------------
def compare_tables(method: str, scale: str, cells: list[Any]) -> str:
    """What `make compare` prints at the end (also `python -m slurm collect`): the comparison at `scale`
    from the cells' out_dir, as `make paper` builds it, with only the cells' methods and env tags (what
    METHODS= and ENVS= chose: the whole plan's cells are passed, done or not); `method` is the launcher's
    label, unused."""
    from paper.head_to_head import compare_section

    if not cells:
        return "nothing planned"
    root = Path(cells[0].out_dir.split("/compare/")[0])
    return compare_section(root, scale=scale, out_dir=None, methods={c.method for c in cells},
                           envs={c.env for c in cells})


def estimate_line(cells: list[CompareCell], parallel: int) -> str:
    """What a launch prints before it starts: the cells that will run and how long they will take, from the
    recorded runs' own timings (`experiments.plan.estimate_seconds`, as a dry run's plan)."""
    if not cells:
        return "[compare] no equal-steps cell to run"
    summary = plan_text(cells, parallel, overrides=False).splitlines()[-1].removeprefix("[plan] ")
    return f"[compare] equal steps: {summary} (equal-tokens cells, if any, after them)"


# ---- command line --------------------------------------------------------------------------------
def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m experiments.compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="cpu")
    p.add_argument("--envs", default=None, help="comma-separated env tags of compare.yaml (that column) or "
                   "environment names (all their columns; a tag is its column only; default: all)")
    p.add_argument("--methods", default=None, help="comma-separated methods (default: all; GRPO always runs)")
    p.add_argument("--cluster", default="local", choices=["local", "slurm"])
    p.add_argument("--seeds", type=seed_list, default=None, help="default: the home's seeds at the scale")
    p.add_argument("--no-wait", action="store_true", help="SLURM: submit and return")
    p.add_argument("--dry-run", action="store_true", help="print the matrix and the cells; run nothing")
    p.add_argument("--out-dir", default=None,
                   help="write the records under this folder instead of the scale's (results/ at cpu scale)")
    p.add_argument("--force", action="store_true", help="rerun finished cells (records kept until rerun)")
    p.add_argument("--force-design", action="store_true", help="run the cells the design check blocks")
    p.add_argument("--profile", default=None, help="cluster profile (slurm/profiles/<name>.yaml)")
    p.add_argument("--parallel", type=int, default=None,
                   help="local: cells at once (default: the homes' parallel)")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides for every cell")
    return p.parse_args(argv)


def matrix_text(p: Plan, reused: dict[str, Path]) -> str:
    """The applicability matrix and every cell's state, as the dry run prints it."""
    m = matrix(p.methods, p.settings, p.scale)
    w = max(len(meth) for meth in p.methods)
    lines = ["[compare] methods x environments (x: applies, .: does not)",
             " " * (w + 2) + "  ".join(p.settings)]
    lines += [f"  {meth:<{w}}" + "  ".join(f"{'x' if m[meth, t] else '.':^{len(t)}}" for t in p.settings)
              for meth in p.methods]
    lines += [f"  left out: {s}" for s in p.skipped]
    lines += [f"  {c.name}: reuses {reused[c.name]}" for c in p.cells if c.name in reused]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from experiments.compare_gate import blocks_text, design_blocks
    from experiments.replicate import check_extra_overrides, run_cell, validate_cells

    try:
        args = parse_args(list(sys.argv[1:] if argv is None else argv))
        split = (lambda s: [x for x in s.split(",") if x] if s else None)  # noqa: E731
        extra = tuple(args.overrides)
        check_extra_overrides(extra)
        extra += (("force=true",) if args.force else ())
        p = plan(args.scale, split(args.envs), split(args.methods), args.seeds, extra, args.out_dir)
        validate_cells(list(p.cells))
    except (ValueError, HydraException, OmegaConfBaseException) as e:
        print(f"error: {one_line(e, 'compare')}", file=sys.stderr)
        return 2
    blocks = design_blocks(p.cells, args.scale)
    p.cells = [c for c in p.cells if args.force_design or c.name not in blocks]
    reused = link_reused(p.cells, dry_run=args.dry_run)
    print(matrix_text(p, reused) + blocks_text(blocks, args.force_design), flush=True)
    parallel = args.parallel or max(load_replication(s.home).parallel.get(args.scale, 1)
                                    for s in p.settings.values())
    todo = [c for c in p.cells if c.name not in reused]
    if args.dry_run:
        tokens, waiting = token_cells(p, args.scale, extra)
        print(plan_text([*todo, *tokens], parallel, overrides=False))
        if waiting:
            print(f"[compare] equal-tokens cells are planned once the equal-steps cells of "
                  f"{', '.join(waiting)} finish")
        return 0
    refused = refusal(todo)
    if refused:
        print(f"error: {refused}", file=sys.stderr)
        return 2
    print(estimate_line(todo, parallel), flush=True)
    if p.cells:
        write_plan(p.cells[0].out_dir.split("/compare/")[0], args.scale)
    if args.cluster == "slurm":
        from slurm.launch import launch

        tokens, _ = token_cells(p, args.scale, extra)
        if not args.force and all(c.done for c in [*p.cells, *tokens]):
            print(compare_tables("compare", args.scale, p.cells))
            return 0
        # every cell, done ones too: the launcher submits those not done (all with FORCE=1, as locally);
        # the tables it prints at the end (compare_tables) keep every chosen method and env
        return launch([*p.cells, *tokens], args.profile or "slurm", wait=not args.no_wait, dry_run=False,
                      run=run_cell, validate=validate_cells, aggregate=compare_tables)
    t0, work = time.time(), p.cells[0].work_dir if p.cells else ".cache"
    failures = launch_local(list(p.cells), parallel, work)
    tokens, waiting = token_cells(p, args.scale, extra)
    if waiting:
        print(f"[compare] equal tokens not planned (equal-steps cells unfinished): {', '.join(waiting)}",
              flush=True)
    if tokens:
        validate_cells(list(tokens))
        print(f"[compare] equal generated tokens: {len(tokens)} GRPO cells", flush=True)
        failures += launch_local(list(tokens), parallel, work)
    print(compare_tables("compare", args.scale, p.cells))
    print(f"\n[compare] {len(p.cells) + len(tokens)} cells, {time.time() - t0:.0f} s")
    for f in failures:
        print(f"\n[compare] FAILED {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    from experiments.compare import main as compare_main

    sys.exit(compare_main())
