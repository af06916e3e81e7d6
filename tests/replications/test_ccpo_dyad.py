"""CCPO in thinker_solver's dyad setting (#38): the oracle arm's credit by hand, the behaviour labels of the
design check, the dyad scale's arms (budget-matched control included), and that the design check takes
only the claims about the setting its arms play."""

import pytest

from common.config import build_dataclass
from common.episode import Episode, Group, Turn
from replications.ccpo.design import BEHAVIOURS
from replications.ccpo.method import CCPO, CCPOConfig, oracle_rewards
from tests.helpers import credit_advantages, run_view


class _Env:
    name, roles = "thinker_solver", ("thinker", "solver")

    def variants(self):
        return ("main", "solo")


def _episode(reward, **info):
    e = Episode("t", 1)
    e.turns.append(Turn("thinker", "thinker", [1], [2], [-0.1], " 2"))
    e.turns.append(Turn("solver", "solver", [1], [3], [-0.1], " #2"))
    e.reward, e.success, e.info = reward, reward > 0.5, dict(info)
    return e


def test_oracle_rewards_by_hand():
    thinker, solver = oracle_rewards([0.85, -0.15, 1.0, 0.0], [1.0, 0.1, 1.0, 0.1])
    assert thinker.tolist() == pytest.approx([-0.15, -0.25, 0.0, -0.1])
    assert solver.tolist() == [0.85, -0.15, 1, 0]
    with pytest.raises(ValueError):
        oracle_rewards([1.0], [1.0, 0.1])


def test_oracle_credit_through_the_method():
    cfg = build_dataclass(CCPOConfig, {"credit": "oracle", "alternate_every": 0}, "method")
    m = CCPO(cfg, run_view(_Env()))
    m.validate()
    assert m.cfg.estimator == "drgrpo"  # mean-centering, like grpo-center: only the baseline differs
    joint = [_episode(0.85, solo_value=1.0), _episode(-0.15, solo_value=0.1), _episode(1.0, solo_value=1.0),
             _episode(0.0, solo_value=0.1)]
    groups = [Group("t", 3, joint)]
    assert m.play.__func__ is CCPO.play and "solo" not in groups[0].extra  # no solo plays: none are read
    adv, _ = credit_advantages(m, groups)
    # Thinker: [-0.15, -0.25, 0, -0.1] - mean (-0.125); Solver: the joint rewards - mean (0.425)
    assert [adv.scalar(e.turns[0]) for e in joint] == pytest.approx([-0.025, -0.125, 0.125, 0.025])
    assert [adv.scalar(e.turns[1]) for e in joint] == pytest.approx([0.425, -0.575, 0.575, -0.425])
    with pytest.raises(ValueError, match="solo_value"):
        m.credit([Group("t", 3, [_episode(1.0)])], 0)


def test_behaviour_labels():
    best, copies = BEHAVIOURS["thinker_best_response"], BEHAVIOURS["solver_copies"]
    needed_help = _episode(1.0, needed=True, msg_help=True, msg_silent=False)
    needed_silent = _episode(0.0, needed=True, msg_help=False, msg_silent=True)
    unneeded_help = _episode(0.85, needed=False, msg_help=True, msg_silent=False)
    unneeded_silent = _episode(1.0, needed=False, msg_help=False, msg_silent=True)
    wrong = _episode(0.0, needed=True, msg_help=False, msg_silent=False, msg_wrong=True)
    assert [best(e, 0) for e in (needed_help, needed_silent, unneeded_help, unneeded_silent, wrong)] == \
        [True, False, False, True, None]
    assert best(needed_help, 1) is None and best(_episode(1.0, msg_help=True), 0) is None  # not the dyad
    assert copies(_episode(0.0, solver_copied=True), 1) is True
    assert copies(_episode(1.0, solver_copied=False), 1) is False
    assert copies(_episode(1.0, solver_copied=True), 0) is None and copies(_episode(1.0), 1) is None


def test_dyad_scale_arms_compose():
    from experiments.replicate import cell_config, plan

    cells = plan("ccpo", "dyad", seeds=[0])
    assert {c.arm for c in cells} == {"grpo-center", "ccpo-v2", "ccpo-v2ps", "ccpo-v1", "ccpo-oracle",
                                      "grpo-center-g12", "ccpo-v1-center"}
    assert {c.env for c in cells} == {"thinker_solver-dyad"}
    configs = {c.arm: cell_config(c) for c in cells}
    env = configs["grpo-center"].env
    assert env["cue_words"] == ["strong", "fair", "weak"]
    assert env["drop"] == 0.4 and env["cost_per_char"] == 0.15
    assert {cfg.trainer.steps for cfg in configs.values()} == {90}  # the same number of updates everywhere
    assert {cfg.method["alternate_every"] for cfg in configs.values()} == {10}
    # the budget-matched control: 12 joint plays (24 model calls per task) = CCPO's 8 joint + 8 solo (16 + 8)
    assert configs["grpo-center-g12"].trainer.group_size == 12 and configs["ccpo-v1"].trainer.group_size == 8
    assert {configs[a].method["estimator"] for a in ("grpo-center-g12", "grpo-center")} == {"drgrpo"}
    assert configs["ccpo-oracle"].method["credit"] == "oracle" and configs["ccpo-v1"].method["crn"]
    # v1 with mean-centering differs from v1 in its estimator only
    v1, v1c = configs["ccpo-v1"].method, configs["ccpo-v1-center"].method
    assert v1c["estimator"] == "drgrpo" and v1["estimator"] != "drgrpo"
    def rest(m):
        return {k: v for k, v in m.items() if k != "estimator"}
    assert rest(v1c) == rest(v1)
    # the free-riding setting's own arms stay off this scale, and the new ones off the others
    assert {c.arm for c in plan("ccpo", "cpu", seeds=[0])} == {
        "grpo", "grpo-center", "grpo-center-tokens", "ccpo-v2", "ccpo-v2ps", "ccpo-v2ps-nocrn", "ccpo-v1",
        "ccpo-v1-nocrn"}


def test_design_check_takes_the_claims_of_the_setting_played():
    from experiments.design import claim_specs, env_tag
    from experiments.shared_batch import arm_config

    specs = claim_specs("ccpo")
    dyad = [s.id for s in specs if env_tag(arm_config("ccpo", s.arms[0], "dyad")) in s.envs]
    assert dyad and all(i.startswith("dy-") for i in dyad) and len(dyad) == sum(
        s.id.startswith("dy-") for s in specs)
    assert env_tag(arm_config("ccpo", "grpo-center", "cpu")) == "thinker_solver-freeride"


def test_oracle_on_scripted_plays_of_the_dyad():
    """Through the rollout (scripted roles, no model): the oracle plays no solo episodes, and credits the
    Thinker with each episode's team reward minus the env's solo_value for that episode's draw."""
    from common.rollout import Rollout
    from envs.testbeds.thinker_solver import ThinkerSolverConfig, ThinkerSolverEnv
    from tests.replications.test_ccpo import _CharTokenizer

    env = ThinkerSolverEnv(ThinkerSolverConfig(
        train_size=16, heldout_size=4, dev_size=0, question="sum", see_probs=[0.9, 0.5, 0.1], 
        follow_known=0.3,
        cost_per_char=0.15, cue_words=["strong", "fair", "weak"], drop=0.4))
    rollout = Rollout(env, None, _CharTokenizer(), {"thinker": "scripted", "solver": "scripted"}, [], None,
                      10_000, seed=7)
    m = CCPO(build_dataclass(CCPOConfig, {"credit": "oracle"}, "method"), run_view(env, group_size=8))
    m.validate()
    groups = m.play(rollout, list(env.task_set()["train"])[:6], step=3)
    assert all("solo" not in g.extra for g in groups)
    episodes = [e for g in groups for e in g.episodes]
    assert {e.info["solo_value"] for e in episodes} == {1.0, 0.1}
    credit = m.credit(groups, 3)
    thinker = [v["thinker"] for g in credit.values for v in g]
    assert thinker == pytest.approx([e.reward - e.info["solo_value"] for e in episodes])
    assert [v["solver"] for g in credit.values for v in g] == pytest.approx([e.reward for e in episodes])
