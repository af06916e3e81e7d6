"""SkillRise's own tables (read by paper/, see paper/extras.py), for what the card's claims cannot express.

Arms: `grpo` (no document), `skillrise`, `skillrise-current` (curate rewarded by the current task); the
second testbed's (issue #41, suffix `-ind`) and its fourth attempt's (`-prior`) get the same tables
(`SETTINGS`).
Held-out evaluation plays chains in the chain arms, so tier L (plan length) is chain position
L - 1; the grpo arm plays the same held-out tasks alone.

- `positions`: held-out success by chain position per arm (final), and whether it *rises* with the
  position: within an arm, position 3 minus position 1 (the later task is harder, so without a
  document it falls), and across arms, the difference of differences
  (SkillRise - GRPO at position 3) - (SkillRise - GRPO at position 1), paired by seed.
- `compute`: per arm, the generated tokens of training (solve and curate) and the median gradient norm,
  the step sizes the card's verdicts are read beside (issue #41).
- `documents`: what the curate turns write, at held-out evaluation (warm start and after RL) and over
  training (the first and the last `WINDOW` steps): abstract order, of which right, concrete tool
  names, empty, other. The figure of the same shares per step is the card's curves
  (`doc_abstract`, `doc_concrete`, `doc_empty`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.stats import NAN, mean_ci
from paper.claims import paired_difference, table_verdict
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci

# setting -> (grpo arm, skillrise arm, current-task control arm)
SETTINGS = {"numbered": ("grpo", "skillrise", "skillrise-current"),
            "induction": ("grpo-ind", "skillrise-ind", "current-ind"),
            "prior": ("grpo-prior", "skillrise-prior", "current-prior")}
ARMS = (*(a for arms in SETTINGS.values() for a in arms), "grpo-prior-tok")  # + GRPO at SkillRise's tokens
CHAIN_ARMS = tuple(a for arms in SETTINGS.values() for a in arms[1:])
KINDS = ("abstract", "right", "concrete", "empty", "other")
MARGIN = 0.05  # the smallest difference of success that matters (as the card's claims)
WINDOW = 5  # training steps averaged at the start and at the end


def _tiers(runs: list[Run]) -> list[str]:
    return sorted({t for r in runs for t in r.evals["final"].get("per_tier", {})}, key=int)


def _tier(run: Run, tier: str, stage: str = "final") -> float:
    return float(run.evals.get(stage, {}).get("per_tier", {}).get(tier, {}).get("mean@k", NAN))


def _doc(run: Run, kind: str, stage: str = "final") -> float:
    return float(run.evals.get(stage, {}).get("extra", {}).get("curate", {}).get("metrics", {})
                 .get(f"doc_{kind}", NAN))


def _curve(run: Run, key: str, first: bool) -> float:
    rows = [r[key] for r in run.metrics if r.get(key) is not None]
    if not rows:
        return NAN
    return float(np.mean(rows[:WINDOW] if first else rows[-WINDOW:]))


def _ci(values: list[float], digits: int = 3) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "—"
    m, lo, hi = mean_ci(values, **CI)
    return f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" if lo == lo else f"{m:.{digits}f} (no CI)"


def _by_arm(runs: list[Run]) -> dict[str, dict[int, Run]]:
    out: dict[str, dict[int, Run]] = {}
    for r in runs:
        if r.arm in ARMS:
            out.setdefault(r.arm, {})[r.seed] = r
    return out


def positions_table(runs: list[Run]) -> Table:
    rows: list[list[str]] = []
    tiers: list[str] = []
    for grpo, main, control in SETTINGS.values():
        tiers = _position_rows(runs, (grpo, main, control), rows) or tiers
    headers = ["arm / effect", "seeds", *[f"position {i + 1} (plan {t})" for i, t in enumerate(tiers)],
               "paired difference [95% t CI]", "verdict (margin 0.05)"]
    return Table("skillrise-positions", "SkillRise: held-out success (mean@k) by chain position after RL, "
                 "mean over seeds [95% t CI]; does it rise with the position? (paired by seed; verdicts as "
                 "in paper/claims.py)", headers, rows)


def _position_rows(runs: list[Run], setting: tuple[str, str, str], rows: list[list[str]]) -> list[str]:
    grpo = setting[0]
    arms = {a: rs for a, rs in _by_arm(runs).items() if a in setting}
    tiers = _tiers([r for rs in arms.values() for r in rs.values()])
    for arm in [a for a in setting if a in arms]:
        rs = list(arms[arm].values())
        rows.append([arm, str(len(rs)), *[_ci([_tier(r, t) for r in rs]) for t in tiers], "", ""])
    if len(tiers) >= 2:
        first, last = tiers[0], tiers[-1]
        for arm in [a for a in setting if a in arms]:
            iv, n, sd = paired_difference([_tier(r, last) - _tier(r, first) for r in arms[arm].values()])
            rows.append([f"{arm}: position {len(tiers)} - position 1", str(n), *[""] * len(tiers),
                         fmt_ci(iv, signed=True), table_verdict(iv, n, sd, MARGIN)])
        for arm in [a for a in setting[1:] if a in arms and grpo in arms]:
            x, y = arms[arm], arms[grpo]
            seeds = sorted(set(x) & set(y))
            iv, n, sd = paired_difference([(_tier(x[s], last) - _tier(y[s], last))
                                           - (_tier(x[s], first) - _tier(y[s], first)) for s in seeds])
            rows.append([f"({arm} - {grpo}) at position {len(tiers)} minus at position 1", str(n),
                         *[""] * len(tiers), fmt_ci(iv, signed=True), table_verdict(iv, n, sd, MARGIN)])
    return tiers


def _last(run: Run, key: str) -> float:
    rows = [r[key] for r in run.metrics if r.get(key) is not None]
    return float(rows[-1]) if rows else NAN


def compute_table(runs: list[Run]) -> Table:
    """Per arm: training's generated tokens (all, solve, curate; thousands) and the median gradient norm."""
    rows = []
    for arm, rs in _by_arm(runs).items():
        r = list(rs.values())
        grad = [float(np.median([m["grad_norm"] for m in x.metrics if m.get("grad_norm") is not None]
                                or [NAN])) for x in r]
        tokens = [_ci([_last(x, f"generated_tokens_total{k}") / 1000 for x in r], 1)
                  for k in ("", "/main", "/curate")]
        rows.append([arm, str(len(r)), *tokens, _ci(grad, 4)])
    headers = ["arm", "seeds", "tokens (k)", "solve tokens (k)", "curate tokens (k)", "median grad norm"]
    return Table("skillrise-compute", "SkillRise: what each arm spent in training, mean over seeds [95% t "
                 "CI]: generated tokens (thousands: all, solve turns, curate turns) and the median gradient "
                 "norm of its steps (issue #41: the step sizes beside every verdict)", headers, rows)


def documents_table(runs: list[Run]) -> Table:
    arms = _by_arm(runs)
    rows: list[list[str]] = []
    for arm in [a for a in CHAIN_ARMS if a in arms]:
        rs = list(arms[arm].values())
        for label, get in (("held-out, warm start", lambda r, k: _doc(r, k, "initial")),
                           ("held-out, after RL", lambda r, k: _doc(r, k, "final")),
                           (f"training, first {WINDOW} steps", lambda r, k: _curve(r, f"doc_{k}", True)),
                           (f"training, last {WINDOW} steps", lambda r, k: _curve(r, f"doc_{k}", False))):
            rows.append([arm, label, str(len(rs)), *[_ci([get(r, k) for r in rs]) for k in KINDS]])
    for _, main, arm in SETTINGS.values():
        if main not in arms or arm not in arms:
            continue
        x, y = arms[main], arms[arm]
        seeds = sorted(set(x) & set(y))
        iv, n, sd = paired_difference([_doc(x[s], "abstract") - _doc(y[s], "abstract") for s in seeds])
        rows.append([f"{main} - {arm}", "held-out abstract share, after RL", str(n),
                     fmt_ci(iv, signed=True), table_verdict(iv, n, sd, 0.10), "", "", ""])
    headers = ["arm", "when", "seeds", *[f"doc {k}" for k in KINDS]]
    return Table("skillrise-documents", "SkillRise: what the curate turns write, as shares of curate turns, "
                 "mean over seeds [95% t CI] (abstract: only abstract steps; right: an abstract prefix of "
                 "the true order; concrete: only tool numbers). The last row compares the abstract share of "
                 "the two curate rewards (margin 0.10).",
                 headers, rows)


def summary(runs: list[Run]) -> dict[str, Any]:
    """The numbers REPORT/CARD quote, per arm: success by position and document shares (means over seeds)."""
    out: dict[str, Any] = {}
    for arm, rs in _by_arm(runs).items():
        tiers = _tiers(list(rs.values()))
        out[arm] = {"seeds": sorted(rs),
                    **{f"position_{i + 1}": float(np.nanmean([_tier(r, t) for r in rs.values()]))
                       for i, t in enumerate(tiers)}}
        if arm in CHAIN_ARMS:
            out[arm].update({f"doc_{k}": float(np.nanmean([_doc(r, k) for r in rs.values()])) for k in KINDS})
    return out


EXTRA_TABLES: dict[str, ExtraTable] = {"positions": positions_table, "documents": documents_table,
                                       "compute": compute_table}
