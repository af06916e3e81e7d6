"""GRPO's own table (read by paper/, see paper/extras.py): how much of its gain is mode selection.

On `arith` the warm start has two habits, working step by step (reliable) and jumping to the answer
(not), and GRPO's held-out gain comes with the share of answers that show their working going to
1 (`metrics/worked`). The two supervised arms of the same budget say how much of the gain other
updates reach: `online-rft` (supervised on the policy's own successes) and `clean-sft` (supervised
on the demonstrator that always works). Per arm: final mean@k and worked share; the gain over the
warm start, paired by seed with the `grpo` arm's warm-start evaluation of the same seed (every arm
of a seed starts from that one warm start); GRPO's final minus the arm's, paired by seed, with the
verdict at the margin of the card's claim against that arm; and the arm's gain as a share of
GRPO's (ratio of the mean gains).
"""

from __future__ import annotations

import numpy as np

from common.stats import NAN
from paper.claims import paired_difference, table_verdict
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import Table, fmt_ci

ARMS = ("grpo", "online-rft", "clean-sft")
MARGINS = {"online-rft": 0.05, "clean-sft": 0.05}  # the card's rl-beats-online-rft and rl-beats-clean-sft


def _value(run: Run, stage: str, key: str) -> float:
    result = run.evals.get(stage) or {}
    value = result.get("metrics", {}).get(key) if key == "worked" else result.get(key)
    return NAN if value is None else float(value)


def mode_selection_table(runs: list[Run]) -> Table:
    by_arm: dict[str, dict[int, Run]] = {}
    for r in runs:
        if r.env == "arith" and r.arm in ARMS:
            by_arm.setdefault(r.arm, {})[r.seed] = r
    start = by_arm.get("grpo", {})
    rows = []
    if start:
        iv, n, _ = paired_difference([_value(r, "initial", "mean@k") for r in start.values()])
        worked, _, _ = paired_difference([_value(r, "initial", "worked") for r in start.values()])
        rows.append(["warm start", str(n), fmt_ci(iv), fmt_ci(worked), "", "", "", ""])
    grpo_gain = NAN
    for arm in [a for a in ARMS if a in by_arm]:
        rs = by_arm[arm]
        seeds = sorted(set(rs) & set(start))
        final, n, _ = paired_difference([_value(rs[s], "final", "mean@k") for s in sorted(rs)])
        worked, _, _ = paired_difference([_value(rs[s], "final", "worked") for s in sorted(rs)])
        gain, _, _ = paired_difference([_value(rs[s], "final", "mean@k")
                                        - _value(start[s], "initial", "mean@k") for s in seeds])
        if arm == "grpo":
            grpo_gain = gain[0]
            rows.append([arm, str(n), fmt_ci(final), fmt_ci(worked), fmt_ci(gain, signed=True), "", "",
                         "1.00"])
            continue
        both = sorted(set(rs) & set(by_arm.get("grpo", {})))
        diff, pairs, sd = paired_difference([_value(by_arm["grpo"][s], "final", "mean@k")
                                             - _value(rs[s], "final", "mean@k") for s in both])
        share = (gain[0] / grpo_gain if grpo_gain == grpo_gain and grpo_gain > 0 and gain[0] == gain[0]
                 else NAN)
        rows.append([arm, str(n), fmt_ci(final), fmt_ci(worked), fmt_ci(gain, signed=True),
                     fmt_ci(diff, signed=True) + f", {pairs} pairs" if pairs else "—",
                     table_verdict(diff, pairs, sd, MARGINS[arm]) if pairs else "—",
                     "—" if np.isnan(share) else f"{share:.2f}"])
    headers = ["arm", "seeds", "held-out mean@k", "answers showing their working",
               "gain over the warm start (paired)", "grpo - arm (paired)", "verdict (the card's margin)",
               "share of GRPO's gain"]
    return Table("grpo-mode-selection", "GRPO on arith: how much of the gain is mode selection. Final "
                 "held-out mean@k and the share of answers that show their working per arm, mean over seeds "
                 "[95% t CI]; gains paired by seed with the warm start's evaluation (the grpo arm's, one "
                 "warm start per seed); GRPO minus each supervised arm of the same budget (online RFT: "
                 "supervised on its own successes; clean SFT: on demonstrations that always work), with the "
                 "verdict at the margin of the card's claim", headers, rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"mode-selection": mode_selection_table}
