"""SHARP's pure formulas against hand-computed games, its credit hook on hand-made groups, and its
configs."""

import itertools
import math

import numpy as np
import pytest

from common.config import build_dataclass
from common.credit import grpo
from common.episode import Episode, Group, Turn
from envs.api.protocols import CounterfactualReplay
from replications.sharp.method import (
    SHARP,
    SHARPConfig,
    agent_rewards,
    leave_one_out,
    per_agent_advantages,
    shapley_values,
    shapley_values_mc,
)
from tests.helpers import credit_advantages, run_view


def glove(s):  # player 1 holds a left glove, players 2 and 3 a right glove each: a pair is worth 1
    return float(1 in s and (2 in s or 3 in s))


def unanimity(t):
    return lambda s: float(set(t) <= s)


def weighted_vote(weights, quota):
    return lambda s: float(sum(weights[p] for p in s) >= quota)


def test_glove_game_by_hand():
    phi = shapley_values([1, 2, 3], glove)
    assert (phi[1] == pytest.approx(2 / 3) and phi[2] == pytest.approx(1 / 6)
            and phi[3] == pytest.approx(1 / 6))
    # leave-one-out gives the redundant right-glove holders nothing, the left-glove holder everything
    assert leave_one_out([1, 2, 3], glove) == {1: 1.0, 2: 0.0, 3: 0.0}


def test_unanimity_game_splits_equally():
    phi = shapley_values("abcd", unanimity("abc"))
    assert phi == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3, "d": 0.0})


def test_two_player_game_by_hand():
    v = {frozenset(): 0.0, frozenset({0}): 0.25, frozenset({1}): 0.25, frozenset({0, 1}): 1.0}
    assert shapley_values([0, 1], v.__getitem__) == pytest.approx({0: 0.5, 1: 0.5})
    assert leave_one_out([0, 1], v.__getitem__) == pytest.approx({0: 0.75, 1: 0.75})


def test_axioms():
    players = [0, 1, 2, 3]
    rng = np.random.default_rng(0)
    table = {frozenset(c): float(rng.normal()) for r in range(5) for c in itertools.combinations(players, r)}
    v = table.__getitem__
    phi = shapley_values(players, v)
    # efficiency
    assert sum(phi.values()) == pytest.approx(v(frozenset(players)) - v(frozenset()))
    # symmetry: 1 and 2 interchangeable in w
    w = lambda s: float(len(s & {1, 2}) >= 1) + 2.0 * (0 in s)  # noqa: E731
    pw = shapley_values(players, w)
    assert pw[1] == pytest.approx(pw[2]) and pw[3] == pytest.approx(0.0)
    # null player: adding a player who changes nothing gets 0 and leaves the others unchanged
    null = shapley_values([*players, 9], lambda s: v(s - {9}))
    assert null[9] == pytest.approx(0.0) and all(null[p] == pytest.approx(phi[p]) for p in players)
    # additivity
    both = shapley_values(players, lambda s: v(s) + w(s))
    assert all(both[p] == pytest.approx(phi[p] + pw[p]) for p in players)


def test_each_coalition_is_evaluated_once():
    calls = []
    shapley_values(range(4), lambda s: calls.append(s) or float(len(s)))
    assert len(calls) == 2**4 and len(set(calls)) == 2**4


def test_monte_carlo_within_its_stated_error_on_six_players():
    players = list(range(6))
    game = weighted_vote([4, 3, 2, 2, 1, 1], quota=7)
    v = lambda s: game(s) + 0.1 * len(s)  # noqa: E731
    exact = shapley_values(players, v)
    phi, stderr = shapley_values_mc(players, v, permutations=400, seed=0)
    for p in players:
        assert 0 < stderr[p] < 0.05
        assert abs(phi[p] - exact[p]) <= 4 * stderr[p], (p, phi[p], exact[p], stderr[p])
    # the error shrinks as 1/sqrt(permutations)
    _, se_big = shapley_values_mc(players, v, permutations=1600, seed=1)
    assert np.mean(list(se_big.values())) == pytest.approx(np.mean(list(stderr.values())) / 2, rel=0.25)
    # an additive game has no sampling error at all
    phi_add, se_add = shapley_values_mc(players, lambda s: float(sum(s)), permutations=5, seed=3)
    assert phi_add == pytest.approx({p: float(p) for p in players}) and all(x == 0 for x in se_add.values())


def test_agent_rewards_sum():
    r = agent_rewards(1.0, {0: 0.5, 1: -0.1}, {0: 1.0}, lambda_s=0.9, lambda_p=0.1)
    assert r == pytest.approx({0: 1.0 + 0.45 + 0.1, 1: 1.0 - 0.09})


def test_per_agent_normalization_on_a_hand_made_group():
    rewards = [{"planner": 1.0, "worker_0": 2.0, "worker_1": 0.0},
               {"planner": 0.0, "worker_0": 0.0, "worker_1": 0.0},
               {"planner": 0.0}]  # a malformed plan: no workers in this rollout
    adv = per_agent_advantages(rewards, grpo)
    # planner: rewards (1, 0, 0): mean 1/3, sample std sqrt(1/3)
    s = math.sqrt(1 / 3)
    assert adv[0]["planner"] == pytest.approx((2 / 3) / s, rel=1e-5)
    assert adv[1]["planner"] == pytest.approx((-1 / 3) / s, rel=1e-5)
    # worker_0 over the two rollouts that have it: (2, 0) -> +-1/sqrt(2); worker_1 constant -> 0
    assert adv[0]["worker_0"] == pytest.approx(1 / math.sqrt(2), rel=1e-5)
    assert adv[1]["worker_0"] == pytest.approx(-1 / math.sqrt(2), rel=1e-5)
    assert adv[0]["worker_1"] == 0.0 and adv[1]["worker_1"] == 0.0 and set(adv[2]) == {"planner"}


# ---- the credit hook on hand-made episodes --------------------------------------------------------
def episode(answer, results, kinds, truth=("Q", "F")):
    ep = Episode("t0", 2)
    for role in ("planner", "worker", "worker", "planner"):
        ep.turns.append(Turn(role, "policy", [1], [2], [-0.1], "x"))
    ep.reward = float(list(answer) == list(truth))
    ep.info = {"record": {"truth": list(truth), "results": list(results), "answer": list(answer),
                          "tool_kinds": list(kinds)},
               "slot_accuracy": sum(a == t for a, t in zip(answer, truth, strict=True)) / 2}
    return ep


def group():
    return [Group("t0", 2, [episode(["Q", "F"], ["Q", "F"], ["value", "value"]),
                            episode(["Q", "X"], ["Q", "X"], ["value", "distractor"]),
                            episode(["Q", "ERR"], ["Q", "ERR"], ["value", "error"])])]


class _Env:
    name = "toolplan"
    roles = ("planner", "worker")

    @staticmethod
    def replay(record, masked):
        from envs.testbeds.toolplan import replay

        return replay(record, masked)


def sharp(credit, **kw):
    m = SHARP(build_dataclass(SHARPConfig, {"credit": credit, **kw}, "method"), run_view(_Env()))
    m.validate()
    return m


def test_credit_exact_by_hand():
    groups = group()
    adv, metrics = credit_advantages(sharp("exact"), groups)
    # v: ep0 v({0})=v({1})=0.25, v(M)=1 -> phi=(0.5, 0.5);
    #    ep1, ep2: v({0})=0.25, v({1})=0, v(M)=0.25 -> (0.25, 0)
    r_w0 = [1 + 0.9 * 0.5 + 0.1, 0 + 0.9 * 0.25 + 0.1, 0 + 0.9 * 0.25 + 0.1]
    # the distractor's result looks valid; the error's does not
    r_w1 = [1 + 0.9 * 0.5 + 0.1, 0 + 0.0 + 0.1, 0.0]
    a_w0, a_w1, a_pl = grpo(np.array(r_w0)), grpo(np.array(r_w1)), grpo(np.array([1.0, 0.0, 0.0]))
    for i, ep in enumerate(groups[0].episodes):
        assert [adv.scalar(t) for t in ep.turns] == pytest.approx([a_pl[i], a_w0[i], a_w1[i], a_pl[i]])
    assert metrics["rescores"] == 3 * 4 and metrics["rescores_total"] == 12
    assert metrics["distractor_rate"] == pytest.approx(1 / 6)
    # the right tool call gets more credit than the distractor within the failed episodes
    assert adv.scalar(groups[0].episodes[1].turns[2]) > adv.scalar(groups[0].episodes[2].turns[2])
    # credit is a value: nothing was written into the episodes
    assert not any(hasattr(t, "advantage") for ep in groups[0].episodes for t in ep.turns)


def test_credit_loo_differs_from_exact_on_joint_success():
    groups = group()
    adv, _ = credit_advantages(sharp("loo"), groups)
    r_w0 = [1 + 0.9 * 0.75 + 0.1, 0 + 0.9 * 0.25 + 0.1, 0 + 0.9 * 0.25 + 0.1]
    assert [adv.scalar(ep.turns[1]) for ep in groups[0].episodes] == pytest.approx(list(grpo(np.array(r_w0))))


def test_credit_broadcast_is_grpo():
    groups = group()
    adv, metrics = credit_advantages(sharp("broadcast"), groups)
    expected = grpo(np.array([1.0, 0.0, 0.0]))
    for i, ep in enumerate(groups[0].episodes):
        assert all(adv.scalar(t) == pytest.approx(expected[i]) for t in ep.turns)
    assert metrics["rescores"] == 0


def test_credit_mc_agrees_with_exact_shapley_within_its_error():
    """Monte-Carlo phi of every worker of every episode is within 4 standard errors of exact Shapley
    (with two workers there are only two orderings, so a fair sample of them recovers it closely)."""
    exact, mc = sharp("exact"), sharp("mc", permutations=64)
    for ei, ep in enumerate(group()[0].episodes):
        record = ep.info["record"]
        phi_exact, _, _ = exact.contributions(record, 2, salt=ei)
        phi_mc, n, stderr = mc.contributions(record, 2, salt=ei)
        assert n <= 4
        for m in (0, 1):
            assert abs(phi_mc[m] - phi_exact[m]) <= 4 * stderr + 1e-9, (ei, m, phi_mc, phi_exact, stderr)
    _, metrics = credit_advantages(mc, group())
    assert metrics["mc_stderr_mean"] >= 0 and metrics["rescores"] <= 12


def test_bad_settings_are_errors():
    with pytest.raises(ValueError, match="method.credit must be one of broadcast"):
        sharp("shapley")
    with pytest.raises(ValueError, match="permutations must be >= 2"):
        sharp("mc", permutations=1)
    with pytest.raises(ValueError, match=">= 2"):
        shapley_values_mc([0, 1], lambda s: 0.0, permutations=1, seed=0)

    class NoReplay:
        name = "arith"

    assert isinstance(_Env(), CounterfactualReplay) and not isinstance(NoReplay(), CounterfactualReplay)
    assert (sharp("exact").env_protocols() == (CounterfactualReplay,)
            and sharp("broadcast").env_protocols() == ())


def test_a_replay_credit_on_an_environment_without_replay_fails_before_the_run():
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    cfg = compose("grpo", ["scale=smoke"])  # arith: no counterfactual replay
    cfg.method = {"name": "sharp", "credit": "loo"}
    with pytest.raises(ValueError, match="CounterfactualReplay"):
        resolve(cfg, METHODS)
    cfg.method = {"name": "sharp", "credit": "broadcast"}
    resolve(cfg, METHODS)


# ---- configs --------------------------------------------------------------------------------------
def test_every_cpu_cell_composes_and_resolves():
    """One seed per arm is composed and checked (every seed of an arm differs only in `seed`); the
    seeds are one list per scale in replication.yaml, so every arm runs the same seeds."""
    from experiments.replicate import load_replication, plan, validate_cells

    cells = plan("sharp", "cpu", seeds=[0])
    envs = {"toolplan-k2", "toolplan-k4", "toolhops-chain-k2", "toolhops-chain-k5", "toolhops-redundant-k2",
            "toolhops-subst-k4"}
    assert {c.env for c in cells} == envs
    cfgs = validate_cells(cells)
    budgets = {(c.trainer.steps, c.trainer.tasks_per_step, c.trainer.group_size, c.trainer.lr) for c in cfgs}
    assert len(budgets) == 1  # every arm gets the same RL budget
    for env in envs:  # within one setting: the same settings (model and warm start too) but the credit
        mine = [cfg for c, cfg in zip(cells, cfgs, strict=True) if c.env == env]
        assert len({(repr(cfg.env), cfg.eval.k, cfg.eval.split, repr(cfg.model), repr(cfg.sft))
                    for cfg in mine}) == 1, env
    hops = [cfg for c, cfg in zip(cells, cfgs, strict=True) if c.env.startswith("toolhops")]
    assert all(cfg.env["heldout_size"] >= 512 for cfg in hops)
    subst = [cfg for c, cfg in zip(cells, cfgs, strict=True) if c.env == "toolhops-subst-k4"]
    # #37: weights matched, no tool reward, so the arms differ in the credit's signal only
    assert {(cfg.method["weights"], cfg.method["lambda_s"], cfg.method["lambda_p"]) for cfg in subst} == \
        {("matched", 1.0, 0.0)}
    assert sorted(cfg.method["credit"] for cfg in subst) == ["broadcast", "exact", "local", "loo", "mc"]
    # #37's own model and warm start (the cpu scale's 2-layer model could not play it); the others keep #17's
    assert {(cfg.model.num_layers, cfg.model.hidden_size, cfg.sft.steps, cfg.sft.demos) for cfg in subst} == \
        {(4, 128, 3000, 1024)}
    assert {(cfg.model.num_layers, cfg.sft.steps) for c, cfg in zip(cells, cfgs, strict=True)
            if c.env != "toolhops-subst-k4"} == {(2, 1500)}
    assert len(load_replication("sharp").seeds["cpu"]) >= 5


def test_paper_scale_refuses_without_model_or_data(tmp_path):
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    cfg = compose("sharp", ["scale=paper"])
    assert (cfg.trainer.group_size == 8 and cfg.method["lambda_s"] == 0.9
            and cfg.model.hf_id == "Qwen/Qwen3-8B")
    with pytest.raises(ValueError, match="Qwen/Qwen3-8B"):
        resolve(cfg, METHODS)
    model = tmp_path / "qwen"
    model.mkdir()
    cfg = compose("sharp", ["scale=paper", f"model.path={model}"])
    with pytest.raises(ValueError, match="paper_data"):
        resolve(cfg, METHODS)


# ---- the claims table ---------------------------------------------------------------------------
def test_gap_growth_and_verdicts():
    """Paired by seed, the card's four verdicts, and the power rule (never fewer than 5 seeds)."""
    from paper.claims import table_verdict
    from replications.sharp.tables import MARGIN, gap, gap_growth

    def verdict(iv, n, sd):
        return table_verdict(iv, n, sd, MARGIN)

    rng = np.random.default_rng(0)
    noise = lambda: float(rng.normal(0, 0.01))  # noqa: E731
    # what a seed shares across arms (its warm start): pairing removes it
    base = [0.2 + 0.05 * s for s in range(8)]
    runs = {("toolplan", k, arm): [{"seed": s,
                                    "final": base[s] + {"grpo": 0.0, "sharp-exact": gain}[arm] + noise()}
                                   for s in range(8)]
            for k, gain in ((2, 0.02), (4, 0.30)) for arm in ("grpo", "sharp-exact")}
    (m, lo, hi), n, sd = gap_growth(runs, 2, 4)
    assert n == 8 and m == pytest.approx(0.28, abs=0.02) and 0 < lo <= m <= hi and sd < 0.05
    assert verdict((m, lo, hi), n, sd) == "holds"
    (m2, lo2, hi2), n2, sd2 = gap(runs, 2)
    assert hi2 - lo2 < 0.05  # the seeds' shared spread (0.35) is gone from the paired interval
    assert (verdict((0.0, -0.01, 0.01), 8, 0.01) == "no effect"
            and verdict((-0.2, -0.3, -0.1), 8, 0.01) == "opposite")
    assert verdict((0.02, -0.04, 0.08), 8, 0.01) == "inconclusive"
    assert verdict((m, lo, hi), 3, sd) == "inconclusive"  # rule v3: under 5 pairs, whatever the interval
    assert verdict(gap_growth({}, 2, 4)[0], 0, float("nan")) == "inconclusive"


# ---- #17: the local arm (the variants where credit can matter: test_sharp_toolhops.py) ---------------
def test_own_slot_by_hand():
    from replications.sharp.method import own_slot

    # toolplan's record: worker m answers fact m
    assert own_slot({"truth": ["Q", "F"], "results": ["Q", "X"]}, 2) == {0: 1.0, 1: 0.0}
    # redundancy: workers 0 and 2 on fact 0, worker 1 on fact 1; a missing result counts as wrong
    rec = {"truth": ["a", "b"], "worker_truth": ["a", "b", "a"], "results": ["a", "c"]}
    assert own_slot(rec, 3) == {0: 1.0, 1: 0.0, 2: 0.0}


def test_credit_local_by_hand():
    """R_m = R^b + lambda_s [own result right] + lambda_p R^tool, no replay (group() of the toolplan
    tests)."""
    groups = group()
    m = sharp("local")
    assert m.env_protocols() == ()
    adv, metrics = credit_advantages(m, groups)
    r_w0 = [1 + 0.9 + 0.1, 0 + 0.9 + 0.1, 0 + 0.9 + 0.1]
    r_w1 = [1 + 0.9 + 0.1, 0 + 0.0 + 0.1, 0.0]
    a_w0, a_w1 = grpo(np.array(r_w0)), grpo(np.array(r_w1))
    for i, ep in enumerate(groups[0].episodes):
        assert [adv.scalar(t) for t in ep.turns[1:3]] == pytest.approx([a_w0[i], a_w1[i]])
    assert metrics["rescores"] == 0


def test_steps_to_half_by_hand():
    from replications.sharp.tables import steps_to

    # trailing means over 3 steps: 0.2, 0.3, 0.4, 0.5 -> step 3
    assert steps_to([0.2, 0.4, 0.6, 0.5, 0.9]) == 3.0
    assert steps_to([0.6, 0.1]) == 0.0  # the first step's window is itself
    assert steps_to([0.1, 0.2, 0.3]) == 3.0  # never: censored at the budget
