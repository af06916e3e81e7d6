"""IAPO's own tables (read by paper/, see paper/extras.py), for what the card's claims cannot express.

The second testbed's (#39, service_desk choice: `speed.py`): `speed` and `share`. The first testbed's
(below; only runs of env tag `service_desk`, the classic setting): arms (grpo, iapo, iapo-b0, iapo-c05,
shuffled) train on service_desk's mixture of delays D and are evaluated at each D (the task's tier:
`per_tier` of eval.json).

- `behaviour`: per arm, held-out success (mean@k) at the warm start and after RL, per D, the probe
  accuracy (held-out single-turn tool calls), and the trap-use and redundant-lookup rates after RL
  and averaged over the training steps (the area under their curves: "falls faster").
- `gap-growth`: does the IAPO - GRPO gap grow with D? Per D, the seed-paired difference of final
  mean@k at that D, then the difference of differences (gap at the largest D minus gap at the
  smallest D), paired by seed, with the card's four verdicts and its power rule (margin 0.05).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.stats import NAN, Interval, mean_ci
from paper.claims import paired_difference, table_verdict
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci
from replications.iapo.speed import share_table, speed_table

ARMS = ("grpo", "iapo", "iapo-b0", "iapo-c05", "shuffled")
CLASSIC = "service_desk"  # the first testbed's env tag
MARGIN = 0.05  # the smallest gap of mean@k that matters, as in the card's claims
SEEDS_FLOOR = 5  # the card's rule: never fewer seeds, whatever the power calculation says

Summaries = dict[str, list[dict[str, Any]]]  # arm -> one summary per seed


def _curve_mean(rows: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in rows if key in r]
    return float(np.mean(values)) if values else NAN


def summarize(runs: list[Run]) -> Summaries:
    """arm -> the numbers of each finished seed (`final_d` / `initial_d`: mean@k at delay D)."""
    out: Summaries = {}
    for run in runs:
        if run.arm not in ARMS or run.env != CLASSIC:
            continue
        ev, rows = run.evals, run.metrics
        final, initial = ev["final"], ev.get("initial", {})
        probe = final.get("variants", {}).get("probe", {})
        summary = {
            "seed": run.seed, "initial": initial.get("mean@k", NAN), "final": final["mean@k"],
            "probe": probe.get("mean@k", NAN),
            "probe_initial": initial.get("variants", {}).get("probe", {}).get("mean@k", NAN),
            "trap_final": final["metrics"].get("trap_use", NAN), "trap_auc": _curve_mean(rows, "trap_use"),
            "redundant_final": final["metrics"].get("redundant_lookup", NAN),
            "redundant_auc": _curve_mean(rows, "redundant_lookup"),
        }
        for d, tier in final.get("per_tier", {}).items():
            summary[f"final_{d}"] = tier["mean@k"]
            summary[f"initial_{d}"] = initial.get("per_tier", {}).get(d, {}).get("mean@k", NAN)
        out.setdefault(run.arm, []).append(summary)
    return out


def delays(runs: Summaries) -> list[int]:
    return sorted({int(k.split("_", 1)[1])
                   for rs in runs.values() for r in rs for k in r if k.startswith("final_")})


def verdict(iv: Interval, n: int, sd: float, margin: float = MARGIN) -> str:
    """The card's four verdicts for a seed-paired difference (`paper.claims.table_verdict`, the card's
    seed floor), inconclusive whenever fewer than the seeds its power calculation needs."""
    return table_verdict(iv, n, sd, margin, SEEDS_FLOOR)


def _by_seed(runs: Summaries, arm: str, d: int) -> dict[int, float]:
    return {r["seed"]: r.get(f"final_{d}", NAN) for r in runs.get(arm, [])}


def gap(runs: Summaries, d: int, arm: str = "iapo", base: str = "grpo") -> tuple[Interval, int, float]:
    """`arm` - `base` on final mean@k at delay d, paired by seed: (t interval, pairs, SD of the
    differences)."""
    x, y = _by_seed(runs, arm, d), _by_seed(runs, base, d)
    return paired_difference([x[s] - y[s] for s in sorted(set(x) & set(y))])


def gap_growth(runs: Summaries, d_lo: int, d_hi: int) -> tuple[Interval, int, float]:
    """(IAPO - GRPO at d_hi) - (IAPO - GRPO at d_lo), per seed present in both arms."""
    cells = [_by_seed(runs, arm, d)
             for arm, d in (("iapo", d_hi), ("grpo", d_hi), ("iapo", d_lo), ("grpo", d_lo))]
    seeds = sorted(set.intersection(*(set(c) for c in cells)))
    return paired_difference([(cells[0][s] - cells[1][s]) - (cells[2][s] - cells[3][s]) for s in seeds])


def behaviour_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    ds = delays(summaries)
    rows = []
    for arm in [a for a in ARMS if a in summaries]:
        rs = summaries[arm]

        def iv(key: str, rs: list[dict[str, Any]] = rs) -> str:
            m, lo, hi = mean_ci([r.get(key, NAN) for r in rs], **CI)
            if m != m:
                return "—"
            return f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if lo == lo else f"{m:.3f} (no CI)"

        rows.append([arm, str(len(rs)), iv("initial"), iv("final"), *[iv(f"final_{d}") for d in ds],
                     iv("probe_initial"), iv("probe"), iv("trap_final"), iv("trap_auc"),
                     iv("redundant_final"), iv("redundant_auc")])
    headers = ["arm", "seeds", "mean@k warm start", "mean@k after RL",
               *[f"mean@k after RL, D={d}" for d in ds],
               "probe accuracy, warm start", "probe accuracy after RL", "trap use after RL",
               "trap use, mean over steps", "redundant lookup after RL", "redundant lookup, mean over steps"]
    return Table("iapo-behaviour", "IAPO per arm: held-out success (overall and per delay D), probe accuracy "
                 "(single-turn tool calls), trap use and redundant lookups (episode rates), mean over seeds "
                 "[95% t CI]", headers, rows)


def gap_growth_table(runs: list[Run]) -> Table:
    summaries = summarize(runs)
    ds = delays(summaries)
    rows = []
    for d in ds:
        for arm, base in (("iapo", "grpo"), ("shuffled", "grpo"), ("iapo", "shuffled")):
            iv, n, sd = gap(summaries, d, arm, base)
            rows.append([f"{arm} - {base} at D={d}", fmt_ci(iv, signed=True) + f", {n} pairs",
                         verdict(iv, n, sd)])
    if len(ds) >= 2:
        iv, n, sd = gap_growth(summaries, ds[0], ds[-1])
        rows.append([f"gap at D={ds[-1]} minus gap at D={ds[0]} (the gap grows with D)",
                     fmt_ci(iv, signed=True) + f", {n} pairs", verdict(iv, n, sd)])
    return Table("iapo-gap-growth", "IAPO: does the IAPO - GRPO gap on held-out mean@k grow with D, and does "
                 "the shuffled graph lose it? (paired by seed, 95% t CI; margin 0.05; verdicts as in "
                 "paper/claims.py)",
                 ["effect", "estimate", "verdict"], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"behaviour": behaviour_table, "gap-growth": gap_growth_table,
                                       "speed": speed_table, "share": share_table}
