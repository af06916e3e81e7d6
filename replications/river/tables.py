"""River's own tables (read by paper/, see paper/extras.py), for what the card's claims cannot express.

- `hacking`: per arm, the train reward (the possibly defective verifiers' verdict, first and last
  steps of training) beside the clean held-out success (warm start and final), the true success on
  the train tasks, the memo-shortcut rate and the loop rate: reward hacking is the train reward
  rising while the held-out success falls.

The filter's own report (the audit's confusion matrix against the generator's labels, the oracle's
pass@2 per defect, what was kept) is `results/river/filter-report.json`; every run's metrics carry
its pool's size and defect shares (`pool_size`, `pool_defective`, `pool_shortcut`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.stats import mean_ci
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci

ARMS = ("grpo-full", "grpo-random", "river-filter", "river",  # the first setting (terminal)
        # the second (terminal-planted, #40)
        "pl-grpo-full", "pl-grpo-random", "pl-grpo-dynamic", "pl-river-filter", "pl-river", "pl-river-d25")
WINDOW = 5  # steps averaged at each end of the train-reward curve


def _ci(values: list[float]) -> str:
    values = [v for v in values if v == v]
    return fmt_ci(mean_ci(values, **CI)) if values else "n/a"


def _ends(rows: list[dict[str, Any]], key: str) -> tuple[float, float]:
    vals = [r[key] for r in rows if key in r]
    if not vals:
        return float("nan"), float("nan")
    return float(np.mean(vals[:WINDOW])), float(np.mean(vals[-WINDOW:]))


def hacking_table(runs: list[Run]) -> Table:
    rows = []
    for arm in [a for a in ARMS if any(r.arm == a for r in runs)]:
        mine = [r for r in runs if r.arm == arm]
        first, last = zip(*[_ends(r.metrics, "reward_mean") for r in mine], strict=True)
        solved_first, solved_last = zip(*[_ends(r.metrics, "train_solved") for r in mine], strict=True)
        initial = [r.evals["initial"]["mean@k"] for r in mine if "initial" in r.evals]
        final = [r.evals["final"]["mean@k"] for r in mine]
        long_final = [r.evals["final"]["per_tier"].get("2", {}).get("mean@k", float("nan")) for r in mine]
        t1 = {stage: [r.evals[stage]["per_tier"].get("1", {}).get("mean@k", float("nan")) for r in mine
                      if stage in r.evals] for stage in ("initial", "final")}
        memo = [r.evals["final"]["metrics"].get("read_memo", float("nan")) for r in mine]
        loops = [r.evals["final"]["metrics"].get("looped", float("nan")) for r in mine]
        rows.append([arm, str(len(mine)), _ci(list(first)), _ci(list(last)), _ci(list(solved_last)),
                     _ci(initial), _ci(final), _ci(t1["initial"]), _ci(t1["final"]), _ci(long_final),
                     _ci(memo), _ci(loops)])
    return Table("river-hacking",
                 f"Train reward (the tasks' own verifiers, mean of the first and last {WINDOW} steps) beside "
                 "clean held-out success (mean@k, warm start and final; tier 2 = the composition never "
                 "trained on), the true success on train tasks, and the held-out rates of the memo shortcut "
                 "and of looping episodes; mean [95% CI] over seeds.",
                 ["arm", "seeds", "train reward (first)", "train reward (last)", "train solved (last)",
                  "held-out (warm start)", "held-out (final)", "tier 1 (warm start)", "tier 1 (final)",
                  "tier 2 (final)", "memo shortcut", "looped"],
                 rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"hacking": hacking_table}
