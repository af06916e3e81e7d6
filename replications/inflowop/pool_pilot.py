"""The dev pilot of the pool setting (issue #42), before any held-out pool run.

    python -m replications.inflowop.pool_pilot     # writes results/inflowop/pools-dev-pilot.json

Plays braid's dev split (128 tasks) with pools drawn from the declared prior (conf/pool/prior.yaml)
whose ids (1000 + ...) are disjoint from the held-out runs' (0-99): seeds 100, 101, ... of
`pool_play.play_pools`, 10 pools each. The rule for the one setting it fixes, written before it ran:

1. explore (kappa of the optimistic reliability) over {0, 0.5, 1}: the highest mean dev accuracy of
   the full arm (`inflowop`); points within 0.005 of the best are tied and the lowest mean latency
   wins (then the smallest kappa).

It also records every pool arm's dev accuracy and latency (means over pools) and, per claim pair,
the mean and standard deviation of the per-seed (10-pool block) and per-pool differences (the
CARD's power calculation).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import yaml

from common.episode import tasks_of
from replications.inflowop.method import InFlowOpConfig
from replications.inflowop.pool_play import play_pools
from replications.inflowop.tune import env_from_conf
from replications.inflowop.workflow import Arm

KAPPAS = (0.0, 0.5, 1.0)
TIE = 0.005
ARMS = ("single", "single-retry", "template", "greedy", "no-repair", "no-profile", "inflowop")
PAIRS = (("inflowop", "single-retry"), ("inflowop", "greedy"), ("inflowop", "no-repair"),
         ("inflowop", "no-profile"), ("inflowop", "template"))
PRIOR_FILE = Path(__file__).resolve().parent / "conf/pool/prior.yaml"


def per_pool(cfg: InFlowOpConfig, seeds: list[int]) -> list[dict[str, float]]:
    """Accuracy and latency of every pool of `seeds` on the dev split."""
    env = env_from_conf()
    dev = tasks_of(env.task_set()["dev"])
    out = []
    for seed in seeds:
        groups = play_pools(env, cfg, seed, dev)
        for j in range(cfg.pools):
            out.append({"success": statistics.fmean(float(g.episodes[j].success) for g in groups),
                        "latency": statistics.fmean(g.episodes[j].info["latency"] for g in groups)})
    return out


def pilot(seeds: list[int]) -> dict[str, Any]:
    method = yaml.safe_load(PRIOR_FILE.read_text())["method"]
    base = replace(InFlowOpConfig(), pools=int(method["pools"]), pool_prior=method["pool_prior"])
    grid = []
    for kappa in KAPPAS:
        rows = per_pool(replace(base, explore=kappa), seeds)
        grid.append({"explore": kappa, "accuracy": statistics.fmean(r["success"] for r in rows),
                     "latency": statistics.fmean(r["latency"] for r in rows)})
    top = max(g["accuracy"] for g in grid)
    chosen = min((g for g in grid if g["accuracy"] >= top - TIE), key=lambda g: (g["latency"], g["explore"]))
    tuned = replace(base, explore=chosen["explore"])
    arms = {arm: per_pool(replace(tuned, arm=cast(Arm, arm)), seeds) for arm in ARMS}
    diffs: dict[str, Any] = {}
    for a, b in PAIRS:
        d = [x["success"] - y["success"] for x, y in zip(arms[a], arms[b], strict=True)]
        blocks = [statistics.fmean(d[i:i + base.pools]) for i in range(0, len(d), base.pools)]
        diffs[f"{a} - {b}"] = {"mean": statistics.fmean(d), "sd_pool": statistics.stdev(d),
                               "sd_block": statistics.stdev(blocks) if len(blocks) > 1 else None,
                               "share_positive": sum(x > 0 for x in d) / len(d)}
    return {"rule": __doc__.split("written before it ran:")[1].split("It also records")[0].strip(),
            "seeds": seeds, "pools": len(seeds) * base.pools, "dev_tasks": 128, "grid": grid,
            "chosen": {"explore": tuned.explore},
            "arms": {arm: {k: statistics.fmean(r[k] for r in rows) for k in ("success", "latency")}
                     for arm, rows in arms.items()},
            "paired_differences": diffs}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--out", default="results/inflowop/pools-dev-pilot.json")
    args = p.parse_args()
    result = pilot(list(range(100, 100 + args.seeds)))  # pool ids 1000..: never the held-out runs' 0..99
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("grid", "chosen", "arms", "paired_differences")}, indent=1))


if __name__ == "__main__":
    main()
