"""CCPO's pure formulas (v2 event bonus, v1 running statistics) and its hooks (solo plays, role
alternation)."""

import math

import numpy as np
import pytest

from common.batch import build_rows
from common.config import build_dataclass
from common.episode import Episode, Group, Turn
from replications.ccpo.method import CCPO, CCPOConfig, V1Credit, v2_rewards, vote_counterfactuals
from tests.helpers import credit_advantages, run_view


# ---- v2 -----------------------------------------------------------------------------------------
def test_v2_helped_when_solo_mostly_fails():
    rt, rs = v2_rewards([1, -1, 1, -1], [-1, -1, -1, 1], bonus=0.2)  # b = -0.5
    assert rt.tolist() == pytest.approx([1.2, -1, 1.2, -1])
    assert rs.tolist() == [1, -1, 1, -1]


def test_v2_hurt_when_solo_mostly_succeeds():
    rt, rs = v2_rewards([1, -1, -1, 1], [1, 1, 1, -1], bonus=0.2)  # b = 0.5
    assert rt.tolist() == pytest.approx([1, -1.2, -1.2, 1])
    assert rs.tolist() == [1, -1, -1, 1]


def test_v2_no_event_when_baseline_agrees_or_is_zero():
    assert v2_rewards([1, 1], [1, 1])[0].tolist() == [1, 1]  # b > 0, joint right: no bonus
    assert v2_rewards([-1, -1], [-1, -1])[0].tolist() == [-1, -1]  # b < 0, joint wrong: no penalty
    assert v2_rewards([1, -1], [1, -1])[0].tolist() == [1, -1]  # b = 0: neither event
    assert v2_rewards([1, -1], [-1, -1], bonus=0.5)[0].tolist() == [1.5, -1]  # bonus weight


# ---- v1 -----------------------------------------------------------------------------------------
def test_v1_no_normalization_before_min_samples():
    c = V1Credit(min_samples=10)
    for _ in range(3):  # 0, 4, 8 samples seen before these batches: raw delta and raw joint
        r1, r2 = c.rewards([1, 0, 1, 1], [0, 0, 1, 0])
        assert r1.tolist() == [1, 0, 0, 1] and r2.tolist() == [1, 0, 1, 1]
    assert c.n_seen == 12 and c.warm
    r1, _ = c.rewards([1, 0, 1, 1], [0, 0, 1, 0])
    assert all(abs(x) < 1 for x in r1) and r1.tolist() != [1, 0, 0, 1]


def test_v1_ema_uses_only_previous_batches():
    c = V1Credit(decay=0.9, min_samples=1, eps=1e-6)
    c.rewards([1, 0], [0, 0])  # delta [1, 0]: first batch initializes mean 0.5, var 0.25
    assert c.delta.mean == pytest.approx(0.5) and c.delta.var == pytest.approx(0.25)
    r1, _ = c.rewards([1, 1], [0, 1])  # delta [1, 0] again, normalized with the first batch's stats only
    assert r1.tolist() == pytest.approx([math.tanh(0.5 / (0.5 + 1e-6)), math.tanh(-0.5 / (0.5 + 1e-6))])
    # then folded in: mean 0.9*0.5 + 0.1*0.5, var 0.9*0.25 + 0.1*0.25
    assert c.delta.mean == pytest.approx(0.5) and c.delta.var == pytest.approx(0.25)
    c.rewards([1, 1, 1, 1], [0, 0, 0, 0])  # delta mean 1, var 0
    assert c.delta.mean == pytest.approx(0.9 * 0.5 + 0.1 * 1.0) and c.delta.var == pytest.approx(0.9 * 0.25)
    # an element's reward does not depend on the other elements of its own batch
    a, b = V1Credit(min_samples=1), V1Credit(min_samples=1)
    for x in (a, b):
        x.rewards([1, 0, 1], [0, 0, 1])
    assert a.rewards([1, 0, 0], [0, 1, 1])[0][0] == b.rewards([1, 1, 1], [0, 0, 0])[0][0]


def test_v1_gate_direction():
    helps, hurts = V1Credit(min_samples=1), V1Credit(min_samples=1)
    helps.rewards([1, 1, 1, 0], [0, 0, 1, 0])  # mean delta > 0: the Thinker helps on average
    hurts.rewards([0, 0, 1, 0], [1, 1, 1, 0])
    assert helps.gate() > 0.5 > hurts.gate()
    # the Solver's reward then follows its joint outcome more than its solo one
    _, r2 = helps.rewards([1, 0], [0, 1])
    assert r2[0] > r2[1]
    _, r2 = hurts.rewards([1, 0], [0, 1])  # equal joint and solo stds here: the solo side wins when g < 0.5
    assert r2[1] > r2[0]


def test_v1_logs_the_gate_it_applied_not_the_next_one():
    m = method(credit="v1", min_samples=1, alternate_every=0)
    batch = lambda j, s: [Group("t", 1, [_episode(float(r), bool(r)) for r in j],  # noqa: E731
                                extra={"solo": [_episode(float(r), bool(r), trainable=False) for r in s]})]
    _, first = credit_advantages(m, batch([1, 1, 1, 0], [0, 0, 1, 0]))
    assert "v1_gate" not in first  # the first batch is not normalized: no gate applied
    gate_before = m.v1.gate()
    _, second = credit_advantages(m, batch([0, 0, 0, 0], [1, 1, 1, 1]))  # a batch that moves the statistics
    assert second["v1_gate"] == pytest.approx(gate_before) and m.v1.gate() != pytest.approx(gate_before)


def test_v1_state_round_trip():
    a = V1Credit(min_samples=1)
    a.rewards([1, 0, 1], [0, 0, 1])
    b = V1Credit(min_samples=1)
    b.load_state_dict(a.state_dict())
    assert a.rewards([1, 0], [0, 1])[0].tolist() == b.rewards([1, 0], [0, 1])[0].tolist()


# ---- the method's hooks ------------------------------------------------------------------------
class _Env:
    name, roles = "thinker_solver", ("thinker", "solver")

    def variants(self):
        return ("main", "solo")


def method(**kw):
    m = CCPO(build_dataclass(CCPOConfig, kw, "method"), run_view(_Env()))
    m.validate()
    return m


def test_role_alternation_schedule():
    m = method(alternate_every=10)
    assert ([m.trainable_roles(s) for s in (0, 9, 10, 19, 20)]
            == [{"thinker"}, {"thinker"}, {"solver"}, {"solver"}, {"thinker"}])
    assert method(alternate_every=3, first_role="solver").trainable_roles(3) == {"thinker"}
    assert method(alternate_every=0).trainable_roles(5) is None
    with pytest.raises(ValueError):
        method(credit="v3")
    with pytest.raises(ValueError):
        method(thinker_role="nobody")


def _episode(reward, success, trainable=True):
    e = Episode("t", 1, counts_for_training=trainable, tag="main" if trainable else "solo")
    if trainable:
        e.turns.append(Turn("thinker", "thinker", [1], [2], [-0.1], " F=1"))
    e.turns.append(Turn("solver", "solver", [1], [3], [-0.1], " #1", trainable=trainable))
    e.reward, e.success = reward, success
    return e


def test_credit_v2_and_solo_plays_never_trained():
    m = method(credit="v2", alternate_every=1)
    joint = [_episode(1.0, True), _episode(0.0, False)]
    solo = [_episode(0.0, False, trainable=False), _episode(0.0, False, trainable=False)]
    g = Group("t", 3, joint, extra={"solo": solo})
    adv, metrics = credit_advantages(m, [g])
    # rewards ±1: joint [1, -1], b = -1: the success is a help event -> Thinker [1.2, -1], centered
    assert [adv.scalar(e.turns[0]) for e in joint] == pytest.approx([1.1, -1.1])
    assert [adv.scalar(e.turns[1]) for e in joint] == pytest.approx([1.0, -1.0])
    assert all(adv.scalar(t) == 0.0 for e in solo for t in e.turns)  # solo plays get no credit
    assert metrics["help_rate"] == 0.5 and metrics["hurt_rate"] == 0.0
    rows = build_rows(g.all_episodes(), m.trainable_roles(0))
    # joint plays come first
    assert {r.role for r in rows} == {"thinker"} and all(r.episode < len(joint) for r in rows)
    assert {r.role for r in build_rows(g.all_episodes(), m.trainable_roles(1))} == {"solver"}


def test_paper_scales_refuse_without_models_and_data(tmp_path):
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    for scale in ("paper", "paper_v2"):
        cfg = compose("ccpo", [f"scale={scale}", f"out_dir={tmp_path}", f"work_dir={tmp_path}"])
        with pytest.raises(ValueError, match="model.path"):
            resolve(cfg, METHODS)
        cfg = compose("ccpo", [f"scale={scale}", f"model.path={tmp_path}", f"out_dir={tmp_path}",
                               f"work_dir={tmp_path}"])
        with pytest.raises(ValueError, match="paper_data"):
            resolve(cfg, METHODS)
    assert compose("ccpo", ["scale=paper_v2"]).trainer.group_size == 16


def test_cpu_scale_arms_compose():
    from experiments.replicate import cell_config, load_replication, plan

    cells = plan("ccpo", "cpu", seeds=[0])  # composing every seed's cells too would only repeat these
    arms = {"grpo", "grpo-center", "grpo-center-tokens", "ccpo-v2", "ccpo-v2ps", "ccpo-v2ps-nocrn", "ccpo-v1",
            "ccpo-v1-nocrn"}
    assert {c.arm for c in cells} == arms and len(load_replication("ccpo").seeds["cpu"]) == 5
    assert {c.env for c in cells} == {"thinker_solver-freeride"}
    configs = {c.arm: cell_config(c) for c in cells}
    center = configs["grpo-center"]
    assert center.method["credit"] == "shared" and center.method["estimator"] == "drgrpo"
    assert center.env["see_probs"] == [0.9, 0.5, 0.1] and center.env["cost_per_char"] == 0.0
    # every arm alternates the trained role on the same schedule; only the counterfactual knobs differ
    assert {cfg.method["alternate_every"] for cfg in configs.values()} == {10}
    assert configs["ccpo-v2ps"].method["solo_baseline"] == "sample" and configs["ccpo-v2ps"].method["crn"]
    assert not configs["ccpo-v2ps-nocrn"].method["crn"] and not configs["ccpo-v1-nocrn"].method["crn"]
    assert configs["grpo-center-tokens"].trainer.steps > configs["grpo-center"].trainer.steps


def test_v2_thinker_advantage_is_a_positive_multiple_of_the_mean_centered_shared_one():
    """The identity behind "v2 = grpo-center" (#18): with binary rewards and the group-mean solo
    baseline, v2's event bonus only rescales the mean-centered shared advantage, by 1 (b = 0) or
    1 + λ/2 (b ≠ 0): J + λ·1[J > 0] = (1 + λ/2)·J + λ/2 for J in {-1, +1}, and likewise when b > 0.
    So v2's Thinker learns what shared-reward mean-centering learns, up to a step size."""
    from common.credit import drgrpo

    rng = np.random.default_rng(0)
    bonus = 0.2
    for _ in range(2000):
        g = int(rng.integers(2, 17))
        joint, solo = rng.integers(0, 2, g), rng.integers(0, 2, g)  # binary outcomes
        thinker, _ = v2_rewards(2 * joint - 1, 2 * solo - 1, bonus)
        v2_adv, shared_adv = drgrpo(thinker), drgrpo(2.0 * joint - 1)
        if np.allclose(shared_adv, 0):  # all joint outcomes equal: no signal in either
            assert np.allclose(v2_adv, 0)
            continue
        scale = np.dot(v2_adv, shared_adv) / np.dot(shared_adv, shared_adv)
        assert scale > 0 and np.allclose(v2_adv, scale * shared_adv)
        b = (2 * solo - 1).mean()
        assert scale == pytest.approx(1.0 if b == 0 else 1 + bonus / 2)


def test_v2_identity_on_hand_computed_groups():
    """The identity on groups worked by hand: joint [+1, -1, -1, +1] (shared advantage after
    mean-centering [1, -1, -1, 1]). Solo mostly wrong (b = -0.5): Thinker [1.2, -1, -1, 1.2], mean 0.1,
    centered [1.1, -1.1, -1.1, 1.1] = 1.1 x shared. Solo mostly right (b = +0.5): [1, -1.2, -1.2, 1],
    centered [1.1, -1.1, -1.1, 1.1]. b = 0: no event, 1 x shared."""
    from common.credit import drgrpo

    joint = [1, -1, -1, 1]
    shared = drgrpo(joint)
    assert shared.tolist() == [1, -1, -1, 1]
    for solo, expected in (([-1, -1, 1, -1], [1.1, -1.1, -1.1, 1.1]), ([1, 1, -1, 1], [1.1, -1.1, -1.1, 1.1]),
                           ([1, -1, 1, -1], [1, -1, -1, 1])):
        assert drgrpo(v2_rewards(joint, solo)[0]).tolist() == pytest.approx(expected)


# ---- v2 with a per-sample solo baseline -------------------------------------------------------------
def test_v2_per_sample_baseline_hand_cases():
    # each play against its own paired solo play: help where joint right and solo wrong, hurt the reverse
    rt, rs = v2_rewards([1, 1, -1, -1], [-1, 1, 1, -1], bonus=0.2, baseline="sample")
    assert rt.tolist() == pytest.approx([1.2, 1, -1.2, -1]) and rs.tolist() == [1, 1, -1, -1]
    # the group baseline on the same plays: b = 0, no event at all
    assert v2_rewards([1, 1, -1, -1], [-1, 1, 1, -1], bonus=0.2)[0].tolist() == [1, 1, -1, -1]
    with pytest.raises(ValueError, match="group or sample"):
        v2_rewards([1], [1], baseline="mean")
    with pytest.raises(ValueError, match="pairs"):
        v2_rewards([1, -1], [1])


def test_v2_per_sample_baseline_breaks_the_identity():
    """With the paired solo play as baseline the Thinker's advantage is no longer a multiple of the
    shared one: two joint successes earn different credit when only one of them was a help."""
    from common.credit import drgrpo

    thinker, _ = v2_rewards([1, 1, -1, -1], [-1, 1, 1, -1], baseline="sample")
    v2_adv, shared_adv = drgrpo(thinker), drgrpo(np.array([1.0, 1, -1, -1]))
    scale = np.dot(v2_adv, shared_adv) / np.dot(shared_adv, shared_adv)
    assert not np.allclose(v2_adv, scale * shared_adv)
    assert v2_adv[0] > v2_adv[1] and v2_adv[2] < v2_adv[3]


def test_credit_v2_per_sample_through_the_method():
    m = method(credit="v2", solo_baseline="sample", alternate_every=1)
    joint = [_episode(1.0, True), _episode(1.0, True), _episode(0.0, False)]
    solo = [_episode(0.0, False, trainable=False), _episode(1.0, True, trainable=False),
            _episode(0.0, False, trainable=False)]
    adv, _ = credit_advantages(m, [Group("t", 3, joint, extra={"solo": solo})])
    # Thinker rewards [1.2, 1, -1], mean 0.4 -> [0.8, 0.6, -1.4]
    assert [adv.scalar(e.turns[0]) for e in joint] == pytest.approx([0.8, 0.6, -1.4])


# ---- voting: the counterfactual recomputed from the same votes -------------------------------------
def test_vote_counterfactuals_hand_cases():
    # 2 of 3 right: the two right voters are pivotal, the wrong one is not (the others still win)
    assert vote_counterfactuals([True, True, False]).tolist() == [1, 1, 0]
    assert vote_counterfactuals([False, True, True]).tolist() == [0, 1, 1]
    # unanimous or lost: nobody is pivotal
    assert vote_counterfactuals([True, True, True]).tolist() == [0, 0, 0]
    assert vote_counterfactuals([True, False, False]).tolist() == [0, 0, 0]
    assert vote_counterfactuals([False, False, False]).tolist() == [0, 0, 0]
    # five voters, 3 right: each right voter is pivotal (2 of 4 is no strict majority)
    assert vote_counterfactuals([True, True, True, False, False]).tolist() == [1, 1, 1, 0, 0]
    with pytest.raises(ValueError):
        vote_counterfactuals([True])


def test_vote_counterfactuals_match_replaying_without_each_voter():
    """The slow reference: play the environment's `without<i>` variant with the same votes."""
    import random

    from envs.testbeds.voting import VotingConfig, VotingEnv

    env = VotingEnv(VotingConfig(train_size=8, heldout_size=4))
    task = {"facts": [["F", 1], ["C", 3]], "asked": "F", "shown": [["F"], [], ["F", "C"]]}
    for votes in ([1, 1, 2], [1, 2, 3], [1, 1, 1], [2, 2, 1], [1, None, 1], [None, 2, 1]):
        def outcome(variant, votes=votes):
            ep = env.new_episode(task, random.Random(0), variant)
            ep.start()
            r = None
            for i in ep.voters:
                r = ep.step(" #x" if votes[i] is None else f" #{votes[i]}")
            return r.reward, r.info
        team, info = outcome("main")
        expected = [team - outcome(f"without{i}")[0] for i in range(3)]
        assert vote_counterfactuals([info[f"voter{i}_correct"] for i in range(3)]).tolist() == expected


def test_credit_vote_through_the_method():
    class _Voting:
        name, roles = "voting", ("voter0", "voter1", "voter2")

        def variants(self):
            return ("main", "without0", "without1", "without2")

    m = CCPO(build_dataclass(CCPOConfig, {"credit": "vote"}, "method"), run_view(_Voting()))
    m.validate()
    assert m.trainable_roles(3) is None

    def ep(correct):
        e = Episode("t", 1)
        for i in range(3):
            e.turns.append(Turn(f"voter{i}", f"voter{i}", [1], [2], [-0.1], " #1"))
        e.info = {f"voter{i}_correct": c for i, c in enumerate(correct)}
        e.reward = float(sum(correct) >= 2)
        return e

    eps = [ep([True, True, False]), ep([True, True, True])]  # voter 0: pivotal, then not: rewards [1, 0]
    adv, metrics = credit_advantages(m, [Group("t", 1, eps)])
    assert ([adv.scalar(e.turns[0]) for e in eps]
            == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)], rel=1e-5))
    assert [adv.scalar(e.turns[2]) for e in eps] == [0.0, 0.0]  # never pivotal: no signal
    assert metrics["vote_pivotal_rate"] == pytest.approx(2 / 6)
    with pytest.raises(ValueError, match="without"):
        CCPO(build_dataclass(CCPOConfig, {"credit": "vote"}, "method"), run_view(_Env())).validate()


# ---- paired counterfactuals (crn) --------------------------------------------------------------------
class _CharTokenizer:
    chat_template = None

    def encode(self, text, add_special_tokens=False):
        return [ord(c) for c in text]


def _freeride_plays(crn: bool):
    """One training step of CCPO on the free-riding setting with scripted roles (no model)."""
    from common.rollout import Rollout
    from envs.testbeds.thinker_solver import ThinkerSolverConfig, ThinkerSolverEnv

    env = ThinkerSolverEnv(ThinkerSolverConfig(train_size=16, heldout_size=4, dev_size=0, question="sum",
                                               see_probs=[0.5], follow_known=0.3, cost_per_char=0.0))
    rollout = Rollout(env, None, _CharTokenizer(), {"thinker": "scripted", "solver": "scripted"}, [], None,
                      10_000, seed=7)

    m = CCPO(build_dataclass(CCPOConfig, {"credit": "v1", "crn": crn}, "method"), run_view(env, group_size=8))
    m.validate()
    tasks = list(env.task_set()["train"])[:6]
    return m.play(rollout, tasks, step=3)


def test_crn_pairs_the_solo_plays_hidden_draws_with_the_joint_ones():
    for crn in (True, False):
        groups = _freeride_plays(crn)
        joint = [e.info["knows"] for g in groups for e in g.episodes]
        solo = [e.info["knows"] for g in groups for e in g.extra["solo"]]
        assert len(joint) == len(solo) == 48 and 0 < sum(joint) < 48
        if crn:
            assert solo == joint
        else:
            assert solo != joint  # 48 independent draws at p = 0.5 agree with chance 2^-48
    # crn changes only the solo plays: the joint plays are the same either way
    assert [e.info for g in _freeride_plays(True) for e in g.episodes] == \
           [e.info for g in _freeride_plays(False) for e in g.episodes]
