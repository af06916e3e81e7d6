"""The CCPO replication's table: per arm, held-out team accuracy, the Thinker's help and hurt rates,
the accuracy drop when its message is emptied, and its message mix, at the warm start and after RL
(mean over seeds with a 95% bootstrap interval).

    python -m replications.ccpo.summary [results/ccpo/thinker_solver]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from common.stats import mean_ci

COLUMNS = {
    "accuracy": lambda r: r["mean@k"],
    "help": lambda r: r["variants"]["paired"]["metrics"]["help"],
    "hurt": lambda r: r["variants"]["paired"]["metrics"]["hurt"],
    "drop (emptied)": lambda r: r["mean@k"] - r["variants"]["empty_guidance"]["mean@k"],
    "contribution (paired)": lambda r: r["variants"]["paired"]["metrics"]["contribution"],
    "msg help": lambda r: r["metrics"]["msg_help"],
    "msg silent": lambda r: r["metrics"]["msg_silent"],
    "msg wrong": lambda r: r["metrics"]["msg_wrong"],
}


def table(root: Path) -> str:
    lines = ["| arm | stage | seeds | " + " | ".join(COLUMNS) + " |", "|" + " --- |" * (len(COLUMNS) + 3)]
    for arm_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        evals = [json.loads((d / "eval.json").read_text()) for d in sorted(arm_dir.glob("seed-*")) if (d / "done").exists()]
        for stage in ("initial", "final"):
            cells = []
            for fn in COLUMNS.values():
                mean, low, high = mean_ci([fn(e[stage]) for e in evals])
                cells.append(f"{mean:.3f} [{low:.3f}, {high:.3f}]")
            lines.append(f"| {arm_dir.name} | {stage} | {len(evals)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(table(Path(sys.argv[1] if len(sys.argv) > 1 else "results/ccpo/thinker_solver")))
