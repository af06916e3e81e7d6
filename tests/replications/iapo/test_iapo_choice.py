"""IAPO on service_desk's `choice` setting (#39): the graph of played episodes by hand, IAPO's weights on
a failure caused upstream by hand, and the oracle-credit arm (the positive control) by hand."""

import math
import random

import pytest

from common.config import build_dataclass
from common.credit import grpo
from common.episode import Episode, Group, Turn
from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv
from replications.iapo.method import IAPO, IAPOConfig, oracle_weights, provenance_annotator
from tests.helpers import credit_advantages, run_view

RIGHT = ["archive", "ok", "sure", "refund cash", "end"]  # the task's word is `year`: archive is right
WRONG = ["orders", "ok", "sure", "refund cash", "end"]  # the refund errors: no order id


def played(actions, delay=2, task=None, **cfg):
    """A choice episode of scripted actions, recorded as the rollout records a model's (an action of w
    words has 1 + w tokens)."""
    t = task or {"setting": "choice", "word": "year", "method": "cash", "order": "K", "delay": delay,
                 "remarks": ["it was a gift", "the box was blue"][:delay], "name": "ann", "item": "lamp"}
    env = ServiceDeskEnv(ServiceDeskConfig(setting="choice", human_rate=0.0, **cfg))
    state = env.new_episode(t, random.Random(0))
    ep, obs = Episode("t", t["delay"]), state.start()
    for a in actions:
        ep.turns.append(Turn("agent", "policy", [1], [5] * (1 + len(a.split())), [0.0], a,
                             prompt_text=obs.text))
        result = state.step(a)
        for e in result.events:
            e.turn = len(ep.turns) - 1
            ep.events.append(e)
        if result.next is None:
            ep.reward = result.reward
            ep.info = result.info
            break
        obs = result.next
    return ep


def method(**kw):
    m = IAPO(build_dataclass(IAPOConfig, kw, "method"), run_view(None, scale="cpu"))
    m.validate()
    return m


def test_graphs_by_hand():
    right, wrong = played(RIGHT), played(WRONG)
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    # d+, d-, d_in (support in + user input), e
    assert provenance_annotator(right).degrees() == ([1, 0, 0, 1, 0], [0] * 5, [1, 1, 1, 2, 1], [0] * 5)
    assert provenance_annotator(wrong).degrees() == ([0] * 5, [1, 0, 0, 0, 0], [1, 1, 1, 1, 0],
                                                     [0, 0, 0, 1, 0])


def test_iapo_blames_the_consumer_of_an_upstream_failure_by_hand():
    """WRONG, A < 0: phi- = log 3 on the refund (e = 1, d_in = 1), 0 elsewhere; lengths [2, 2, 2, 3, 2],
    L = 11: mean 3 log 3 / 11 = 0.2996, sd 0.4893; z = +1.633 (refund), -0.612 (the rest), both clipped
    to +-0.25; normaliser (8 e^-0.25 + 3 e^0.25) / 11 = 0.91658: w = 1.4009 on the refund, 0.8497 on the
    rest, the wrong lookup included (IAPO's error routing blames the consumer, not the upstream choice)."""
    gs = [Group("t", 2, [played(RIGHT), played(WRONG)])]
    adv, _ = credit_advantages(method(credit="iapo"), gs)
    a = grpo([1.0, 0.0])[1]
    wrong = gs[0].episodes[1]
    norm = (8 * math.exp(-0.25) + 3 * math.exp(0.25)) / 11
    assert norm == pytest.approx(0.91658, abs=1e-5)
    expected = [math.exp(-0.25) / norm] * 3 + [math.exp(0.25) / norm, math.exp(-0.25) / norm]
    assert [adv.scalar(t) / a for t in wrong.turns] == pytest.approx(expected)
    assert expected[3] == pytest.approx(1.4009, abs=1e-4) and expected[0] == pytest.approx(0.8497, abs=1e-4)


def test_oracle_weights_by_hand():
    assert oracle_weights([2, 2, 2, 3, 2], [True, False, False, True, False]) == \
        pytest.approx([2.2, 0, 0, 2.2, 0])  # L = 11 over the 5 decision tokens
    assert oracle_weights([3], [True]) == [1.0] and oracle_weights([2, 1], [False, False]) == [1.0, 1.0]


def test_oracle_arm_puts_the_whole_advantage_on_the_lookup_and_the_refund():
    gs = [Group("t", 2, [played(RIGHT), played(WRONG), played(["archive", "ok", "end"])])]
    adv, _ = credit_advantages(method(credit="oracle"), gs)
    a_G = grpo([1.0, 0.0, 0.0])
    right, wrong, short = gs[0].episodes
    assert [adv.scalar(t) for t in right.turns] == pytest.approx([a_G[0] * 2.2, 0, 0, a_G[0] * 2.2, 0])
    assert [adv.scalar(t) for t in wrong.turns] == pytest.approx([a_G[1] * 2.2, 0, 0, a_G[1] * 2.2, 0])
    # no refund, a right lookup (marked right: not blamed) and no erring action: nothing to blame, broadcast
    assert [adv.scalar(t) for t in short.turns] == pytest.approx([a_G[2]] * 3)
    for e, a in zip(gs[0].episodes, a_G, strict=True):  # the mass and the sign kept
        assert sum(x for t in e.turns for x in adv.tokens(t)) == pytest.approx(a * sum(t.num_action_tokens
                                                                                        for t in e.turns))


def test_classic_episodes_have_no_decisions_so_the_oracle_is_grpo():
    from tests.replications.iapo.test_iapo_graph import played as classic

    gs = [Group("t", 2, [classic(["ask", "lookup", "ok", "ok", "refund cash K", "end"]),
                         classic(["ask", "lookup", "ok", "ok", "refund card K", "end"])])]
    adv, _ = credit_advantages(method(credit="oracle"), gs)
    for e, a in zip(gs[0].episodes, grpo([1.0, 0.0]), strict=True):
        assert [adv.scalar(t) for t in e.turns] == pytest.approx([a] * len(e.turns))


def test_oracle_blames_a_failures_bad_calls_and_never_credits_a_successs():
    """By hand: a success with a bad call (within the slack) credits only its lookup (2 tokens) and refund
    (3) of L = 13: w = 2.6, the bad call 0; a failure with two bad calls and no refund blames both bad calls,
    4 of L = 12 tokens: w = 3, not its lookup, which the environment marked right (before the first fix the
    bad calls got 0 and drifted; before the second the right lookup was blamed too: w = 2)."""
    ok = played(["archive", "xyz", "ok", "sure", "refund cash", "end"])
    bad = played(["archive", "xyz", "xyz", "ok", "sure", "end"])
    assert ok.reward == 1.0 and bad.reward == 0.0
    gs = [Group("t", 2, [ok, bad])]
    adv, _ = credit_advantages(method(credit="oracle"), gs)
    a_ok, a_bad = grpo([1.0, 0.0])
    assert [adv.scalar(t) for t in ok.turns] == pytest.approx([a_ok * 2.6, 0, 0, 0, a_ok * 2.6, 0])
    assert [adv.scalar(t) for t in bad.turns] == pytest.approx([0, a_bad * 3, a_bad * 3, 0, 0, 0])


def test_oracle_with_several_orders_blames_only_the_wrong_choice_and_its_consumer():
    """Three orders (`year`, `week`, `year`), D = 1: the second lookup is the wrong tool, its refund errors
    (no order id) and the customer moves on; the others are right. Lengths: lookups 2, acks 2, refunds 3,
    end 2: L = 3 x 7 + 2 = 23. The failure blames the wrong lookup and its erring refund only (5 tokens):
    w = 23 / 5 = 4.6 there, 0 on the two right orders' decisions."""
    more = [{"word": "week", "method": "card", "order": "B", "item": "mug", "remarks": ["it came late"]},
            {"word": "year", "method": "credit", "order": "C", "item": "pen", "remarks": ["i ordered two"]}]
    t = {"setting": "choice", "word": "year", "method": "cash", "order": "K", "delay": 1,
         "remarks": ["it was a gift"], "name": "ann", "item": "lamp", "more": more}
    ep = played(["archive", "ok", "refund cash", "archive", "sure", "refund card", "archive", "ok",
                 "refund credit", "end"], task=t, delays=[1], orders=3)
    assert ep.reward == 0.0 and len(ep.turns) == 10 and ep.info["right_tool"] == pytest.approx(2 / 3)
    gs = [Group("t", 2, [played(RIGHT), ep])]
    adv, _ = credit_advantages(method(credit="oracle"), gs)
    a = grpo([1.0, 0.0])[1]
    assert [adv.scalar(t) for t in ep.turns] == pytest.approx([0, 0, 0, a * 4.6, 0, a * 4.6, 0, 0, 0, 0])


def test_unit_oracle_puts_grpos_weight_on_the_decisions_and_nothing_elsewhere():
    """The unit oracle (#39): the oracle's actions at w = 1 (GRPO's per-token advantage), 0 elsewhere, so
    the lookup and the refund move as under GRPO and nothing else moves (the total mass is not kept)."""
    from replications.iapo.routing import unit_oracle_weights

    assert unit_oracle_weights([True, False, True]) == [1.0, 0.0, 1.0]
    assert unit_oracle_weights([False]) == [1.0]
    gs = [Group("t", 2, [played(RIGHT), played(WRONG)])]
    adv, _ = credit_advantages(method(credit="oracle-unit"), gs)
    a_G = grpo([1.0, 0.0])
    for e, a in zip(gs[0].episodes, a_G, strict=True):
        assert [adv.scalar(t) for t in e.turns] == pytest.approx([a, 0, 0, a, 0])
