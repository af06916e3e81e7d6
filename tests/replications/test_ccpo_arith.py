"""CCPO on thinker_solver over arith's tasks (`env=thinker_solver_arith`, #46): its counterfactual credit on
scripted plays worked out by hand, and a run end to end at a tiny smoke size."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from common.config import build_dataclass
from envs.testbeds.thinker_solver import ThinkerSolverEnv
from replications.ccpo.method import CCPO, CCPOConfig
from tests.helpers import run_view
from tests.replications.test_ccpo import _CharTokenizer

CONF = Path(__file__).resolve().parents[2] / "common" / "conf" / "env" / "thinker_solver_arith.yaml"


def test_v2_credit_on_scripted_plays_by_hand():
    """Scripted roles (no model): the demonstrator Solver is right alone, so every solo play scores +1 and
    the group's solo baseline b = +1; a joint play is right unless the Thinker slipped (its working with the
    last operation forgotten, which the Solver copies). v2 (rewards 2r - 1): Solver r_S = R^J, Thinker
    r_T = R^J - 0.2 where R^J = -1 (the play hurt against b > 0), else R^J."""
    from common.rollout import Rollout

    settings = {**yaml.safe_load(CONF.read_text()), "train_size": 24, "heldout_size": 4, "dev_size": 0,
                "demo_size": 0}
    env = ThinkerSolverEnv(build_dataclass(ThinkerSolverEnv.config_class, settings, "env"))
    rollout = Rollout(env, None, _CharTokenizer(), {"thinker": "scripted", "solver": "scripted"}, [], None,
                      10_000, seed=7)
    method = build_dataclass(CCPOConfig, {"credit": "v2", "crn": True}, "method")
    m = CCPO(method, run_view(env, group_size=8))
    m.validate()
    groups = m.play(rollout, list(env.task_set()["train"])[:6], step=0)
    joint = [e for g in groups for e in g.episodes]
    solo = [e for g in groups for e in g.extra["solo"]]
    assert len(joint) == len(solo) == 48 and all(e.success for e in solo)
    assert [len(e.turns) for e in solo] == [1] * 48 and all(t.role == "solver" for e in solo for t in e.turns)
    slipped = [bool(e.info["msg_wrong"]) for e in joint]
    assert [not e.success for e in joint] == slipped and 0 < sum(slipped) < 48
    credit = m.credit(groups, 0)
    r_joint = np.array([2 * e.reward - 1 for e in joint])
    values = [v for g in credit.values for v in g]
    assert [v["solver"] for v in values] == pytest.approx(list(r_joint))
    assert [v["thinker"] for v in values] == pytest.approx(list(r_joint - 0.2 * np.array(slipped)))
    assert credit.metrics["solo_success_rate"] == 1.0 and credit.metrics["help_rate"] == 0.0
    assert credit.metrics["hurt_rate"] == pytest.approx(sum(slipped) / 48)


def test_ccpo_runs_end_to_end_on_arith_tasks(tmp_path):
    """The real pipeline at a tiny smoke size (a few seconds): warm start on the dyad's demonstrations, two RL
    steps of CCPO v1 with paired solo plays (one role trained per step), the paired evaluation."""
    from common.fit import fit
    from experiments.run import compose
    from replications import METHODS

    torch.set_num_threads(1)
    tiny = ["env.train_size=32", "env.heldout_size=4", "env.dev_size=0", "env.demo_size=0", "trainer.steps=2",
            "trainer.tasks_per_step=2", "trainer.group_size=4", "trainer.max_new_tokens=24", "sft.steps=10",
            "sft.demos=32", "eval.k=1", "eval.max_tasks=4", "log.samples_every=0", "trainer.threads=1",
            "progress=false"]
    cfg = compose("ccpo", ["scale=smoke", "env=thinker_solver_arith", *tiny, "method.credit=v1",
                           "method.crn=true", "method.alternate_every=1", f"out_dir={tmp_path / 'out'}",
                           f"work_dir={tmp_path / 'work'}"])
    assert cfg.env["tasks"] == "arith"
    run = fit(cfg, METHODS).path
    assert run == tmp_path / "out" / "ccpo" / "thinker_solver-arith" / "default" / "seed-0"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1] and [r["trains_thinker"] for r in rows] == [1.0, 0.0]
    assert [r["model_calls_total/solo"] for r in rows] == [8, 16]  # 2 tasks x 4 solo plays a step
    assert all("info/ops" in r and "solo_success_rate" in r for r in rows)
    final = json.loads((run / "eval.json").read_text())["final"]
    assert set(final["per_role"]) == {"thinker", "solver"} and set(final["variants"]) == {"paired",
                                                                                          "empty_guidance"}
    assert {"help", "hurt", "contribution", "ops"} <= set(final["variants"]["paired"]["metrics"])
