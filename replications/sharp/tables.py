"""SHARP's own tables (read by paper/, see paper/extras.py), for what the card's claims cannot express.

Arms are `<base>-k<K>` (grpo, sharp-loo, sharp-exact) on env `toolplan-k<K>`.

- `compute`: per K and arm, held-out accuracy and distractor-call rate, the distractor rate's mean
  over training steps (the area under its curve), SHARP's credit gap, and the compute each arm
  spent: model calls, generated tokens, coalition re-scorings, credit and training time. The
  coalition values v(S) are deterministic replays of the environment (no sampling), so SHARP spends
  no extra model calls or tokens; it re-scores 2^K coalitions per episode (exact) or K + 1
  (leave-one-out).
- `gap-growth`: the claim that the SHARP - GRPO gap grows with K, a difference of differences:
  (SHARP - GRPO at the largest K) - (SHARP - GRPO at the smallest K) on final mean@k, every arm-K
  cell's seeds resampled independently (95% bootstrap interval). It holds when the interval lies
  above 0, is inconclusive when the estimate is positive but the interval reaches 0, and does not
  hold otherwise.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from common.stats import NAN, Interval, mean_ci, paired_seeds_needed, t_interval
from paper.claims import pair_verdict
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci

ARMS = ("grpo", "sharp-loo", "sharp-exact")
_ARM = re.compile(r"^(?P<base>.+)-k(?P<k>\d+)$")

Summaries = dict[tuple[int, str], list[dict[str, Any]]]  # (K, base arm) -> one summary per seed


def summarize(runs: list[Run]) -> Summaries:
    """(K, base arm) -> the numbers of each finished seed."""
    out: Summaries = {}
    for run in runs:
        m = _ARM.match(run.arm)
        if m is None or m.group("base") not in ARMS:
            continue
        ev, rows = run.evals, run.metrics
        last = rows[-1] if rows else {}
        out.setdefault((int(m.group("k")), m.group("base")), []).append({
            "seed": run.seed, "initial": ev["initial"]["mean@k"] if "initial" in ev else NAN, "final": ev["final"]["mean@k"],
            "distractor_final": ev["final"]["metrics"]["distractor_rate"],
            "distractor_auc": float(np.mean([r["distractor_rate"] for r in rows])) if rows else NAN,
            "credit_gap": float(np.nanmean([r.get("credit_gap", NAN) for r in rows])) if rows else NAN,
            "model_calls": last.get("model_calls_total", 0), "tokens": last.get("generated_tokens_total", 0),
            "rescores": last.get("rescores_total", 0.0),
            "time_credit_s": float(sum(r.get("time_credit_s", 0.0) for r in rows)),
            "time_s": float(sum(r.get("time_step_s", 0.0) for r in rows)),
        })
    return out


MARGIN = 0.05  # the smallest gap (mean@k) that matters, as in the card's claims
SEEDS_FLOOR = 5  # the card's rule: never fewer seeds, whatever the power calculation says


def verdict(iv: Interval, n: int, sd: float, margin: float = MARGIN) -> str:
    """The card's four verdicts for a seed-paired difference (paper/claims.py): holds | opposite |
    no effect | inconclusive, inconclusive whenever fewer than the seeds its power calculation needs."""
    m, lo, hi = iv
    if m != m or n < 2:
        return "inconclusive (not enough runs)"
    alone = pair_verdict(iv, margin)
    needed = max(SEEDS_FLOOR, paired_seeds_needed(sd, margin)) if np.isfinite(sd) else SEEDS_FLOOR
    if n < needed:
        return f"inconclusive (underpowered: n={n} < required {needed}; the interval alone says {alone})"
    return alone


def _by_seed(runs: Summaries, key: tuple[int, str]) -> dict[int, float]:
    return {r["seed"]: r["final"] for r in runs.get(key, [])}


def _paired(diffs: list[float]) -> tuple[Interval, int, float]:
    if len(diffs) < 2:
        return (NAN, NAN, NAN), len(diffs), NAN
    return t_interval(diffs), len(diffs), float(np.std(diffs, ddof=1))


def gap(runs: Summaries, k: int) -> tuple[Interval, int, float]:
    """SHARP (exact) - GRPO at K=k on final mean@k, paired by seed: (t interval, pairs, SD of the differences)."""
    x, y = _by_seed(runs, (k, "sharp-exact")), _by_seed(runs, (k, "grpo"))
    return _paired([x[s] - y[s] for s in sorted(set(x) & set(y))])


def gap_growth(runs: Summaries, k_lo: int, k_hi: int) -> tuple[Interval, int, float]:
    """(SHARP - GRPO at k_hi) - (SHARP - GRPO at k_lo), per seed present in all four cells (a seed's
    runs share nothing across K, but pairing within K removes the shared warm start)."""
    cells = [_by_seed(runs, key) for key in ((k_hi, "sharp-exact"), (k_hi, "grpo"), (k_lo, "sharp-exact"), (k_lo, "grpo"))]
    seeds = sorted(set.intersection(*(set(c) for c in cells)))
    return _paired([(cells[0][s] - cells[1][s]) - (cells[2][s] - cells[3][s]) for s in seeds])


def compute_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    rows = []
    for k, arm in sorted(summaries, key=lambda ka: (ka[0], ARMS.index(ka[1]))):
        rs = summaries[k, arm]

        def iv(key: str, digits: int = 3, rs: list[dict[str, Any]] = rs) -> str:
            m, lo, hi = mean_ci([r[key] for r in rs], **CI)
            if m != m:
                return "—"
            return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" if lo == lo else f"{m:.{digits}f} (no CI)"

        def mean(key: str, digits: int = 0, rs: list[dict[str, Any]] = rs) -> str:
            return f"{np.mean([r[key] for r in rs]):.{digits}f}"

        rows.append([str(k), arm, str(len(rs)), iv("initial"), iv("final"), iv("distractor_final"), iv("distractor_auc"),
                     iv("credit_gap", 2), mean("model_calls"), mean("tokens"), mean("rescores"), mean("time_credit_s", 2),
                     mean("time_s")])
    headers = ["K", "arm", "seeds", "mean@k warm start", "mean@k after RL", "distractor rate after RL",
               "distractor rate, mean over steps", "credit gap (right - distractor)", "model calls", "generated tokens",
               "coalition re-scorings", "credit time (s)", "train time (s)"]
    return Table("sharp-compute", "SHARP per K and arm: held-out accuracy, distractor calls, credit gap and the compute "
                 "spent (re-scorings are deterministic replays: no extra model calls or tokens), mean over seeds "
                 "[95% t CI]", headers, rows)


def gap_growth_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    ks = sorted({k for k, _ in summaries})
    rows = []
    for k in ks:
        iv, n, sd = gap(summaries, k)
        rows.append([f"SHARP (exact) - GRPO at K={k}", fmt_ci(iv, signed=True) + f", {n} pairs", verdict(iv, n, sd)])
    if len(ks) >= 2:
        iv, n, sd = gap_growth(summaries, ks[0], ks[-1])
        rows.append([f"gap at K={ks[-1]} minus gap at K={ks[0]} (the gap grows with K)", fmt_ci(iv, signed=True) + f", {n} pairs",
                     verdict(iv, n, sd)])
    return Table("sharp-gap-growth", "SHARP: does the SHARP - GRPO gap on held-out mean@k grow with K? "
                 "(paired by seed, 95% t CI; margin 0.05; verdicts as in paper/claims.py)", ["effect", "estimate", "verdict"], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"compute": compute_table, "gap-growth": gap_growth_table}
