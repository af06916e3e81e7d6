"""The design check's pilots (`experiments.design`): an arm's one-seed run on dev with its own budget,
and the values its gates read: a metric's gain from the warm start (the learnable gate) and the claim's
own metric (the positive control)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np


def stale(run_dir: Path, now: dict[str, Any]) -> bool:
    """A finished run that other code made: its manifest's commit is not `now`'s (`git_state()`), or
    either tree had uncommitted changes (then which code ran cannot be told)."""
    path = run_dir / "manifest.json"
    if not path.exists():
        return False
    made = json.loads(path.read_text())
    return bool(made.get("git_dirty") or now.get("git_dirty") or made.get("git_sha") != now.get("git_sha"))


def pilot_gain(method: str, arm: str, scale: str, metric: str, folder: Path) -> dict[str, Any]:
    """The arm at seed 0 on dev, its own budget: final minus initial of `metric`, and the run's folder.
    A finished pilot counts only if this commit made it (`stale`): a gate read from an older pilot
    would judge code that no longer runs (the oracle of #39 was fixed and its old pilot reused)."""
    from common.provenance import git_state
    from experiments.replicate import launch_local, plan
    from paper.claims import eval_value

    cells = plan(method, scale, [0], (f"out_dir={folder}", "eval.split=dev", "eval.at_start=true"), [arm])
    if stale(cells[0].run_dir, git_state()):
        cells = [replace(c, overrides=(*c.overrides, "force=true")) for c in cells]
    failures = launch_local(cells, 1, cells[0].work_dir)
    if failures:
        raise RuntimeError(f"the design pilot of {method}/{arm} failed: {failures[0].splitlines()[-1]}")
    evals = json.loads((cells[0].run_dir / "eval.json").read_text())
    initial, final = eval_value(evals["initial"], metric), eval_value(evals["final"], metric)
    return {"arm": arm, "initial": initial, "final": final, "gain": final - initial,
            "run": str(cells[0].run_dir)}


CURVE_WINDOW = 5  # a curve metric's gain: its mean over the last this many steps minus over the first


def curve(run: Path, key: str) -> list[float]:
    """A pilot's training curve of `key` (metrics.jsonl, in step order), or KeyError when it has none."""
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    values = [float(r[key]) for r in rows if r.get(key) is not None]
    if not values:
        raise KeyError(f"{run}/metrics.jsonl has no {key!r}")
    return values


def metric_gain(pilot: dict[str, Any], metric: str) -> dict[str, float]:
    """A finished pilot's initial, final and gain of `metric`: an eval metric (dev, initial and final
    evaluations) or `curve:<key>` (the training curve's first and last `CURVE_WINDOW` steps)."""
    from paper.cards import CURVE_PREFIX
    from paper.claims import eval_value

    run = Path(pilot["run"])
    if metric.startswith(CURVE_PREFIX):
        values = curve(run, metric[len(CURVE_PREFIX):])
        initial = float(np.mean(values[:CURVE_WINDOW]))
        final = float(np.mean(values[-CURVE_WINDOW:]))
    else:
        evals = json.loads((run / "eval.json").read_text())
        initial, final = eval_value(evals["initial"], metric), eval_value(evals["final"], metric)
    return {"initial": initial, "final": final, "gain": final - initial}


def claim_metric_value(pilot: dict[str, Any], metric: str, window: int | None = None) -> float:
    """A finished pilot's value of a claim's metric: a curve metric (`curve:<key>`) over the last
    `window` training steps (None: every step, the area under the curve), else the final dev evaluation.
    The positive control compares the oracle's and the control's pilots on it, so a claim about learning
    speed is gated on learning speed, not on where both arms end."""
    from paper.cards import CURVE_PREFIX
    from paper.claims import eval_value

    run = Path(pilot["run"])
    if metric.startswith(CURVE_PREFIX):
        values = curve(run, metric[len(CURVE_PREFIX):])
        return float(np.mean(values if window is None else values[-window:]))
    return eval_value(json.loads((run / "eval.json").read_text())["final"], metric)
