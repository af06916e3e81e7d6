"""InFlowOp's own tables (read by paper/, see paper/extras.py): what the card's claims cannot show.

- `workflow`: per arm, held-out accuracy, latency, repair cost (latency and calls spent on
  repairs or re-runs), broken contracts, faults by kind, how merged the plans were and how often
  an on-demand specialist was created; mean over seeds [95% t CI] for accuracy.
- `domains`: per domain (braid's tiers) and arm, accuracy / latency / repair latency, mean over seeds.
  These two read the hand-set pool's runs only (env `braid`).
- `pools-arms`, `pools-claims`, `frontier`: the pools drawn from the prior (env `braid-pools`, issue
  #42): per arm, accuracy over pools; per claim of the CARD, the share of pools where it holds and
  the mean gain over pools with its 95% t interval; the accuracy-latency frontier over beta.
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
HAND_SET, POOLS = "braid", "braid-pools"  # the envs (tags) of the hand-set pool and of the drawn pools
POOL_ARMS = ("pools-single", "pools-single-retry", "pools-template", "pools-greedy", "pools-no-repair",
             "pools-no-profile", "pools-inflowop")
# the CARD's pool claims (id, better arm, worse arm, margin); tests check they match CARD.md
POOL_CLAIMS = (("pools-beats-single-retry", "pools-inflowop", "pools-single-retry", 0.05),
               ("pools-beats-single", "pools-inflowop", "pools-single", 0.05),
               ("pools-coalesce-beats-greedy", "pools-inflowop", "pools-greedy", 0.03),
               ("pools-repair-adds", "pools-inflowop", "pools-no-repair", 0.015),
               ("pools-profiles-add", "pools-inflowop", "pools-no-profile", 0.015),
               ("pools-beats-template", "pools-inflowop", "pools-template", 0.03))
FRONTIER_ARMS = ("pools-inflowop", "pools-greedy")  # their cells also play method.frontier's betas


def _by_arm(runs: list[Run], env: str = HAND_SET) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        if run.env == env:
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


def _ci(values: list[float]) -> str:
    m, lo, hi = mean_ci(values, **CI)
    return f"{m:+.3f} [{lo:+.3f}, {hi:+.3f}]" if lo == lo else (f"{m:+.3f}" if values else "n/a")


def _pool_values(runs: list[Run], key: str = "success") -> dict[str, dict[int, float]]:
    """arm -> pool id -> the pool's mean of `key` (its episodes' `pool<id>_<key>`), for the pool arms."""
    out: dict[str, dict[int, float]] = {}
    for run in runs:
        if run.env != POOLS:
            continue
        for name, value in run.evals["final"].get("metrics", {}).items():
            if name.startswith("pool") and name.endswith(f"_{key}") and name[4:-len(key) - 1].isdigit():
                out.setdefault(run.arm, {})[int(name[4:-len(key) - 1])] = float(value)
    return out


def pools_arms_table(runs: list[Run]) -> Table:
    acc, lat = _pool_values(runs), _pool_values(runs, "latency")
    by_arm = _by_arm(runs, POOLS)
    rows = []
    for arm in sorted(by_arm, key=lambda a: (POOL_ARMS.index(a) if a in POOL_ARMS else len(POOL_ARMS), a)):
        values = list(acc.get(arm, {}).values())
        rows.append([arm, str(len(values)), _ci(values).lstrip("+").replace("[+", "[").replace(", +", ", "),
                     f"{np.mean(list(lat.get(arm, {}).values())):.2f}" if lat.get(arm) else "n/a",
                     *(f"{_mean(by_arm[arm], k):.2f}" for k in
                       ("repair_latency", "calls", "repair_calls", "merged_share", "created_share"))])
    return Table("inflowop-pools-arms", "InFlowOp over agent pools drawn from the prior (env braid-pools): "
                 "per arm, accuracy on 512 held-out tasks per pool, mean over pools [95% t CI over pools]; "
                 "latency (s/task) mean over pools; then per task, mean over cells: repair latency, calls, "
                 "repair calls, "
                 "share of merged subtasks and of on-demand specialists",
                 ["arm", "pools", "accuracy", "latency (s)", "repair latency (s)", "calls", "repair calls",
                  "merged share", "created share"], rows)


def pools_claims_table(runs: list[Run]) -> Table:
    acc = _pool_values(runs)
    rows = []
    for cid, a, b, margin in POOL_CLAIMS:
        common = sorted(set(acc.get(a, {})) & set(acc.get(b, {})))
        gains = [acc[a][p] - acc[b][p] for p in common]
        above = sum(g > 0 for g in gains), sum(g >= margin for g in gains)
        shares = [f"{x / len(gains):.2f}" if gains else "n/a" for x in above]
        rows.append([cid, f"{a} > {b}", f"{margin:g}", str(len(gains)), *shares, _ci(gains)])
    return Table("inflowop-pools-claims", "The CARD's pool claims over pools drawn from the prior, paired by "
                 "pool (same pool, tasks and draws): share of pools where the first arm's accuracy is "
                 "higher, share where it is higher by at least the margin, and the mean gain over pools "
                 "[95% t CI over "
                 "pools]", ["claim", "comparison", "margin", "pools", "share > 0", "share >= margin",
                            "mean gain"], rows)


def frontier_table(runs: list[Run]) -> Table:
    by_arm = _by_arm(runs, POOLS)
    betas = {r.arm: f"{float(r.config.get('method', {}).get('beta', 0.02)):g}"
             for r in runs if r.env == POOLS}
    points: list[tuple[str, str, list[float], float]] = []  # arm, beta, per-cell accuracies, latency
    for arm in POOL_ARMS:
        finals = by_arm.get(arm, [])
        if not finals:
            continue
        points.append((arm, betas[arm] if arm in FRONTIER_ARMS else "-", [f["mean@k"] for f in finals],
                       _mean(finals, "latency")))
        if arm in FRONTIER_ARMS:
            keys = sorted({k[len("frontier_b"):-len("_success")] for f in finals for k in f.get("metrics", {})
                           if k.startswith("frontier_b") and k.endswith("_success")}, key=float)
            for b in keys:
                points.append((arm, b, [f["metrics"][f"frontier_b{b}_success"] for f in finals],
                               _mean(finals, f"frontier_b{b}_latency")))
    rows = []
    for arm, beta, accs, lat in sorted(points, key=lambda p: p[3]):
        m = float(np.mean(accs))
        dominated = any(float(np.mean(o[2])) >= m and o[3] <= lat and (float(np.mean(o[2])) > m or o[3] < lat)
                        for o in points)
        rows.append([arm, beta, _ci(accs).lstrip("+").replace("[+", "[").replace(", +", ", "), f"{lat:.2f}",
                     "no" if dominated else "yes"])
    return Table("inflowop-frontier", "The accuracy-latency frontier over pools drawn from the prior: each "
                 "arm "
                 "(InFlowOp and the greedy split at each beta of eq. C; the single agent, the single agent "
                 "with retry and the template have no beta), accuracy mean over cells of 10 pools [95% t CI "
                 "over cells], latency (s/task); on the frontier: no other point is at least as accurate and "
                 "as fast", ["arm", "beta", "accuracy", "latency (s)", "on the frontier"], rows)


EXTRA_TABLES: dict[str, ExtraTable] = {"workflow": workflow_table, "domains": domains_table,
                                       "pools-arms": pools_arms_table, "pools-claims": pools_claims_table,
                                       "frontier": frontier_table}
