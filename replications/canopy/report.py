"""CANOPY's replication report from its run records (`make replicate-canopy` prints it last).

    python -m replications.canopy.report [--results results] [--scale cpu]

Reads `results/canopy/<env>/<arm>/seed-*/` (finished runs only) and writes
`results/canopy/report-<scale>.md`. Per arm, mean [95% bootstrap CI] over seeds:

- held-out mean@k and best@k (pass@k: a task counts when one of its k episodes succeeds), overall
  and on the hardest tier;
- the policy's entropy over training, as a text curve (mean over seeds at five points), and the
  KL to the base over the last steps: the paper's drift claim is that without the KL anchor the
  entropy collapses;
- the share of groups that carried signal, measured and as P_sig predicts at the measured success
  rates, and the group size the pilot chose;

then the arms ranked by mean@k next to the paper's ranking of the same ablations (mean@4 on
AppWorld Test-Normal).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from common.stats import mean_ci
from replications.canopy.method import signal_check
from replications.report_cli import report_main

# The paper's ablations (mean@4, AppWorld Test-Normal) [P], by the arm names of replication.yaml.
PAPER_MEAN4 = {"full": 79.5, "seq-mean": 74.1, "no-hardest": 73.5, "no-kl": 72.5, "n-small": 63.1, "two-updates": 62.1}
ARM_ORDER = ("full", "n-small", "two-updates", "no-kl", "seq-mean", "no-hardest")
LAST = 5  # steps averaged for "at the end" numbers


def load(results: Path, method: str = "canopy") -> dict[tuple[str, str], list[dict[str, Any]]]:
    """(env, arm) -> [{"eval": eval.json, "metrics": [rows]}] over finished seeds."""
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for seed_dir in sorted((results / method).glob("*/*/seed-*")):
        if not (seed_dir / "done").exists():
            continue
        rows = [json.loads(line) for line in (seed_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
        env, arm = seed_dir.parent.parent.name, seed_dir.parent.name
        runs.setdefault((env, arm), []).append({"eval": json.loads((seed_dir / "eval.json").read_text()), "metrics": rows})
    return runs


def fmt(values: list[float], scale: float = 1.0, digits: int = 3) -> str:
    if not values:
        return "-"
    m, lo, hi = mean_ci([v * scale for v in values])
    return f"{m:.{digits}f}" if math.isnan(lo) else f"{m:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def curve(runs: list[dict[str, Any]], key: str, points: int = 5) -> str:
    """The mean over seeds of `key` at `points` evenly spaced steps (steps every seed has)."""
    length = min(len(r["metrics"]) for r in runs)
    if length == 0:
        return "-"
    idx = sorted({round(i * (length - 1) / (points - 1)) for i in range(points)})
    means = [np.mean([r["metrics"][i].get(key, np.nan) for r in runs]) for i in idx]
    return " → ".join(f"{m:.3f}" for m in means) + f" (steps {idx[0]}..{idx[-1]})"


def signal(runs: list[dict[str, Any]], tier: str | None = None) -> tuple[float, float, float]:
    """(measured share, P_sig's prediction, groups) over every seed (`signal_check` per run, pooled),
    over all tiers or one (`tier`, e.g. "tier3")."""
    def keep(row: dict[str, Any]) -> dict[str, Any]:
        return row if tier is None else {k: v for k, v in row.items() if k.endswith(f"/{tier}")}

    checks = [signal_check([keep(row) for row in r["metrics"]]) for r in runs]
    groups = sum(c["groups"] for c in checks)
    if not groups:
        return math.nan, math.nan, 0.0
    return (sum(c["measured"] * c["groups"] for c in checks if c["groups"]) / groups,
            sum(c["predicted"] * c["groups"] for c in checks if c["groups"]) / groups, groups)


def shares(measured: float, expected: float, groups: float) -> str:
    return f"{measured:.3f} / {expected:.3f} ({groups:.0f} groups)" if groups else "- (no groups)"


def report(results: Path, scale: str, method: str = "canopy") -> str:
    runs = load(results, method)
    if not runs:
        return f"## {method} ({scale}): no finished runs under {results}/{method}\n"
    lines = [f"## CANOPY's ablations ({scale} scale): mean [95% bootstrap CI] over seeds\n",
             "| env | arm | seeds | paper mean@4 | mean@k | best@k | hardest tier mean@k | entropy, last steps | "
             "KL to base, last steps | groups with signal: measured / P_sig, all tiers; hardest tier | group size "
             "(pilot p̂) | tokens generated in training |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    arms = sorted(runs, key=lambda ea: (ea[0], ARM_ORDER.index(ea[1]) if ea[1] in ARM_ORDER else len(ARM_ORDER), ea[1]))
    ranking: dict[str, list[tuple[str, float]]] = {}
    entropy_rows = []
    for env, arm in arms:
        rs = runs[(env, arm)]
        final = [r["eval"]["final"] for r in rs]
        hardest = max(final[0]["per_tier"], key=int)
        tail = [r["metrics"][-LAST:] for r in rs]
        ent = [float(np.mean([row["entropy"] for row in t])) for t in tail if t]
        kl = [float(np.mean([row.get("kl", 0.0) for row in t])) for t in tail if t]
        measured, expected, groups = signal(rs)
        hard_measured, hard_expected, hard_groups = signal(rs, f"tier{hardest}")
        tokens = [r["metrics"][-1].get("generated_tokens_total/main", 0) for r in rs if r["metrics"]]
        n = sorted({int(r["metrics"][0]["group_size"]) for r in rs if r["metrics"]})
        pilot = [r["metrics"][0].get("pilot_success") for r in rs if r["metrics"] and "pilot_success" in r["metrics"][0]]
        size = ", ".join(map(str, n)) + (f" ({np.mean(pilot):.3f})" if pilot else " (fixed)")
        paper = f"{PAPER_MEAN4[arm]:.1f}" if arm in PAPER_MEAN4 else "-"
        lines.append(f"| {env} | {arm} | {len(rs)} | {paper} | {fmt([f['mean@k'] for f in final])} | "
                     f"{fmt([f['pass@k'] for f in final])} | {fmt([f['per_tier'][hardest]['mean@k'] for f in final])} | "
                     f"{fmt(ent)} | {fmt(kl, digits=4)} | {shares(measured, expected, groups)}; "
                     f"{shares(hard_measured, hard_expected, hard_groups)} | {size} | {np.mean(tokens):,.0f} |")
        ranking.setdefault(env, []).append((arm, float(np.mean([f["mean@k"] for f in final]))))
        entropy_rows.append(f"| {env} | {arm} | {curve(rs, 'entropy')} | {curve(rs, 'success_rate')} |")
    warm = [r["eval"]["initial"] for (env, arm) in arms for r in runs[(env, arm)] if "initial" in r["eval"]]
    if warm:
        lines.append(f"\nWarm start (SFT, every arm's starting point): mean@k {fmt([w['mean@k'] for w in warm])}, "
                     f"best@k {fmt([w['pass@k'] for w in warm])} over {len(warm)} evaluations "
                     f"(paper's base model: mean@4 32.4, best@4 58.9).")
    lines += ["\n### Entropy and training success over training (mean over seeds)\n",
              "| env | arm | policy entropy per action token | training success rate |", "|---|---|---|---|", *entropy_rows]
    lines += ["\n### Ablation ordering by mean@k, ours next to the paper's\n", "| env | ours | paper (mean@4) |", "|---|---|---|"]
    for env, ranked in ranking.items():
        ours = " > ".join(f"{arm} ({m:.3f})" for arm, m in sorted(ranked, key=lambda am: -am[1]))
        paper = " > ".join(f"{arm} ({PAPER_MEAN4[arm]:.1f})" for arm in sorted((a for a, _ in ranked if a in PAPER_MEAN4),
                                                                              key=lambda a: -PAPER_MEAN4[a]))
        lines.append(f"| {env} | {ours} | {paper} |")
    lines.append("\nThe claims these numbers are checked against, with intervals on the differences, are in "
                 "replications/canopy/CARD.md and paper/REPORT.md (`make paper`).")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, "replications.canopy.report", __doc__, report)

if __name__ == "__main__":
    raise SystemExit(main())
