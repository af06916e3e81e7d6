"""The verdict rule (v3) and the statistics it stands on: one function decides a verdict from an interval
(`table_verdict`), a power calculation that only plans seeds (`seeds_for_margin`), the p value of a paired
difference and Holm's adjustment. `paper/claims.py` applies them to a card's claims; the rule itself is
described there."""

from __future__ import annotations

import numpy as np

from common import stats
from paper.cards import Claim

HOLDS, OPPOSITE, NO_EFFECT, INCONCLUSIVE = "holds", "opposite", "no effect", "inconclusive"
VERDICTS = (HOLDS, OPPOSITE, NO_EFFECT, INCONCLUSIVE)
VOID, DESIGN_NULL = "void", "design null"  # the design check's: untestable here, never evidence
INVALID = "invalid claim"  # not a verdict: the claim could not be evaluated
OUTCOMES = (*VERDICTS, VOID, DESIGN_NULL, INVALID)
ALPHA, POWER = 0.05, 0.8  # the power calculation: two-sided paired t-test at ALPHA, this power at the margin
SEEDS_FLOOR, SEEDS_FLOOR_SMALL_MARGIN, SMALL_MARGIN = 5, 10, 0.05
RULE = {"version": 3, "order": "fewer than seeds_floor pairs: inconclusive; inside +-margin: no effect; "
        "above 0: holds; below 0: opposite; else inconclusive; power plans seeds only; void and design "
        "null from design.json",
        "difference": "mean of per-seed differences (paired by seed), Student-t interval", "alpha": ALPHA,
        "power": POWER, "seeds_floor": SEEDS_FLOOR, "seeds_floor_small_margin": SEEDS_FLOOR_SMALL_MARGIN,
        "small_margin": SMALL_MARGIN, "defined_in": "paper/claims.py"}  # as paper/claims.json states it


def pair_verdict(diff: stats.Interval, margin: float) -> str:
    """What an interval says against a margin: equivalence first (inside +-margin: no effect), then above
    0 (holds) or below 0 (opposite), else inconclusive. No floor: `table_verdict` adds it."""
    _, lo, hi = diff
    if np.isnan(lo) or np.isnan(hi):
        return INCONCLUSIVE
    if -margin < lo and hi < margin:
        return NO_EFFECT
    if lo > 0:
        return HOLDS
    if hi < 0:
        return OPPOSITE
    return INCONCLUSIVE


def chain_verdict(verdicts: list[str]) -> str:
    for refuted in (OPPOSITE, NO_EFFECT):
        if refuted in verdicts:
            return refuted
    return HOLDS if verdicts and all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def seeds_floor(claim: Claim) -> int:
    return max(SEEDS_FLOOR_SMALL_MARGIN if claim.margin < SMALL_MARGIN else SEEDS_FLOOR, claim.min_seeds)


def seeds_needed(claim: Claim, sd: float) -> int:
    """Pairs for 80% power at the margin given the pilot SD, never below the floor (no pilot: the floor)."""
    return seeds_for_margin(claim.margin, sd, seeds_floor(claim))


def seeds_for_margin(margin: float, sd: float, floor: int | None = None) -> int:
    """`seeds_needed` for a bare margin (the head-to-head comparison, paper/head_to_head.py): the floor is
    the rule's (5, or 10 under a margin of 0.05) unless given."""
    if floor is None:
        floor = SEEDS_FLOOR_SMALL_MARGIN if margin < SMALL_MARGIN else SEEDS_FLOOR
    if not np.isfinite(sd):
        return floor
    return max(floor, stats.paired_seeds_needed(sd, margin, ALPHA, POWER))


def paired_difference(diffs: list[float]) -> tuple[stats.Interval, int, float]:
    """Per-seed differences of two arms (NaN: a seed without a pair) -> the t interval of their mean,
    the number of pairs and the SD of the differences (NaN intervals and SD from fewer than 2 pairs)."""
    kept = [d for d in diffs if d == d]
    if len(kept) < 2:
        return (float("nan"),) * 3, len(kept), float("nan")
    return stats.t_interval(kept), len(kept), float(np.std(kept, ddof=1))


def table_verdict(diff: stats.Interval, n: int, sd: float, margin: float, floor: int = SEEDS_FLOOR) -> str:
    """Verdict rule v3, the one function every verdict of the suite comes from: fewer than `floor` pairs
    is inconclusive; otherwise `pair_verdict` of the interval. `sd` (the per-seed differences' SD) only
    plans seeds (`seeds_for_margin`): a power calculation never overrides an interval."""
    if n < floor:
        return INCONCLUSIVE
    return pair_verdict(diff, margin)


def paired_p_value(diff: stats.Interval, n: int, confidence: float = 0.95) -> float:
    """The two-sided p value of a paired t-test of mean difference 0, recovered from the t interval
    (half-width = t_{(1+c)/2, n-1} * s / sqrt(n)); NaN without an interval."""
    from scipy import stats as sps

    mean, lo, hi = diff
    if n < 2 or np.isnan(lo) or hi == lo:
        return float("nan")
    se = (hi - lo) / 2 / float(sps.t.ppf(0.5 + confidence / 2, n - 1))
    return float(2 * sps.t.sf(abs(mean) / se, n - 1))


def holm(p_values: list[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979): the i-th smallest p times (m - i + 1), made monotone,
    capped at 1; NaN stays NaN and does not count in m.

    >>> [round(p, 3) for p in holm([0.01, 0.04, 0.03, float("nan")])]
    [0.03, 0.06, 0.06, nan]
    """
    order = sorted((p, i) for i, p in enumerate(p_values) if p == p)
    m, out, running = len(order), [float("nan")] * len(p_values), 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def verdict_note(n: int, needed: int, interval_verdict: str) -> str:
    """Why an inconclusive verdict is one: too few pairs (and what the interval alone says), and the
    pairs the power calculation plans for the margin when more than the floor."""
    notes = []
    if n < SEEDS_FLOOR:
        notes.append(f"fewer than {SEEDS_FLOOR} pairs (n={n})")
        if n >= 2 and interval_verdict != INCONCLUSIVE:
            notes.append(f"the interval alone says {interval_verdict}")
    if (n < SEEDS_FLOOR or interval_verdict == INCONCLUSIVE) and needed > max(n, SEEDS_FLOOR):
        notes.append(f"the power calculation plans {needed} pairs for the margin")
    return "; ".join(notes)
