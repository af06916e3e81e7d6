"""SHARP on `voting` (#46): the voters are the players of the replay game (voter i is masked index i, its
agent key its role), nobody plans and no tools are called; the credit on hand-made groups, and a run end to
end at a tiny smoke size."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from common.config import build_dataclass
from common.credit import grpo
from common.episode import Episode, Group, Turn
from envs.api.base import Observation
from envs.testbeds.voting import VotingConfig, VotingEnv
from replications.sharp.method import SHARP, SHARPConfig
from tests.helpers import credit_advantages, run_view

TASK = {"facts": [["F", 1], ["C", 3]], "asked": "F", "shown": [["F"], ["F", "C"], ["C"]]}  # the answer: 1
ENV = VotingEnv(VotingConfig(train_size=30, heldout_size=9))
VOTERS = ("voter0", "voter1", "voter2")


def episode(votes: list[str]) -> Episode:
    """A played vote: the environment's own outcome and info, turns as the rollout records them."""
    ep = ENV.new_episode(TASK, random.Random(0))
    obs: Observation | None = ep.start()
    result = None
    out = Episode("t0", 1)
    for vote in votes:
        assert obs is not None
        out.turns.append(Turn(obs.role, "policy", [1], [2], [-0.1], vote))
        result = ep.step(vote)
        obs = result.next
    assert result is not None and obs is None
    out.reward, out.success, out.info = result.reward, result.success, result.info
    return out


def groups() -> list[Group]:
    # votes 1 1 7: team right, phi = (2/3, 2/3, -1/3) (tests/envs/testbeds/test_voting_replay.py by hand);
    # 1 7 7: team wrong, phi = (1/3, -1/6, -1/6); 7 7 7: every coalition wrong, phi = 0
    return [Group("t0", 1, [episode([" #1", " #1", " #7"]), episode([" #1", " #7", " #7"]),
                            episode([" #7", " #7", " #7"])])]


def sharp(credit: str) -> SHARP:
    m = SHARP(build_dataclass(SHARPConfig, {"credit": credit}, "method"), run_view(ENV))
    m.validate()
    return m


def test_exact_shapley_credit_of_the_voters_by_hand():
    """R_i = R^b + 0.9 phi_i (no tools: the lambda_p term is 0), GRPO-normalized per voter in the group."""
    m, gs = sharp("exact"), groups()
    credit = m.credit(gs, 0)
    r = {"voter0": [1 + 0.9 * 2 / 3, 0.9 * 1 / 3, 0.0], "voter1": [1 + 0.9 * 2 / 3, -0.9 / 6, 0.0],
         "voter2": [1 - 0.9 / 3, -0.9 / 6, 0.0]}
    assert [set(v) for v in credit.values[0]] == [set(VOTERS)] * 3  # no planner
    for key, rewards in r.items():
        assert [v[key] for v in credit.values[0]] == pytest.approx(rewards)
    assert credit.metrics["rescores"] == 3 * 8 and credit.metrics["rescores_per_episode"] == 8
    adv, _ = credit_advantages(sharp("exact"), gs)
    for i, ep in enumerate(gs[0].episodes):
        assert [adv.scalar(t) for t in ep.turns] == pytest.approx([grpo(np.array(r[k]))[i] for k in VOTERS])


def test_leave_one_out_local_and_broadcast_credit_of_the_voters():
    gs = groups()
    loo = sharp("loo").credit(gs, 0).values[0]
    # Delta_i = v(all) - v(all but i): 1 1 7 -> (1, 1, 0); 1 7 7 -> (0, 0, 0); 7 7 7 -> (0, 0, 0)
    assert [v[k] for v in loo for k in VOTERS] == pytest.approx([1.9, 1.9, 1.0, 0, 0, 0, 0, 0, 0])
    local = sharp("local").credit(gs, 0)  # own slot: the voter's own vote is right
    own = [1.9, 1.9, 1.0, 0.9, 0, 0, 0, 0, 0]
    assert [v[k] for v in local.values[0] for k in VOTERS] == pytest.approx(own)
    assert local.metrics["rescores"] == 0
    adv, metrics = credit_advantages(sharp("broadcast"), gs)
    expected = grpo(np.array([1.0, 0.0, 0.0]))
    assert [adv.scalar(t) for ep in gs[0].episodes for t in ep.turns] == pytest.approx(np.repeat(expected, 3))
    assert metrics["rescores"] == 0 and "distractor_rate" not in metrics  # no tools on voting


def test_sharp_runs_end_to_end_on_voting(tmp_path):
    """The real pipeline at a tiny smoke size (a few seconds): warm start, two RL steps of exact Shapley
    credit (every episode's 2^3 coalitions replayed), the final evaluation per voter."""
    from common.fit import fit
    from experiments.run import compose
    from replications import METHODS

    torch.set_num_threads(1)
    tiny = ["env.train_size=32", "env.heldout_size=4", "env.dev_size=0", "trainer.steps=2",
            "trainer.tasks_per_step=2", "trainer.group_size=4", "sft.steps=10", "sft.demos=32", "eval.k=1",
            "eval.max_tasks=4", "log.samples_every=0", "trainer.threads=1", "progress=false"]
    cfg = compose("sharp", ["scale=smoke", "env=voting", "~env.k", *tiny, "method.credit=exact",
                            f"out_dir={tmp_path / 'out'}", f"work_dir={tmp_path / 'work'}"])
    run = fit(cfg, METHODS).path
    assert run == tmp_path / "out" / "sharp" / "voting" / "default" / "seed-0" and (run / "done").exists()
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    assert [r["rescores_per_episode"] for r in rows] == [8.0, 8.0]  # 2 tasks x 4 plays, 8 coalitions each
    assert rows[-1]["rescores_total"] == 2 * 2 * 4 * 8
    final = json.loads((run / "eval.json").read_text())["final"]
    assert set(final["per_role"]) == set(VOTERS) and final["n_tasks"] == 4
