"""CANOPY's own tables (read by paper/, see paper/extras.py), mean over seeds [95% t CI]:

- `ablations`: per arm, held-out mean@k next to the paper's mean@4 for the same ablation; the
  policy's entropy and its KL to the base over the last steps (the drift claim: without the KL
  anchor the entropy collapses); the share of groups that carried signal, measured and as P_sig
  predicts at the measured success rates (all tiers; hardest tier); the group size the pilot chose;
  the tokens generated in training;
- `training`: entropy and training success rate over training, at five points;
- `ordering`: the arms ranked by held-out mean@k, next to the paper's ranking of the same ablations
  (mean@4 on AppWorld Test-Normal).
"""

from __future__ import annotations

import math
from itertools import groupby

import numpy as np

from common.stats import mean_ci
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci
from replications.canopy.signal import signal_check

# The paper's ablations (mean@4, AppWorld Test-Normal) [P], by the arm names of replication.yaml.
PAPER_MEAN4 = {"full": 79.5, "seq-mean": 74.1, "no-hardest": 73.5, "no-kl": 72.5, "n-small": 63.1,
               "two-updates": 62.1}
ARM_ORDER = ("full", "n-small", "two-updates", "no-kl", "seq-mean", "no-hardest")
LAST = 5  # steps averaged for "at the end" numbers


def by_arm(runs: list[Run]) -> list[tuple[str, str, list[Run]]]:
    """(env, arm, runs) in the order of the paper's ablation list, then any other arm."""
    def order(r: Run) -> tuple[str, int, str]:
        return r.env, ARM_ORDER.index(r.arm) if r.arm in ARM_ORDER else len(ARM_ORDER), r.arm

    return [(env, arm, list(g)) for (env, _, arm), g in groupby(sorted(runs, key=order), key=order)]


def ci(values: list[float], digits: int = 3) -> str:
    if not values:
        return "—"
    m, lo, hi = mean_ci(values, **CI)
    return f"{m:.{digits}f}" if math.isnan(lo) else f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def signal(runs: list[Run], tier: str | None = None) -> str:
    """Measured share / P_sig's prediction (groups), pooled over every seed (`signal_check` per run),
    over all tiers or one (`tier`, e.g. "tier3")."""
    def keep(row: dict[str, float]) -> dict[str, float]:
        return row if tier is None else {k: v for k, v in row.items() if k.endswith(f"/{tier}")}

    checks = [signal_check([keep(row) for row in r.metrics]) for r in runs]
    groups = sum(c["groups"] for c in checks)
    if not groups:
        return "— (no groups)"
    measured = sum(c["measured"] * c["groups"] for c in checks if c["groups"]) / groups
    predicted = sum(c["predicted"] * c["groups"] for c in checks if c["groups"]) / groups
    return f"{measured:.3f} / {predicted:.3f} ({groups:.0f} groups)"


def ablations_table(runs: list[Run]) -> Table:
    rows = []
    for env, arm, rs in by_arm(runs):
        final = [r.evals["final"] for r in rs]
        hardest = max(final[0].get("per_tier") or {"?": None}, key=lambda t: (len(t), t))
        tails = [r.metrics[-LAST:] for r in rs if r.metrics]
        entropy = [float(np.mean([row["entropy"] for row in t])) for t in tails]
        kl = [float(np.mean([row.get("kl", 0.0) for row in t])) for t in tails]
        sizes = sorted({int(r.metrics[0]["group_size"]) for r in rs if r.metrics})
        pilot = [r.metrics[0]["pilot_success"] for r in rs if r.metrics and "pilot_success" in r.metrics[0]]
        tokens = [r.metrics[-1].get("generated_tokens_total/main", 0) for r in rs if r.metrics]
        rows.append([env, arm, str(len(rs)), f"{PAPER_MEAN4[arm]:.1f}" if arm in PAPER_MEAN4 else "—",
                     fmt_ci(mean_ci([f["mean@k"] for f in final], **CI)), ci(entropy), ci(kl, digits=4),
                     f"{signal(rs)}; {signal(rs, f'tier{hardest}')}",
                     ", ".join(map(str, sizes)) + (f" ({np.mean(pilot):.3f})" if pilot else " (fixed)"),
                     f"{np.mean(tokens):,.0f}" if tokens else "—"])
    headers = ["env", "arm", "seeds", "paper mean@4", "mean@k", f"entropy, last {LAST} steps",
               f"KL to base, last {LAST} steps",
               "groups with signal: measured / P_sig, all tiers; hardest tier",
               "group size (pilot success rate)", "tokens generated in training"]
    return Table("canopy-ablations", "CANOPY's ablations: held-out mean@k next to the paper's mean@4, drift "
                 "and signal starvation, mean over seeds [95% t CI]", headers, rows)


def curve(runs: list[Run], key: str, points: int = 5) -> str:
    """The mean over seeds of `key` at `points` evenly spaced steps (steps every seed has)."""
    length = min(len(r.metrics) for r in runs)
    if length == 0:
        return "—"
    idx = sorted({round(i * (length - 1) / max(1, points - 1)) for i in range(points)})
    means = [np.mean([r.metrics[i].get(key, np.nan) for r in runs]) for i in idx]
    return " → ".join(f"{m:.3f}" for m in means) + f" (steps {idx[0]}..{idx[-1]})"


def training_table(runs: list[Run]) -> Table:
    rows = [[env, arm, curve(rs, "entropy"), curve(rs, "success_rate")] for env, arm, rs in by_arm(runs)]
    return Table("canopy-training",
                 "CANOPY: policy entropy and training success over training (mean over seeds)",
                 ["env", "arm", "policy entropy per action token", "training success rate"], rows)


def ordering_table(runs: list[Run]) -> Table:
    rows = []
    for env, group in groupby(by_arm(runs), key=lambda e: e[0]):
        ranked = sorted(((arm, float(np.mean([r.evals["final"]["mean@k"] for r in rs])))
                         for _, arm, rs in group),
                        key=lambda am: -am[1])
        paper = sorted((a for a, _ in ranked if a in PAPER_MEAN4), key=lambda a: -PAPER_MEAN4[a])
        rows.append([env, " > ".join(f"{arm} ({m:.3f})" for arm, m in ranked),
                     " > ".join(f"{arm} ({PAPER_MEAN4[arm]:.1f})" for arm in paper)])
    return Table("canopy-ordering", "CANOPY: the ablations ranked by held-out mean@k, ours next to the "
                 "paper's (mean@4, AppWorld Test-Normal)", ["env", "ours", "paper (mean@4)"], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"ablations": ablations_table, "training": training_table,
                                       "ordering": ordering_table}
