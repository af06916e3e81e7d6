"""IAPO's credit hook on played service_desk groups (per-token advantages, arms, control) and its checks."""

import pytest

from common.config import build_dataclass
from common.credit import grpo
from common.episode import Group
from replications.iapo.method import IAPO, IAPOConfig, action_turns, provenance_annotator, routing_weights
from tests.helpers import credit_advantages, run_view
from tests.replications.iapo.test_iapo_graph import played

IDEAL = ["ask", "lookup", "ok", "ok", "refund cash K", "end"]
# out of budget: reward 0
TRAP = ["ask", "refund cash Q", "lookup", "lookup", "ok", "ok", "refund cash K", "end"]
SLOW = ["ask", "lookup", "lookup", "ok", "ok", "refund cash K", "end"]  # redundant lookup, still right


def method(scale="cpu", **kw):
    m = IAPO(build_dataclass(IAPOConfig, kw, "method"), run_view(None, scale=scale))
    m.validate()
    return m


def groups():
    return [Group("t", 2, [played(IDEAL), played(TRAP), played(SLOW),
                           played(["ask", "lookup", "ok", "ok", "refund card K", "end"])])]


def test_broadcast_is_grpo():
    gs = groups()
    adv, _ = credit_advantages(method(credit="broadcast"), gs)
    expected = grpo([e.reward for e in gs[0].episodes])
    for e, a in zip(gs[0].episodes, expected, strict=True):
        assert all(adv.tokens(t) == [pytest.approx(a)] * t.num_action_tokens for t in e.turns)


def test_iapo_routes_the_same_mass_by_hand():
    gs = groups()
    assert [e.reward for e in gs[0].episodes] == [1.0, 0.0, 1.0, 0.0]
    adv, metrics = credit_advantages(method(credit="iapo"), gs)
    a_G = grpo([1.0, 0.0, 1.0, 0.0])
    for e, a in zip(gs[0].episodes, a_G, strict=True):
        per_token = [x for t in e.turns for x in adv.tokens(t)]
        assert sum(per_token) == pytest.approx(a * len(per_token))  # sum_i L_i A w_i = A L
        assert all(x * a > 0 for x in per_token)  # sign kept
        lengths = [t.num_action_tokens for t in e.turns]
        w = routing_weights(lengths, *provenance_annotator(e).degrees(), a)
        assert [adv.scalar(t) for t in e.turns] == pytest.approx([a * x for x in w])
    ideal, trap, slow, _ = gs[0].episodes
    # success: the used lookup (1) beats the chatter (2); the redundant lookup (2 in SLOW) gets the least
    assert adv.scalar(ideal.turns[1]) > adv.scalar(ideal.turns[2]) > 0
    assert adv.scalar(slow.turns[2]) == min(adv.scalar(t) for t in slow.turns)
    # failure: the trap refund (1) carries the most blame
    assert adv.scalar(trap.turns[1]) == min(adv.scalar(t) for t in trap.turns)
    assert metrics["weight_spread"] > 0 and metrics["credit_share_error"] > 1


def test_shuffled_keeps_the_distribution_not_the_placement():
    gs = groups()
    m_iapo, m_shuf = method(credit="iapo"), method(credit="shuffled")
    c_iapo, c_shuf = m_iapo.credit(gs, 3), m_shuf.credit(gs, 3)
    # seeded by (seed, step, group, episode)
    assert c_shuf.tokens == method(credit="shuffled").credit(gs, 3).tokens
    assert c_shuf.tokens != c_iapo.tokens
    for i, e in enumerate(gs[0].episodes):
        a = c_iapo.values[0][i]["*"]
        w_iapo = sorted(round(c_iapo.tokens[(0, i, t)][0] / a, 9) for t in action_turns(e)) if a else []
        w_shuf = [c_shuf.tokens[(0, i, t)][0] / a for t in action_turns(e)] if a else []
        lengths = [e.turns[t].num_action_tokens for t in action_turns(e)]
        if a:
            assert sum(w * n for w, n in zip(w_shuf, lengths, strict=True)) == pytest.approx(sum(lengths))
            assert len(w_shuf) == len(w_iapo)


def test_zero_advantage_groups_train_nothing():
    gs = [Group("t", 2, [played(IDEAL), played(IDEAL)])]
    adv, _ = credit_advantages(method(credit="iapo"), gs)
    assert all(adv.scalar(t) == 0 for e in gs[0].episodes for t in e.turns)


@pytest.mark.parametrize("kw, match", [
    ({"credit": "broadcast", "beta_plus": 0.0}, "no effect with method.credit=broadcast"),
    ({"clip": 0.0}, "method.clip must be > 0"),
    ({"annotator": "llm"}, "paper-scale annotator"),
    ({"annotator_model": "/x"}, "no effect with method.annotator=provenance"),
])
def test_bad_settings_fail_before_the_run(kw, match):
    with pytest.raises(ValueError, match=match):
        method(**kw)


def test_real_benchmark_scales_refuse_without_their_environments(monkeypatch):
    import envs.registry as envs

    monkeypatch.delitem(envs.ENVS, "tau2", raising=False)
    with pytest.raises(ValueError, match=r"scale=small trains on env=tau2 .*not registered"):
        method(scale="small")
    monkeypatch.setitem(envs.ENVS, "tau2", object)
    monkeypatch.setitem(envs.ENVS, "bfcl", object)
    method(scale="small")  # registered: no refusal from the method


def test_gap_growth_by_hand():
    from replications.iapo.tables import gap, gap_growth, verdict

    runs = {"grpo": [{"seed": s, "final_0": 0.5, "final_4": 0.2 + 0.01 * s} for s in range(3)],
            "iapo": [{"seed": s, "final_0": 0.52, "final_4": 0.3 + 0.02 * s} for s in range(3)]}
    (m, lo, hi), n, sd = gap(runs, 4)
    assert n == 3 and m == pytest.approx(0.11) and sd == pytest.approx(0.01)  # diffs 0.10, 0.11, 0.12
    (m, _, _), n, _ = gap_growth(runs, 0, 4)
    assert n == 3 and m == pytest.approx(0.11 - 0.02)
    assert verdict((m, lo, hi), 3, sd) == "inconclusive"  # rule v3: under 5 pairs, whatever the interval
