"""IAPO's second testbed (#39, service_desk's choice setting): learning speed per arm, the gap's growth
with D, and the share of the oracle's gain IAPO recovers (tables read by paper/, via tables.py).

- `speed`: per arm and delay, the area under the training-success curve (the mean of `success_rate`
  over all steps: the card's primary metric), steps to 0.8 (`steps_to`: the first step whose 5-step
  moving mean of training success reaches 0.8; the median over the seeds that reached it, and how
  many did), held-out success at the warm start and after RL; mean over seeds [95% t CI].
- `share`: seed-paired AUC gaps: IAPO - GRPO at D = 8 and at D = 0, their difference (does the gain
  grow with D), IAPO - shuffled, c = 0.5 - GRPO, oracle - GRPO; and the share of the oracle's gain
  IAPO (and c = 0.5) recovers, (arm - grpo) / (oracle - grpo) on the means over seeds (a ratio, no
  interval).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.stats import NAN, mean_ci
from paper.claims import paired_difference, table_verdict
from paper.load import Run
from paper.tables import CI, Table, fmt_ci

ENVS = {"service_desk-choice-d8": 8, "service_desk-choice-d0": 0}
MARGIN = 0.05  # the card's margin for the IAPO - GRPO speed claims (area under the curve)
SEEDS_FLOOR = 5
TARGET, WINDOW = 0.8, 5


def steps_to(rows: list[dict[str, Any]], key: str = "success_rate", target: float = TARGET,
             window: int = WINDOW) -> int | None:
    """The `step` of the first row whose trailing mean over `window` rows (full windows only) of `key`
    reaches `target`; None when none does.

    >>> rows = [{"step": s, "success_rate": v} for s, v in enumerate([0.5, 0.9, 0.9, 0.9, 0.9, 0.9, 0.5])]
    >>> steps_to(rows)  # means of steps 0-4: 0.82
    4
    >>> steps_to(rows, target=0.9), steps_to(rows[:4])
    (5, None)
    """
    values = [r[key] for r in rows if r.get(key) is not None]
    steps = [r["step"] for r in rows if r.get(key) is not None]
    for i in range(window - 1, len(values)):
        if float(np.mean(values[i - window + 1: i + 1])) >= target - 1e-12:
            return int(steps[i])
    return None


def auc(rows: list[dict[str, Any]], key: str = "success_rate") -> float:
    """The mean of `key` over every step (the area under the curve per step)."""
    values = [r[key] for r in rows if r.get(key) is not None]
    return float(np.mean(values)) if values else NAN


def summarize(runs: list[Run]) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
    """(arm, D) -> seed -> its numbers, for the runs of the second testbed."""
    out: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    for run in runs:
        if run.env not in ENVS:
            continue
        final, initial = run.evals.get("final", {}), run.evals.get("initial", {})
        out.setdefault((run.arm, ENVS[run.env]), {})[run.seed] = {
            "auc": auc(run.metrics), "steps_to": steps_to(run.metrics),
            "initial": initial.get("mean@k", NAN), "final": final.get("mean@k", NAN)}
    return out


def _iv(values: list[float]) -> str:
    m, lo, hi = mean_ci(values, **CI)
    if m != m:
        return "—"
    return f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if lo == lo else f"{m:.3f} (no CI)"


def speed_table(runs: list[Run]) -> Table:
    s = summarize(runs)
    rows = []
    for (arm, d), seeds in sorted(s.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        reached = [v["steps_to"] for v in seeds.values() if v["steps_to"] is not None]
        median = f"{float(np.median(reached)):g}" if reached else "—"
        rows.append([arm, str(d), str(len(seeds)), _iv([v["auc"] for v in seeds.values()]),
                     f"{median} ({len(reached)}/{len(seeds)} reached)",
                     _iv([v["initial"] for v in seeds.values()]), _iv([v["final"] for v in seeds.values()])])
    return Table("iapo-speed", "IAPO, second testbed (service_desk choice): learning speed per arm and "
                 f"delay D (area under the training-success curve; steps to {TARGET} of the {WINDOW}-step "
                 "moving mean, median over the seeds that reached it) and held-out success, mean over seeds "
                 "[95% t CI]",
                 ["arm", "D", "seeds", "AUC of training success", f"steps to {TARGET}",
                  "held-out, warm start", "held-out after RL"], rows)


def paired(s: dict[tuple[str, int], dict[int, dict[str, Any]]], a: tuple[str, int], b: tuple[str, int],
           key: str = "auc") -> dict[int, float]:
    """seed -> a - b on `key`, for the seeds both have."""
    x, y = s.get(a, {}), s.get(b, {})
    return {seed: x[seed][key] - y[seed][key] for seed in sorted(set(x) & set(y))}


def share_table(runs: list[Run]) -> Table:
    s = summarize(runs)
    rows = []
    gaps = {name: paired(s, a, b) for name, a, b in (
        ("iapo - grpo at D=8", ("iapo", 8), ("grpo", 8)),
        ("iapo - grpo at D=0", ("iapo-d0", 0), ("grpo-d0", 0)),
        ("iapo - shuffled at D=8", ("iapo", 8), ("shuffled", 8)),
        ("iapo-c05 - grpo at D=8", ("iapo-c05", 8), ("grpo", 8)),
        ("oracle - grpo at D=8", ("oracle", 8), ("grpo", 8)))}
    d8, d0 = gaps["iapo - grpo at D=8"], gaps["iapo - grpo at D=0"]
    gaps["gap at D=8 minus gap at D=0 (the gain grows with D)"] = {k: d8[k] - d0[k]
                                                                   for k in sorted(set(d8) & set(d0))}
    for name, diffs in gaps.items():
        iv, n, sd = paired_difference(list(diffs.values()))
        rows.append([name, fmt_ci(iv, signed=True) + f", {n} pairs",
                     table_verdict(iv, n, sd, MARGIN, SEEDS_FLOOR)])
    oracle = gaps["oracle - grpo at D=8"]
    for arm in ("iapo", "iapo-c05"):
        mine = paired(s, (arm, 8), ("grpo", 8))
        both = sorted(set(mine) & set(oracle))
        den = float(np.mean([oracle[k] for k in both])) if both else NAN
        share = float(np.mean([mine[k] for k in both])) / den if both and den > 0 else NAN
        rows.append([f"share of the oracle's AUC gain, {arm}", "—" if share != share else f"{share:.3f}",
                     "(ratio of means; no verdict)"])
    return Table("iapo-share", "IAPO, second testbed: seed-paired gaps of the area under the "
                 "training-success curve (95% t CI; margin 0.05; verdicts as in paper/claims.py), and the "
                 "share of the oracle's gain recovered", ["effect", "estimate", "verdict"], rows)
