"""CANOPY's signal arithmetic, as plain functions (no torch): the chance that a group carries a
gradient, the group size a pilot's success rate calls for, and the measured share of groups with
signal set against that prediction. Each is tested against the paper's numbers (doctests) and
hand-computed cases (tests/replications/test_canopy.py)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from common.episode import Group


def signal_probability(p: float, n: int) -> float:
    """P_sig(p, n) = 1 - p^n - (1 - p)^n: the chance that n episodes at success rate p are not all
    equal, i.e. that a GRPO group carries a non-zero advantage (CANOPY, signal starvation).

    >>> round(signal_probability(0.05, 8), 2), round(signal_probability(0.05, 32), 2)
    (0.34, 0.81)
    """
    if not 0.0 <= p <= 1.0 or n < 1:
        raise ValueError(f"need 0 <= p <= 1 and n >= 1; got p={p}, n={n}")
    return 1.0 - p**n - (1.0 - p) ** n


def group_size(p_min: float, coverage: float) -> int:
    """The smallest n with P(at least one success in n) >= coverage at success rate p_min:
    n = ceil(ln(1 - coverage) / ln(1 - p_min)) (CANOPY's group sizing from a pilot).

    >>> group_size(0.05, 0.8), group_size(0.1, 0.8)
    (32, 16)
    """
    if not 0.0 < p_min < 1.0:
        raise ValueError(f"p_min must be in (0, 1); got {p_min} (a pilot with no success sizes no group: "
                         "cap it)")
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must be in (0, 1); got {coverage}")
    n = math.log(1.0 - coverage) / math.log(1.0 - p_min)
    return max(1, math.ceil(n - 1e-9))  # the tolerance keeps an exact integer from rounding up


def signal_metrics(groups: list[Group]) -> dict[str, float]:
    """Per tier: groups, groups with signal (rewards not all equal), episodes and successes, of the
    non-quarantined episodes, plus the measured share of groups with signal over all tiers.
    `signal_check` turns these counts into the measured share next to P_sig's prediction."""
    out: dict[str, float] = {}
    kept = [g for g in groups if g.episodes]
    for g in kept:
        for key, value in ((f"groups/tier{g.tier}", 1.0),
                           (f"signal_groups/tier{g.tier}", float(len(set(g.rewards)) > 1)),
                           (f"episodes/tier{g.tier}", float(len(g.episodes))),
                           (f"successes/tier{g.tier}", float(sum(e.success for e in g.episodes)))):
            out[key] = out.get(key, 0.0) + value
    if kept:
        out["signal_measured"] = float(np.mean([len(set(g.rewards)) > 1 for g in kept]))
    return out


def signal_check(rows: list[dict[str, Any]], window: int = 10) -> dict[str, float]:
    """The share of groups with signal in a run, measured and as P_sig predicts.

    `rows` are a run's metrics (one per step, with `signal_metrics`' counts). Steps are taken in
    windows of `window`; within a window and tier, p is the success rate of all its episodes and
    each group is predicted to carry signal with P_sig(p, its mean size). Pooling a window keeps
    each group's own outcomes a small part of the p it is predicted from (a group's own p would
    predict less signal than it has), and short windows follow p as training moves it. Tasks of
    one tier still differ in difficulty; P_sig is concave in p, so the measured share may sit a
    little below the prediction. Returns {"groups", "measured", "predicted"} over the whole run.
    """
    groups = measured = predicted = 0.0
    for start in range(0, len(rows), window):
        chunk = rows[start : start + window]
        tiers = {key.split("/", 1)[1] for row in chunk for key in row if key.startswith("groups/")}
        for tier in tiers:
            g = sum(row.get(f"groups/{tier}", 0.0) for row in chunk)
            n = sum(row.get(f"episodes/{tier}", 0.0) for row in chunk)
            p = sum(row.get(f"successes/{tier}", 0.0) for row in chunk) / n
            groups += g
            measured += sum(row.get(f"signal_groups/{tier}", 0.0) for row in chunk)
            predicted += sum(row.get(f"groups/{tier}", 0.0) * signal_probability(p, max(1, round(
                row.get(f"episodes/{tier}", 0.0) / row[f"groups/{tier}"])))
                for row in chunk if row.get(f"groups/{tier}"))
    if not groups:
        return {"groups": 0.0, "measured": math.nan, "predicted": math.nan}
    return {"groups": groups, "measured": measured / groups, "predicted": predicted / groups}
