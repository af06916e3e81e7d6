"""IAPO's second-testbed tables (replications/iapo/speed.py) on hand-made runs, by hand."""

from pathlib import Path

import pytest

from paper.load import Run
from replications.iapo.speed import auc, share_table, speed_table, steps_to, summarize


def run(arm, seed, curve, env="service_desk-choice-d8", final=0.5):
    rows = [{"step": s, "success_rate": v} for s, v in enumerate(curve)]
    return Run("iapo", env, arm, seed, Path("."), {}, {}, rows,
               {"initial": {"mean@k": 0.4}, "final": {"mean@k": final}})


def test_auc_and_steps_to_by_hand():
    rows = [{"step": s, "success_rate": v} for s, v in enumerate([0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 0.6])]
    assert auc(rows) == pytest.approx(5.0 / 7)
    # full 5-step windows: steps 0-4 mean 0.68, 1-5 0.84: reached at step 5
    assert steps_to(rows) == 5 and steps_to(rows, target=0.9) is None and steps_to(rows, window=1) == 2


def test_share_and_growth_by_hand():
    # AUCs per seed: grpo 0.4, 0.5; iapo 0.5, 0.7 (+0.1, +0.2); oracle 0.8, 0.9 (+0.4, +0.4);
    # at D = 0: grpo-d0 0.6, 0.6, iapo-d0 0.6, 0.7 (+0.0, +0.1): growth +0.1, +0.1
    runs = [run("grpo", 0, [0.4]), run("grpo", 1, [0.5]), run("iapo", 0, [0.5]), run("iapo", 1, [0.7]),
            run("oracle", 0, [0.8]), run("oracle", 1, [0.9]), run("classic", 0, [0.1], env="service_desk"),
            run("grpo-d0", 0, [0.6], env="service_desk-choice-d0"),
            run("grpo-d0", 1, [0.6], env="service_desk-choice-d0"),
            run("iapo-d0", 0, [0.6], env="service_desk-choice-d0"),
            run("iapo-d0", 1, [0.7], env="service_desk-choice-d0")]
    s = summarize(runs)
    assert set(s) == {("grpo", 8), ("iapo", 8), ("oracle", 8), ("grpo-d0", 0), ("iapo-d0", 0)}
    rows = {r[0]: r for r in share_table(runs).rows}
    assert rows["iapo - grpo at D=8"][1].startswith("+0.150") and "2 pairs" in rows["iapo - grpo at D=8"][1]
    assert rows["gap at D=8 minus gap at D=0 (the gain grows with D)"][1].startswith("+0.100")
    assert rows["share of the oracle's AUC gain, iapo"][1] == "0.375"  # 0.15 / 0.40
    assert rows["iapo - grpo at D=8"][2] == "inconclusive"  # 2 pairs: under the card's floor of 5
    speed = {(r[0], r[1]): r for r in speed_table(runs).rows}
    assert speed[("oracle", "8")][3].startswith("0.850") and speed[("oracle", "8")][4] == "— (0/2 reached)"
