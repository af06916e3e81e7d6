"""SHARP's own tables (read by paper/, see paper/extras.py), for what the card's claims cannot express.

Runs are grouped by variant (the env tag without its `-k<K>`: `toolplan`, the easy variant;
`toolhops-chain`, dependent hops; `toolhops-redundant`, redundant workers), K and base arm (the arm
without its variant prefix and `-k<K>`: `grpo`, `local`, `sharp-loo`, `sharp-exact`).

- `compute`: per variant, K and arm: held-out accuracy, the training success curve's area (its mean
  over steps) and the steps to reach 0.5 success, the distractor-call rate (after RL, its mean over
  steps, and the most upstream worker's mean over steps), SHARP's credit gap, and the compute each
  arm spent: model calls, generated tokens, coalition re-scorings, credit and training time. The
  coalition values v(S) are deterministic replays of the environment (no sampling), so SHARP spends
  no extra model calls or tokens; it re-scores 2^N coalitions per episode (exact) or N + 1 (loo).
- `gap-growth`: per variant, each contrast (SHARP - GRPO, SHARP - local, SHARP exact - leave-one-out)
  at each K, paired by seed, on final mean@k, on the success curve's area and on steps to 0.5 (fewer
  is better: GRPO - SHARP), and for SHARP - GRPO the difference of differences between the largest
  and the smallest K (does the gap grow with K?), every verdict as in paper/claims.py.
- `oracle-share` (#37): where a variant has GRPO, the own-slot oracle (`local`) and a SHARP credit, the
  share of the oracle's gain over GRPO that the credit recovers, (credit - GRPO) / (local - GRPO) on the
  mean over paired seeds, with a percentile bootstrap interval over seeds (`oracle_share`).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from common.stats import NAN, Interval, mean_ci
from paper.claims import paired_difference, table_verdict
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci

ARMS = ("grpo", "local", "sharp-loo", "sharp-mc", "sharp-exact")
_ENV = re.compile(r"^(?P<variant>.+)-k(?P<k>\d+)$")
_ARM = re.compile(r"^(?:(?P<prefix>[a-z]+)-)??(?P<base>grpo|local|sharp-loo|sharp-mc|sharp-exact)"
                  r"-k(?P<k>\d+)$")
HALF = 0.5  # the success level of "steps to 0.5"
SMOOTH = 3  # steps to 0.5: the first step whose mean success over the last SMOOTH steps reaches HALF

Key = tuple[str, int, str]  # (variant, K, base arm)
Summaries = dict[Key, list[dict[str, Any]]]  # one summary per seed


def steps_to(success: list[float], level: float = HALF, window: int = SMOOTH) -> float:
    """The first step (0-based) whose trailing mean success over `window` steps reaches `level`; a run
    that never does counts as len(success) (censored at its budget). Hand-checked in the tests."""
    for t in range(len(success)):
        if np.mean(success[max(0, t - window + 1): t + 1]) >= level:
            return float(t)
    return float(len(success))


def parse(run: Run) -> Key | None:
    env, arm = _ENV.match(run.env), _ARM.match(run.arm)
    if env is None or arm is None or arm.group("k") != env.group("k"):
        return None
    return env.group("variant"), int(env.group("k")), arm.group("base")


def summarize(runs: list[Run]) -> Summaries:
    """(variant, K, base arm) -> the numbers of each finished seed."""
    out: Summaries = {}
    for run in runs:
        if (key := parse(run)) is None:
            continue
        ev, rows = run.evals, run.metrics
        last = rows[-1] if rows else {}

        def curve(name: str, rows: list[dict[str, Any]] = rows) -> float:
            values = [r[name] for r in rows if name in r and r[name] is not None]
            return float(np.mean(values)) if values else NAN

        out.setdefault(key, []).append({
            "seed": run.seed, "initial": ev["initial"]["mean@k"] if "initial" in ev else NAN,
            "final": ev["final"]["mean@k"],
            "success_auc": curve("success_rate"),
            "steps_to_half": (
                steps_to(success) if (success := [r["success_rate"] for r in rows if "success_rate" in r])
                else NAN),
            "distractor_final": ev["final"]["metrics"]["distractor_rate"],
            "distractor_auc": curve("distractor_rate"),
            "distractor_first_auc": curve("distractor_rate_first"),
            "credit_gap": float(np.nanmean([r.get("credit_gap", NAN) for r in rows])) if rows else NAN,
            "model_calls": last.get("model_calls_total", 0), "tokens": last.get("generated_tokens_total", 0),
            "rescores": last.get("rescores_total", 0.0),
            "time_credit_s": float(sum(r.get("time_credit_s", 0.0) for r in rows)),
            "time_s": float(sum(r.get("time_step_s", 0.0) for r in rows)),
        })
    return out


MARGIN = 0.05  # the smallest gap (mean@k, success area) that matters, as in the card's claims
STEPS_MARGIN = 3.0  # steps to 0.5: the smallest difference that matters (a tenth of the 30-step budget)


def _by_seed(runs: Summaries, key: Key, field: str = "final") -> dict[int, float]:
    return {r["seed"]: r[field] for r in runs.get(key, [])}


def contrast(runs: Summaries, variant: str, k: int, better: str, worse: str,
             field: str = "final") -> tuple[Interval, int, float]:
    """better - worse at (variant, K) on `field`, paired by seed: (t interval, pairs, SD of the
    differences)."""
    x, y = _by_seed(runs, (variant, k, better), field), _by_seed(runs, (variant, k, worse), field)
    return paired_difference([x[s] - y[s] for s in sorted(set(x) & set(y))])


def gap(runs: Summaries, k: int, variant: str = "toolplan") -> tuple[Interval, int, float]:
    """SHARP (exact) - GRPO at K=k on final mean@k, paired by seed."""
    return contrast(runs, variant, k, "sharp-exact", "grpo")


def gap_growth(runs: Summaries, k_lo: int, k_hi: int, variant: str = "toolplan",
               field: str = "final") -> tuple[Interval, int, float]:
    """(SHARP - GRPO at k_hi) - (SHARP - GRPO at k_lo), per seed present in all four cells (a seed's
    runs share nothing across K, but pairing within K removes the shared warm start)."""
    keys = ((variant, k_hi, "sharp-exact"), (variant, k_hi, "grpo"), (variant, k_lo, "sharp-exact"),
            (variant, k_lo, "grpo"))
    cells = [_by_seed(runs, key, field) for key in keys]
    seeds = sorted(set.intersection(*(set(c) for c in cells)))
    return paired_difference([(cells[0][s] - cells[1][s]) - (cells[2][s] - cells[3][s]) for s in seeds])


def compute_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    rows = []
    for variant, k, arm in sorted(summaries, key=lambda key: (key[0], key[1], ARMS.index(key[2]))):
        rs = summaries[variant, k, arm]

        def iv(key: str, digits: int = 3, rs: list[dict[str, Any]] = rs) -> str:
            values = [r[key] for r in rs if r[key] == r[key]]
            if not values:
                return "—"
            m, lo, hi = mean_ci(values, **CI)
            return (f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" if lo == lo
                    else f"{m:.{digits}f} (no CI)")

        def mean(key: str, digits: int = 0, rs: list[dict[str, Any]] = rs) -> str:
            return f"{np.mean([r[key] for r in rs]):.{digits}f}"

        rows.append([variant, str(k), arm, str(len(rs)), iv("initial"), iv("final"), iv("success_auc"),
                     iv("steps_to_half", 1), iv("distractor_final"), iv("distractor_auc"),
                     iv("distractor_first_auc"), iv("credit_gap", 2), mean("model_calls"), mean("tokens"),
                     mean("rescores"), mean("time_credit_s", 2), mean("time_s")])
    headers = ["variant", "K", "arm", "seeds", "mean@k warm start", "mean@k after RL",
               "training success, mean over steps", f"steps to {HALF} (censored at the budget)",
               "distractor rate after RL", "distractor rate, mean over steps",
               "first worker's distractor rate, mean over steps", "credit gap (right - distractor)",
               "model calls", "generated tokens", "coalition re-scorings", "credit time (s)",
               "train time (s)"]
    return Table("sharp-compute", "SHARP per variant, K and arm: held-out accuracy, the training success "
                 "curve, distractor calls, credit gap and the compute spent (re-scorings are deterministic "
                 "replays: no extra model calls or tokens), mean over seeds [95% bootstrap CI]",
                 headers, rows)


# (better, worse, what it asks), per variant; rows appear only where both arms have runs
CONTRASTS = (("sharp-exact", "grpo", "SHARP (exact) - GRPO"),
             ("sharp-exact", "local", "SHARP (exact) - local (own slot)"),
             ("sharp-exact", "sharp-loo", "SHARP exact - leave-one-out"),
             ("sharp-exact", "sharp-mc", "SHARP exact - Monte-Carlo"),
             ("sharp-loo", "grpo", "SHARP (loo) - GRPO"),
             ("local", "grpo", "oracle (own slot) - GRPO"))


def gap_growth_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    rows = []
    for variant in sorted({v for v, _, _ in summaries}):
        ks = sorted({k for v, k, _ in summaries if v == variant})
        for k in ks:
            for better, worse, what in CONTRASTS:
                if (variant, k, better) not in summaries or (variant, k, worse) not in summaries:
                    continue
                for field, label, margin, sign in (
                        ("final", "held-out mean@k", MARGIN, 1),
                        ("success_auc", "training success, mean over steps", MARGIN, 1),
                        ("steps_to_half", f"steps to {HALF} (fewer is better)", STEPS_MARGIN, -1)):
                    (m, lo, hi), n, sd = contrast(summaries, variant, k, better, worse, field)
                    # not logged by these runs (e.g. #16's runs have no steps to 0.5 below their budget)
                    if m != m:
                        continue
                    iv = (sign * m, sign * hi, sign * lo) if sign < 0 else (m, lo, hi)
                    name = f"{what}, K={k}" if sign > 0 else f"{what}, K={k}: steps saved"
                    rows.append([variant, name, label, fmt_ci(iv, signed=True) + f", {n} pairs",
                                 table_verdict(iv, n, sd, margin)])
        if len(ks) >= 2 and all((variant, k, a) in summaries
                                for k in (ks[0], ks[-1]) for a in ("grpo", "sharp-exact")):
            for field, label in (("final", "held-out mean@k"),
                                 ("success_auc", "training success, mean over steps")):
                iv, n, sd = gap_growth(summaries, ks[0], ks[-1], variant, field)
                if iv[0] != iv[0]:
                    continue
                rows.append([variant, f"gap at K={ks[-1]} minus gap at K={ks[0]} (the gap grows with K)",
                             label, fmt_ci(iv, signed=True) + f", {n} pairs",
                             table_verdict(iv, n, sd, MARGIN)])
    return Table("sharp-gap-growth", "SHARP: each credit against its controls per variant and K, and whether "
                 f"the SHARP - GRPO gap grows with K (paired by seed, 95% t CI; margins {MARGIN} on mean@k "
                 f"and the success area, {STEPS_MARGIN:.0f} steps; verdicts as in paper/claims.py)",
                 ["variant", "effect", "metric", "estimate", "verdict"], rows)


BOOT = 2000  # bootstrap resamples of the seeds for the oracle share's interval


def oracle_share(runs: Summaries, variant: str, k: int, arm: str, field: str = "success_auc",
                 seed: int = 0) -> tuple[float, float, float, int]:
    """(arm - grpo) / (local - grpo) on the means over the seeds all three share: (share, lo, hi, seeds),
    lo and hi the 2.5% and 97.5% quantiles over `BOOT` resamples of those seeds with replacement (a resample
    whose oracle gain is 0 is dropped). NaN where the oracle gains nothing."""
    cells = [_by_seed(runs, (variant, k, a), field) for a in (arm, "grpo", "local")]
    seeds = sorted(set.intersection(*(set(c) for c in cells)))
    if not seeds:
        return NAN, NAN, NAN, 0
    gain = np.array([cells[0][s] - cells[1][s] for s in seeds])
    oracle = np.array([cells[2][s] - cells[1][s] for s in seeds])
    share = float(gain.mean() / oracle.mean()) if oracle.mean() else NAN
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(seeds), size=(BOOT, len(seeds)))
    num, den = gain[picks].mean(axis=1), oracle[picks].mean(axis=1)
    boot = num[den != 0] / den[den != 0]
    lo, hi = (float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))) if boot.size else (NAN, NAN)
    return share, lo, hi, len(seeds)


def oracle_share_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    rows = []
    for variant, k in sorted({(v, k) for v, k, _ in summaries}):
        if not all((variant, k, a) in summaries for a in ("grpo", "local")):
            continue
        for arm in ("sharp-exact", "sharp-mc", "sharp-loo"):
            if (variant, k, arm) not in summaries:
                continue
            for field, label in (("success_auc", "training success, mean over steps"),
                                 ("final", "held-out mean@k")):
                share, lo, hi, n = oracle_share(summaries, variant, k, arm, field)
                rows.append([variant, str(k), arm, label, f"{share:.2f} [{lo:.2f}, {hi:.2f}], {n} seeds"])
    return Table("sharp-oracle-share", "SHARP: the share of the own-slot oracle's gain over GRPO that each "
                 "credit recovers, (credit - GRPO) / (oracle - GRPO) on seed means "
                 "[95% bootstrap over seeds]",
                 ["variant", "K", "credit", "metric", "share of the oracle's gain"], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"compute": compute_table, "gap-growth": gap_growth_table,
                                       "oracle-share": oracle_share_table}
