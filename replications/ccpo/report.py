"""The CCPO replication's table: per arm, held-out team accuracy, the Thinker's help and hurt rates,
the accuracy drop when its message is emptied, and its message mix, at the warm start and after RL
(mean over seeds with a 95% bootstrap interval). `make replicate-ccpo` prints it and writes
results/ccpo/report-<scale>.md.

    python -m replications.ccpo.report [--results results] [--scale cpu]
"""

from __future__ import annotations

import json
from pathlib import Path

from common.stats import mean_ci
from replications.report_cli import report_main

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
                cells.append(f"{mean:.3f} [{low:.3f}, {high:.3f}]" if low == low else f"{mean:.3f}")  # one seed: no interval
            lines.append(f"| {arm_dir.name} | {stage} | {len(evals)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def build(results: Path, scale: str) -> str:
    root = results / "ccpo" / "thinker_solver"
    if not root.is_dir():
        raise SystemExit(f"no CCPO results under {root}")
    return f"## CCPO ({scale} scale): the Thinker's contribution per arm, mean [95% bootstrap CI] over seeds\n\n{table(root)}\n"


def main(argv: list[str] | None = None) -> int:
    return report_main(argv, "replications.ccpo.report", __doc__, build)

if __name__ == "__main__":
    raise SystemExit(main())
