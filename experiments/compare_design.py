"""Can each cell of `make compare` tell? The design check of the head to head (#46): the suite's gates
(experiments/design.py) asked of every cell (method, env tag) of the comparison instead of a card's claims,
on the **dev** split, never the held-out one:

1. *learnable*: GRPO with the column's budget (its compare cell, seed 0) gains at least `MARGIN` of mean@k on
   dev (final minus initial; one pilot a column, run like a cell). Fails: every cell of the column is
   **void** (GRPO's own included: the column cannot show a method learning faster or better).
2. *separation* of the method's compare arm from GRPO, on one shared batch of dev episodes that the warm
   start plays with the method's own config (its extra plays included), figures as experiments/design.py's:
   - credit: both methods' per-turn advantages on the same episodes; a correlation above 0.95 with a
     signal-to-noise within 10% is indistinguishable;
   - schedule (more PPO epochs or minibatches on one side): one real update with that side's schedule; later
     passes clipping under 1% of tokens are indistinguishable;
   - sampling (group size, tasks per step, a task pool or filter): the share of groups with a learning signal
     under each side's own play; a ratio within 10% is indistinguishable.
   The cell is a **design null** when every mechanism by which its method differs from GRPO is
   indistinguishable; a method that also differs in its objective (a KL term, the loss aggregation,
   entropy), which no single batch can gauge, is `partial` instead.
3. *home*: on the column the method is home to, the gate its own design check (results/<m>/design.json)
   gave the card's claim that its compare arm's credit beats the column's home arm, where there is one.
   A void or design-null home claim greys the cell the same way.

Writes `<out>/compare/design-<scale>.json` (`cells.<method>.<tag>`: gate, reason, learnable, separation,
home; `envs.<tag>.learnable`), which paper/ reads to grey the matrix's cells whose testbed cannot tell.

    python -m experiments.compare_design [--scale cpu] [--envs arith,...] [--methods iapo,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from common.util import atomic_write_json, flatten
from experiments.compare_gate import GREY  # the gates of the cells that cannot tell

MARGIN = 0.05  # the head to head's margin (paper/head_to_head.py MARGIN): what GRPO must gain on dev
DEV = ("eval.split=dev", "eval.at_start=true")


def dev_overrides(cell: Any, *extra: str) -> tuple[str, ...]:
    """A compare cell's overrides at seed 0 on dev (its seed and evaluation split replaced)."""
    keep = tuple(o for o in cell.overrides if not o.startswith("seed="))
    return (*keep, "seed=0", *DEV, *extra)


def pilots(cells: dict[str, Any], folder: Path, parallel: int) -> dict[str, dict[str, Any]]:
    """GRPO's column cells (tag -> seed-0 cell) run on dev in `folder`: tag -> initial, final, gain (mean@k).
    A finished pilot counts only when this commit made it from a clean tree (design_pilots.stale)."""
    from common.provenance import git_state
    from experiments.design_pilots import stale
    from experiments.replicate import launch_local
    from paper.claims import eval_value

    now = git_state()
    runs = {}
    for tag, c in cells.items():
        run = replace(c, overrides=dev_overrides(c, f"++out_dir={folder}"), out_dir=str(folder))
        if stale(run.run_dir, now):
            run = replace(run, overrides=(*run.overrides, "force=true"))
        runs[tag] = run
    failures = launch_local(list(runs.values()), parallel, next(iter(runs.values())).work_dir)
    out: dict[str, dict[str, Any]] = {}
    for tag, run in runs.items():
        path = run.run_dir / "eval.json"
        if not path.exists():
            out[tag] = {"arm": "grpo", "gain": None, "pass": None, "why": "the pilot failed: " +
                        (failures[0].splitlines()[-1] if failures else "no eval.json")}
            continue
        evals = json.loads(path.read_text())
        initial, final = eval_value(evals["initial"], "mean@k"), eval_value(evals["final"], "mean@k")
        out[tag] = {"arm": "grpo", "metric": "mean@k", "initial": initial, "final": final,
                    "gain": final - initial, "pass": final - initial >= MARGIN, "run": str(run.run_dir)}
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The mechanisms by which two configs' training differs: schedule, sampling, credit, objective."""
    from experiments.design import IGNORED_KEYS, SAMPLING_KEYS, SCHEDULE_KEYS

    fa, fb = flatten(a), flatten(b)
    keys = {k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k) and not k.startswith(IGNORED_KEYS)}
    # a sampling setting of one method's own (`method.pool`) changes its play only where it is set on the
    # treated side (`a`) to something: GRPO's `method.update: rl` is no sampling the others lack
    keys -= {k for k in keys if k.startswith("method.") and k in SAMPLING_KEYS
             and (k not in fa or (k not in fb and fa[k] in (None, False)))}
    kinds = []
    if any(k in SCHEDULE_KEYS for k in keys):
        kinds.append("schedule")
    if any(k in SAMPLING_KEYS for k in keys):
        kinds.append("sampling")
    if any(k.startswith("method.") and k not in SAMPLING_KEYS for k in keys):
        kinds.append("credit")
    if any(not k.startswith(("method.", "model.", "out_dir", "work_dir")) and k not in SCHEDULE_KEYS
           and k not in SAMPLING_KEYS for k in keys):
        kinds.append("objective")
    return kinds


def separation(cfg_m: Any, cfg_g: Any, work: Path) -> dict[str, Any]:
    """The separation figures of a method's dev config `cfg_m` from GRPO's `cfg_g` on the same column."""
    from common.fit import resolve
    from experiments.design import CLIP_MIN, SAMPLING_BAND, credit_separation
    from experiments.shared_batch import build_from, second_pass, shared_batch, signal_fraction
    from replications import METHODS

    kinds = differences(asdict(cfg_m), asdict(cfg_g))
    out: dict[str, Any] = {"kinds": kinds}
    pieces = build_from(cfg_m)
    batch = shared_batch(pieces)
    grpo = resolve(cfg_g, METHODS).method
    label = np.array([float(batch.episodes[i].success) for i, _ in batch.keys])
    distinct = []
    if "credit" in kinds:
        fig = credit_separation({"method": pieces.method, "grpo": grpo}, "method", "grpo", label, batch,
                                cfg_m.trainer.tasks_per_step)
        fig.pop("_vs", None)
        if fig["correlation"] != fig["correlation"]:  # no variation in the batch: nothing told either way
            fig["pass"] = None
        out["credit"] = fig
        distinct.append(fig["pass"])
    if "schedule" in kinds:
        passes = {n: c.trainer.ppo_epochs * c.trainer.minibatches
                  for n, c in (("method", cfg_m), ("grpo", cfg_g))}
        multi = max(passes, key=lambda n: passes[n])
        side = (pieces, pieces.method) if multi == "method" else (build_from(cfg_g), grpo)
        fig = {"arm": multi, **second_pass(side[0], side[1], batch, work / "update")}
        clip = fig["clip_fraction"]
        fig["pass"] = None if clip != clip else not clip < CLIP_MIN
        out["schedule"] = fig
        distinct.append(fig["pass"])
    if "sampling" in kinds:
        own = shared_batch(build_from(cfg_g)).groups
        fractions = {"method": signal_fraction(batch.groups, pieces.method),
                     "grpo": signal_fraction(own, grpo)}
        ratio = fractions["method"] / fractions["grpo"] if fractions["grpo"] else float("nan")
        out["sampling"] = {"signal_fraction": fractions, "ratio": ratio,
                           "pass": None if ratio != ratio else not abs(ratio - 1) < SAMPLING_BAND}
        distinct.append(out["sampling"]["pass"])
    if any(d is True for d in distinct):
        out["pass"] = True
    elif "objective" in kinds or any(d is None for d in distinct) or not distinct:
        out["pass"] = None  # unmeasured: the objective differs, or a figure came out undefined
    else:
        out["pass"] = False
    return out


def home_claim(method: str, setting: Any, scale: str, arm: str) -> dict[str, Any] | None:
    """The home method's own design-check gate of the claim that its compare arm beats the column's home
    arm (arms [x, home arm] where x has the compare arm's method settings), from results/<m>/design.json.
    None on a column with `overrides` (another setting than the one the home's claims are about); the arms
    are composed at the home's scale (compare.yaml `scales`)."""
    from experiments.compare_config import _config

    path = Path("results") / method / "design.json"
    if setting.home != method or setting.overrides or not path.exists():
        return None
    scale = setting.home_scale(scale) or scale
    claims = json.loads(path.read_text()).get("claims", {})
    want = _config(method, (f"scale={scale}", f"arm={arm}"))["method"]
    for cid, c in claims.items():
        arms = c.get("arms") or []
        if len(arms) == 2 and arms[1] == setting.arm and "checked_at" not in c:
            try:
                first = _config(method, (f"scale={scale}", f"arm={arms[0]}"))["method"]
            except Exception:  # an arm of another scale  # noqa: BLE001
                continue
            if first == want:
                return {"claim": cid, "gate": c["gate"]}
    return None




def cell_gate(learn: dict[str, Any], sep: dict[str, Any] | None,
              home: dict[str, Any] | None) -> tuple[str, str]:
    """A cell's gate and the reason, worst first: void (GRPO does not learn, or the home claim is void),
    design null, partial (a gate unmeasured), pass."""
    if learn.get("pass") is False:
        return "void", f"GRPO gains {learn['gain']:+.3f} mean@k on dev (margin {MARGIN})"
    if home and home["gate"] in GREY:
        return home["gate"], f"its own design check: {home['claim']} is {home['gate']}"
    if sep is not None and sep.get("pass") is False:
        parts = []
        if "credit" in sep:
            c = sep["credit"]
            parts.append(f"advantages correlate {c['correlation']:.2f} with GRPO's, signal-to-noise "
                         f"x{c['snr_ratio']:.2f}")
        if "schedule" in sep:
            parts.append(f"later passes clip {sep['schedule']['clip_fraction']:.2%} of tokens")
        if "sampling" in sep:
            parts.append(f"groups with a signal x{sep['sampling']['ratio']:.2f} of GRPO's")
        return "design null", "; ".join(parts)
    if learn.get("pass") is None or (sep is not None and sep.get("pass") is None):
        why = learn.get("why") or ("differs from GRPO in its objective, which one batch cannot gauge"
                                   if sep and "objective" in sep.get("kinds", []) else "a figure unmeasured")
        return "partial", why
    return "pass", f"GRPO gains {learn['gain']:+.3f} on dev" + ("; separated from GRPO" if sep else "")


def compare_design(scale: str = "cpu", envs: list[str] | None = None, methods: list[str] | None = None,
                   parallel: int = 2) -> dict[str, Any]:
    from common.provenance import git_state
    from experiments.compare import BASELINE, compare_arm, plan
    from experiments.run import compose

    p = plan(scale, envs, methods, seeds=[0])
    work = Path(p.cells[0].work_dir) / "compare-design" / scale
    grpo_cells = {c.env: c for c in p.cells if c.method == BASELINE}
    learn = pilots(grpo_cells, work / "pilots", parallel)
    cells: dict[str, dict[str, Any]] = {}
    for c in p.cells:
        setting, sep, home = p.settings[c.env], None, None
        if c.method != BASELINE and learn[c.env].get("pass") is not False:  # a void column: no batch needed
            try:
                sep = separation(compose(c.method, dev_overrides(c)),
                                 compose(BASELINE, dev_overrides(grpo_cells[c.env])), work / c.method / c.env)
            except (RuntimeError, ValueError, KeyError) as e:  # said, not hidden: the cell stays unmeasured
                sep = {"pass": None, "error": f"{type(e).__name__}: {e}"[:300]}
            home = home_claim(c.method, setting, scale, compare_arm(c.method, setting))
        gate, reason = cell_gate(learn[c.env], sep, home)
        cells.setdefault(c.method, {})[c.env] = {"gate": gate, "reason": reason, "learnable": learn[c.env],
                                                 "separation": sep, "home": home}
        print(f"[compare-design] {c.method} on {c.env}: {gate} ({reason})", flush=True)
    return {"scale": scale, "split": "dev", "margin": MARGIN, "code": git_state(),
            "envs": {t: {"learnable": v} for t, v in learn.items()}, "cells": cells}


def main(argv: list[str] | None = None) -> int:
    a = argparse.ArgumentParser(prog="python -m experiments.compare_design", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    a.add_argument("--scale", default="cpu")
    a.add_argument("--envs", default=None, help="env tags of experiments/compare.yaml (default: all)")
    a.add_argument("--methods", default=None, help="methods (default: all; GRPO always)")
    a.add_argument("--parallel", type=int, default=2, help="pilots at once")
    a.add_argument("--out", default="results", help="writes <out>/compare/design-<scale>.json")
    args = a.parse_args(argv)
    t0 = time.time()

    def split(s: str | None) -> list[str] | None:
        return [x for x in s.split(",") if x] if s else None

    try:
        result = compare_design(args.scale, split(args.envs), split(args.methods), args.parallel)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = Path(args.out) / "compare" / f"design-{args.scale}.json"
    if path.exists() and (args.envs or args.methods):  # a partial check keeps the other cells' entries
        old = json.loads(path.read_text())
        for m, by_env in old.get("cells", {}).items():
            for tag, entry in by_env.items():  # kept, with the code that checked it
                result["cells"].setdefault(m, {}).setdefault(tag, {"checked_at": old.get("code"), **entry})
        for tag, entry in old.get("envs", {}).items():
            result["envs"].setdefault(tag, entry)
    atomic_write_json(path, result)
    print(f"[compare-design] wrote {path} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    from experiments.compare_design import main as design_main
    sys.exit(design_main())
