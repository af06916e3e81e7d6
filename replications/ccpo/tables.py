"""CCPO's own table (read by paper/, see paper/extras.py): what the Thinker's message does for the
Solver, per arm, at the warm start and after RL, mean over seeds [95% t CI].

Help, hurt and contribution come from the `paired` eval variant (the Solver answers alone, then
with the Thinker's message, on the same task): help = P(joint right and solo wrong), hurt =
P(joint wrong and solo right), contribution = joint - solo accuracy. "drop (emptied)" is mean@k
minus mean@k of the `empty_guidance` variant (the message replaced by an empty one). The message
mix is the share of messages that state the right answer, say nothing, or state a wrong one.

The compute table: per arm, the training steps and what the run generated, per play tag (`main`:
the trained joint plays; `solo`: CCPO's counterfactual Solver-alone plays), in tokens and model
calls (one call = one sampled action), from the last training step's cumulative counters.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import groupby
from typing import Any

from common.stats import mean_ci
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table, fmt_ci

COLUMNS: dict[str, Callable[[dict[str, Any]], float]] = {
    "accuracy": lambda r: r["mean@k"],
    "help": lambda r: r["variants"]["paired"]["metrics"]["help"],
    "hurt": lambda r: r["variants"]["paired"]["metrics"]["hurt"],
    "drop (emptied)": lambda r: r["mean@k"] - r["variants"]["empty_guidance"]["mean@k"],
    "contribution (paired)": lambda r: r["variants"]["paired"]["metrics"]["contribution"],
    "msg help": lambda r: r["metrics"]["msg_help"],
    "msg silent": lambda r: r["metrics"]["msg_silent"],
    "msg wrong": lambda r: r["metrics"]["msg_wrong"],
}
STAGES = {"initial": "warm start", "final": "after RL"}


def thinker_table(runs: list[Run]) -> Table:
    """Per env, arm and stage: accuracy, the Thinker's help and hurt rates, the drop when its
    message is emptied, its paired contribution and its message mix."""
    rows = []
    for (env, arm), group in groupby(runs, key=lambda r: (r.env, r.arm)):
        arm_runs = list(group)
        for stage, label in STAGES.items():
            evals = [r.evals[stage] for r in arm_runs if stage in r.evals]
            if evals:
                rows.append([env, arm, label, str(len(evals)),
                             *(fmt_ci(mean_ci([column(e) for e in evals], **CI))
                               for column in COLUMNS.values())])
    return Table("ccpo-thinker", "CCPO: the Thinker's contribution per arm, held-out, mean over seeds "
                 "[95% t CI] (help, hurt, contribution: the paired variant; drop: mean@k minus "
                 "mean@k with the message emptied)", ["env", "arm", "stage", "seeds", *COLUMNS], rows)


COMPUTE = ("generated_tokens_total", "generated_tokens_total/main", "generated_tokens_total/solo",
           "model_calls_total", "model_calls_total/main", "model_calls_total/solo")


def compute_table(runs: list[Run]) -> Table:
    """Per env and arm: steps, and generated tokens and model calls in total and per play tag
    (mean over seeds; training only, evaluation not counted)."""
    rows = []
    for (env, arm), group in groupby(runs, key=lambda r: (r.env, r.arm)):
        last = [r.metrics[-1] for r in group if r.metrics]
        if last:
            steps = sorted({int(m["step"]) + 1 for m in last})
            rows.append([env, arm, str(len(last)), "/".join(map(str, steps)),
                         *(f"{sum(m.get(k, 0) for m in last) / len(last):,.0f}" for k in COMPUTE)])
    return Table("ccpo-compute", "CCPO: training compute per arm, mean over seeds (tokens generated and "
                 "model calls; main: the trained joint plays, solo: the Solver-alone counterfactual plays)",
                 ["env", "arm", "seeds", "steps", "tokens", "tokens main", "tokens solo", "calls",
                  "calls main", "calls solo"], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"thinker": thinker_table, "compute": compute_table}
