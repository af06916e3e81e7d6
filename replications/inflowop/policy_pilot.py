"""The dev-split pilot of InFlowOp's policy agents (issue #22): never the held-out split.

    python -m replications.inflowop.policy_pilot     # writes results/inflowop/policy-agents-dev.json

Runs, on braid's dev split (`eval.split=dev`) at the cpu scale, with the dev seeds of tune.py,
- `inflowop` with the scripted pool (the committed replication's pool) and with `+pool=policy`
  (the scripted pool plus the policy agents of `conf/pool/policy.yaml`);
- `no-profile` with `+pool=policy` (the cards alone: the policy agents' declared categories trusted);
- `single` with each policy agent alone (the whole task in one call: the agent as a single agent),
and records, per cell, the dev accuracy, latency, the share of subtasks the policy agents hold in
the plans before the run (`policy_share_planned`) and after its repairs (`policy_share`), and the
policy agents' measured competence per category (the same in every cell: one cached warm start per
agent). Wall times are measured on whatever machine runs it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AGENTS = ("lora-list", "lora-num", "lora-text+cipher")  # conf/pool/policy.yaml's policy_agents
# cell -> its overrides (the first names the arm); each cell has its own out_dir
CELLS: dict[str, list[str]] = {
    "inflowop-scripted": ["arm=inflowop"],
    "inflowop-policy": ["arm=inflowop", "+pool=policy"],
    "no-profile-policy": ["arm=no-profile", "+pool=policy"],
    **{f"single-{a}": ["arm=single", "+pool=policy", f"method.single_agent={a}"] for a in AGENTS},
}
KEYS = ("success", "latency", "repair_latency", "calls", "repair_calls", "policy_share",
        "policy_share_planned")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[100, 101, 102])  # tune.py's dev seeds
    p.add_argument("--out-dir", default="runs/inflowop-policy-pilot")
    p.add_argument("--work-dir", default="work")
    p.add_argument("--cells", nargs="+", default=list(CELLS))
    p.add_argument("--out", default="results/inflowop/policy-agents-dev.json")
    args = p.parse_args()
    rows = []
    for cell in args.cells:
        for seed in args.seeds:
            start = time.perf_counter()
            cmd = [sys.executable, "-m", "experiments.run", "method=inflowop", "scale=cpu", "eval.split=dev",
                   f"seed={seed}", f"out_dir={args.out_dir}/{cell}", f"work_dir={args.work_dir}",
                   "progress=false", "trainer.threads=1", *CELLS[cell]]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"{cell} seed {seed} failed:\n{proc.stderr[-3000:]}")
            arm = CELLS[cell][0].split("=", 1)[1]
            final = json.loads((ROOT / args.out_dir / cell / "inflowop" / "braid" / arm / f"seed-{seed}"
                                / "eval.json").read_text())["final"]
            m = final["metrics"]
            rows.append({"cell": cell, "seed": seed, "wall_s": round(time.perf_counter() - start, 1),
                         "accuracy": final.get("mean@k", m.get("success")),
                         **{k: m[k] for k in KEYS if k in m},
                         "competence": {k[len("competence_"):]: v for k, v in m.items()
                                        if k.startswith("competence_")}})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "competence"}), flush=True)
    summary = {}
    for cell in args.cells:
        mine = [r for r in rows if r["cell"] == cell]
        summary[cell] = {k: sum(r[k] for r in mine) / len(mine)
                         for k in ("accuracy", *KEYS) if all(k in r for r in mine)}
    competence: dict[str, float] = next((r["competence"] for r in rows if r["competence"]), {})
    result = {"split": "dev", "seeds": args.seeds, "cells": {c: CELLS[c] for c in args.cells},
              "summary": summary, "competence_dev": competence, "runs": rows,
              "note": "wall_s: one process per cell (start-up, adapters loaded from the cache after the "
                      "first cell, competence measured, warm-up, dev play), measured on the machine that "
                      "ran it"}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"summary": summary, "competence_dev": competence}, indent=1))


if __name__ == "__main__":
    main()
