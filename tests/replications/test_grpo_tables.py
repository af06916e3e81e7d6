"""GRPO's mode-selection table against a hand computation (replications/grpo/tables.py)."""

from pathlib import Path

from paper.load import Run
from replications.grpo.tables import mode_selection_table


def _run(arm: str, seed: int, final: float, worked: float, initial: float | None = None) -> Run:
    evals = {"final": {"mean@k": final, "metrics": {"worked": worked}}}
    if initial is not None:
        evals["initial"] = {"mean@k": initial, "metrics": {"worked": 0.7}}
    return Run("grpo", "arith", arm, seed, Path("."), {}, {}, [], evals)


def test_gains_are_paired_with_the_grpo_arms_warm_start_and_shares_are_ratios_of_mean_gains():
    runs = [_run("grpo", 0, 0.8, 1.0, 0.5), _run("grpo", 1, 0.9, 1.0, 0.6),
            _run("clean-sft", 0, 0.7, 1.0), _run("clean-sft", 1, 0.8, 1.0),
            _run("online-rft", 0, 0.8, 0.9), _run("online-rft", 1, 0.9, 0.9)]
    table = mode_selection_table(runs)
    rows = {r[0]: dict(zip(table.headers, r, strict=True)) for r in table.rows}
    assert list(rows) == ["warm start", "grpo", "online-rft", "clean-sft"]
    assert rows["warm start"]["held-out mean@k"].startswith("0.550 [")
    assert rows["grpo"]["gain over the warm start (paired)"].startswith("+0.300 [")  # 0.3 and 0.3
    assert rows["clean-sft"]["gain over the warm start (paired)"].startswith("+0.200 [")
    assert rows["clean-sft"]["share of GRPO's gain"] == "0.67"  # 0.2 / 0.3
    assert rows["online-rft"]["share of GRPO's gain"] == "1.00"
    assert (rows["clean-sft"]["grpo - arm (paired)"].startswith("+0.100")
            and rows["clean-sft"]["grpo - arm (paired)"].endswith(", 2 pairs"))
    assert rows["clean-sft"]["verdict (the card's margin)"] == "inconclusive"  # 2 pairs: under the floor of 5
