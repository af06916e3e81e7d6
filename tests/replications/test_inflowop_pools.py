"""InFlowOp's pools drawn from a prior (issue #42): the prior and its draws, exploration by hand, the
single agent with retry, the platform facts in the cost, the pool play's pairing, the pool tables."""

import math
import random
import re
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from envs.testbeds.braid import CATEGORIES, BraidTask, Node, apply_op
from replications.inflowop.agents import (
    COMPOSITION,
    HANDOFF,
    AgentCard,
    Prior,
    Profile,
    ScriptedAgent,
    agents_by_name,
    reliability,
)
from replications.inflowop.checks import check_settings
from replications.inflowop.execute import Executor
from replications.inflowop.method import InFlowOpConfig, best_agent, cost
from replications.inflowop.plan import Weights, single_plan, template_plan
from replications.inflowop.pools import HAND_SET, Pool, PoolPrior, best_single, draw_pool

ROOT = Path(__file__).resolve().parents[2]
LIST = AgentCard("L", frozenset({"list"}), 1.0, 0.2)


def chain() -> BraidTask:
    """x0 -> sort (0) -> sum (1) -> add 3 (2)."""
    return BraidTask(0, ([4, 1, 2],),
                     (Node(0, "sort", 0, ("x0",)), Node(1, "sum", 0, (0,)), Node(2, "add", 3, (1,))))


# ---- exploration (optimistic reliability) by hand --------------------------------------------------
def test_optimistic_reliability_by_hand():
    prior = Prior(0.9, 0.5, 4.0)
    p = Profile()
    p.counts[("L", "num")] = [8, 10]
    r = (8 + 4 * 0.5) / (10 + 4)
    assert reliability(LIST, "num", p, prior) == pytest.approx(r)
    assert reliability(LIST, "num", p, prior, explore=1.0) == pytest.approx(r + math.sqrt(r * (1 - r) / 15))
    half = r + 0.5 * math.sqrt(r * (1 - r) / 15)
    assert reliability(LIST, "num", p, prior, explore=0.5) == pytest.approx(half)
    # no runs: 0.9 + 1 * sqrt(0.09 / 5) = 1.034 -> capped at 0.999; undeclared 0.5 + sqrt(0.25 / 5)
    assert reliability(LIST, "list", None, prior, explore=1.0) == 0.999
    assert reliability(LIST, "num", None, prior, explore=1.0) == pytest.approx(0.5 + math.sqrt(0.05))
    # many runs: the bonus shrinks to nothing (96 of 100: r = 99.6/104, bonus sqrt(r(1-r)/105))
    p.counts[("L", "list")] = [96, 100]
    r = 99.6 / 104
    assert reliability(LIST, "list", p, prior, explore=1.0) == pytest.approx(r + math.sqrt(r * (1 - r) / 105))


def test_exploration_tries_an_untried_agent_that_the_mean_would_never_pick():
    t = BraidTask(0, ([4, 1, 2],), (Node(0, "sort", 0, ("x0",)),))
    tried = AgentCard("tried", frozenset({"list"}), 1.0, 0.2)
    fresh = AgentCard("fresh", frozenset({"list"}), 1.0, 0.2)
    p = Profile()
    p.counts[("tried", "list")] = [48, 50]  # mean (48 + 3.6) / 54 = 0.956 > fresh's prior 0.9
    w = Weights(0.0, 0.0)
    for kappa, expected in ((0.0, "tried"), (1.0, "fresh")):
        def rel(card, c, kappa=kappa):
            return reliability(card, c, p, Prior(), kappa)
        assert best_agent(t, [0], [tried, fresh], rel, w)[0] == expected
    # fresh tried 40 times and bad (20 of 40): optimism no longer saves it
    p.counts[("fresh", "list")] = [20, 40]
    def optimistic(card, c):
        return reliability(card, c, p, Prior(), 1.0)

    assert best_agent(t, [0], [tried, fresh], optimistic, w)[0] == "tried"


# ---- the platform facts in the cost --------------------------------------------------------------
def test_cost_uses_the_pool_platform_facts_by_hand():
    t = chain()

    def rel(card, c):
        return 0.8

    # S = {1, 2}: two steps, one handoff (from node 0), one composition factor
    w = Weights(0.1, 0.0, handoff=0.9, composition=0.95)
    expected = -2 * math.log(0.8) - math.log(0.95) - math.log(0.9) + 0.1 * (1.0 + 2 * 0.2)
    assert cost(t, [1, 2], LIST, rel, w) == pytest.approx(expected)
    default = -2 * math.log(0.8) - math.log(COMPOSITION) - math.log(HANDOFF) + 0.1 * 1.4
    assert cost(t, [1, 2], LIST, rel, Weights(0.1, 0.0)) == pytest.approx(default)


def test_the_hand_set_pool_is_agents_py_table():
    assert HAND_SET.by_name() == agents_by_name()
    assert HAND_SET.by_name(False) == agents_by_name(with_created=False)
    assert (HAND_SET.handoff, HAND_SET.composition) == (HANDOFF, COMPOSITION)
    assert all(a.garbage == 0.5 and a.composition == COMPOSITION for a in HAND_SET.by_name().values())


# ---- the prior ---------------------------------------------------------------------------------
def test_the_declared_prior_is_the_config_and_pools_are_reproducible_and_in_range():
    declared = yaml.safe_load((ROOT / "replications/inflowop/conf/pool/prior.yaml").read_text())["method"]
    prior = PoolPrior.of(declared["pool_prior"])
    assert prior == PoolPrior()  # the yaml states every default
    assert set(declared["pool_prior"]) == set(PoolPrior.__dataclass_fields__)
    assert draw_pool(7, prior) == draw_pool(7, prior) and draw_pool(7, prior) != draw_pool(8, prior)
    pools = [draw_pool(i, prior) for i in range(400)]
    generalists = over = 0
    for pool in pools:
        assert prior.handoff[0] <= pool.handoff <= prior.handoff[1]
        assert prior.composition[0] <= pool.composition <= prior.composition[1]
        assert [a.name for a in pool.agents] == [f"agent-{i}" for i in range(5)]
        assert [a.name for a in pool.created] == [f"new-{c}" for c in CATEGORIES]
        for a in pool.agents:
            assert all(0.02 <= e <= 0.5 for e in a.error.values())
            assert prior.call_latency[0] <= a.card.call_latency <= prior.call_latency[1]
            assert a.garbage == pool.garbage and a.composition == pool.composition
            if len(a.card.declares) == 4:  # a generalist (a specialist declares at most 2 + 1)
                generalists += 1
                assert all(0.05 <= e <= 0.30 for e in a.error.values())
                continue
            home = {c for c in CATEGORIES if a.error[c] <= 0.12}  # home errors <= 0.12 < 0.15 elsewhere
            assert 1 <= len(home) <= 2 and home <= a.card.declares
            extra = a.card.declares - home
            assert len(extra) <= 1 and all(a.error[c] >= 0.15 for c in extra)
            over += bool(extra)
    n = 400 * 5
    assert 0.17 < generalists / n < 0.23  # p = 0.2
    assert 0.26 < over / (n - generalists) < 0.34  # p = 0.3
    with pytest.raises(ValueError, match="unknown"):
        PoolPrior.of({"agent": 3})
    with pytest.raises(ValueError, match="out of range"):
        PoolPrior.of({"handoff": [0.9, 1.2]}).check()


def test_best_single_is_the_most_accurate_agent_on_dev():
    perfect = {c: 0.0 for c in CATEGORIES}
    bad = {c: 0.6 for c in CATEGORIES}
    agents = tuple(ScriptedAgent(AgentCard(f"agent-{i}", frozenset(CATEGORIES), 1.0, 0.1), e, composition=1.0)
                   for i, e in enumerate((bad, perfect, perfect)))
    pool = Pool(3, agents, (), 1.0, 1.0, 0.5)
    name, scores = best_single(pool, [chain()] * 20)
    assert name == "agent-1" and scores["agent-1"] == 1.0 and scores["agent-0"] < 0.5  # ties: the first


# ---- single agent with retry, template fallback --------------------------------------------------
class Malformed(ScriptedAgent):
    def attempt(self, op, k, inputs, position, rng):
        return None


def test_single_with_retry_reruns_the_task_on_a_broken_contract_at_most_max_repairs_times():
    t = chain()
    never = {c: 0.0 for c in CATEGORIES}
    agents = {"M": Malformed(AgentCard("M", frozenset(CATEGORIES), 1.0, 0.1), never),
              "P": ScriptedAgent(AgentCard("P", frozenset(CATEGORIES), 1.0, 0.1), never, composition=1.0)}
    cards = [a.card for a in agents.values()]

    def run(agent, repair):
        return Executor(t, agents, cards, lambda card, c: 0.9, Weights(0, 0), random.Random(0), repair=repair,
                        max_repairs=4, handoff=1.0).run(single_plan(t, agent))

    assert run("M", "rerun").calls == 5 and run("M", "rerun").repair_calls == 4  # 1 + 4 re-runs
    assert run("M", "none").calls == 1
    ok = run("P", "rerun")
    assert ok.calls == 1 and ok.values[2] == apply_op("add", 3, [apply_op("sum", 0, [[1, 2, 4]])])


def test_template_falls_back_when_no_pool_card_declares_a_category():
    t = chain()  # sort, sum: list; add: num
    lister = AgentCard("L", frozenset({"list"}), 1.0, 0.2)
    new_num = AgentCard("new-num", frozenset({"num"}), 1.5, 0.3, created=True, creation_latency=2.0)
    assert [s.agent for s in template_plan(t, [lister, new_num])] == ["L", "L", "new-num"]
    assert [s.agent for s in template_plan(t, [lister])] == ["L", "L", "L"]


# ---- settings, the pool play, the tables ---------------------------------------------------------
def test_pool_settings_are_checked():
    prior = yaml.safe_load((ROOT / "replications/inflowop/conf/pool/prior.yaml").read_text())["method"]
    ok = replace(InFlowOpConfig(), pools=2, pool_prior=prior["pool_prior"], explore=1.0, frontier=[0.1])
    check_settings(ok, "hf")
    for bad in (replace(ok, explore=-1.0), replace(ok, arm="single"), replace(ok, pools=0),
                replace(ok, pool_prior={"garbage": [0.9, 0.1]}), replace(ok, policy_agents=["list"])):
        with pytest.raises(ValueError):
            check_settings(bad, "hf")


def test_pool_play_pairs_arms_by_pool_and_reports_per_pool_numbers():
    from common.episode import tasks_of
    from replications.inflowop.pool_play import play_pools
    from replications.inflowop.tune import env_from_conf

    env = env_from_conf()
    rows = tasks_of(env.task_set()["dev"])[:12]
    prior = yaml.safe_load((ROOT / "replications/inflowop/conf/pool/prior.yaml").read_text())["method"]
    cfg = replace(InFlowOpConfig(), pools=2, pool_prior=prior["pool_prior"], explore=1.0, warmup_tasks=8,
                  frontier=[0.5])
    groups = play_pools(env, cfg, 3, rows)
    assert [g.task_id for g in groups] == [r.id for r in rows] and all(len(g.episodes) == 2 for g in groups)
    for j, pool_id in enumerate((6, 7)):  # seed 3 x 2 pools
        assert all(f"pool{pool_id}_success" in g.episodes[j].info for g in groups)
        assert all("frontier_b0.5_latency" in g.episodes[j].info for g in groups)
    again = play_pools(env, cfg, 3, rows)
    assert [[e.info for e in g.episodes] for g in groups] == [[e.info for e in g.episodes] for g in again]
    # frontier at the arm's own beta = the arm itself (same warm-up and draws)
    same = play_pools(env, replace(cfg, frontier=[0.02]), 3, rows)
    for g in same:
        for e in g.episodes:
            assert e.info["frontier_b0.02_success"] == e.info["success"]
            assert e.info["frontier_b0.02_latency"] == e.info["latency"]


def _run(arm, seed, metrics, mean):
    return SimpleNamespace(env="braid-pools", arm=arm, seed=seed, config={"method": {"beta": 0.02}},
                           evals={"final": {"mean@k": mean, "metrics": metrics}})


def test_pool_claims_table_by_hand_and_matches_the_card():
    from replications.inflowop import tables

    runs = [_run("pools-inflowop", 0, {"pool0_success": 0.9, "pool1_success": 0.8, "latency": 5.0}, 0.85),
            _run("pools-single-retry", 0, {"pool0_success": 0.7, "pool1_success": 0.82, "latency": 3.0},
                 0.76)]
    row = next(r for r in tables.pools_claims_table(runs).rows if r[0] == "pools-beats-single-retry")
    # gains +0.2, -0.02: one of two > 0, one of two >= 0.05, mean +0.09
    assert row[3:6] == ["2", "0.50", "0.50"] and row[6].startswith("+0.090 [")
    front = tables.frontier_table(runs).rows
    assert [r[0] for r in front] == ["pools-single-retry", "pools-inflowop"]
    assert [r[4] for r in front] == ["yes", "yes"]
    card = (ROOT / "replications/inflowop/CARD.md").read_text().split("\n---\n")[0].removeprefix("---\n")
    claims = {c["id"]: c for c in yaml.safe_load(card)["claims"]}
    for cid, a, b, margin in tables.POOL_CLAIMS:
        assert re.fullmatch(rf"{a} > {b}", claims[cid]["predicate"]) and claims[cid]["margin"] == margin
    assert {c for c in claims if c.startswith("pools-")} == {c[0] for c in tables.POOL_CLAIMS}
