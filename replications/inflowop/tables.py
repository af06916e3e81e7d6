"""InFlowOp's own tables (read by paper/, see paper/extras.py): what the card's claims cannot show.

- `workflow`: per arm, held-out accuracy, latency, repair cost (latency and calls spent on
  repairs or re-runs), broken contracts, faults by kind, how merged the plans were and how often
  an on-demand specialist was created; mean over seeds [95% t CI] for accuracy.
- `domains`: per domain (braid's tiers) and arm, accuracy / latency / repair latency, mean over seeds.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from common.stats import mean_ci
from envs.testbeds.braid import DOMAINS
from paper.extras import ExtraTable
from paper.load import Run
from paper.tables import CI, Table

ARMS = ("single", "template", "rerun-all", "greedy", "no-repair", "no-profile", "inflowop")


def _by_arm(runs: list[Run]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        out.setdefault(run.arm, []).append(run.evals["final"])
    return {arm: out[arm]
            for arm in sorted(out, key=lambda a: (ARMS.index(a) if a in ARMS else len(ARMS), a))}


def _mean(finals: list[dict[str, Any]], key: str) -> float:
    values = [f["metrics"][key] for f in finals if key in f.get("metrics", {})]
    return float(np.mean(values)) if values else float("nan")


def workflow_table(runs: list[Run]) -> Table:
    rows = []
    for arm, finals in _by_arm(runs).items():
        m, lo, hi = mean_ci([f["mean@k"] for f in finals], **CI)
        acc = f"{m:.3f} [{lo:.3f}, {hi:.3f}]" if lo == lo else f"{m:.3f}"
        rows.append([arm, str(len(finals)), acc, *(f"{_mean(finals, k):.2f}" for k in
                     ("latency", "repair_latency", "calls", "repair_calls", "violations", "faults_assignment",
                      "faults_decomposition", "merged_share", "created_share"))])
    headers = ["arm", "seeds", "accuracy", "latency (s)", "repair latency (s)", "calls", "repair calls",
               "broken contracts", "assignment faults", "decomposition faults", "merged share",
               "created share"]
    return Table("inflowop-workflow", "InFlowOp per arm on held-out braid tasks: accuracy (mean over seeds "
                 "[95% t CI]), then per task: simulated latency, what repairs cost, broken contracts, faults "
                 "by kind, share of merged subtasks and of on-demand specialists in the final plans",
                 headers, rows)


def domains_table(runs: list[Run]) -> Table:
    by_arm = _by_arm(runs)
    rows = []
    for name, _, _ in DOMAINS:
        cells = []
        for finals in by_arm.values():
            acc, lat, rep = (_mean(finals, f"{k}_{name}") for k in ("success", "latency", "repair_latency"))
            cells.append(f"{acc:.3f} / {lat:.1f} / {rep:.1f}")
        rows.append([name, *cells])
    return Table("inflowop-domains", "InFlowOp per domain and arm: accuracy / latency (s) / repair latency "
                 "(s) per task, mean over seeds", ["domain", *by_arm], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"workflow": workflow_table, "domains": domains_table}
