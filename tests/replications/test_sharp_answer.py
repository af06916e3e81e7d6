"""#37: the answer-only coalition value with substitutes (envs/testbeds/toolhops.py `value`), weights matched
(replications/sharp/shapley.py `matched_credit`), and the design check's reversal share, by hand."""

import random

import numpy as np
import pytest

from common.config import build_dataclass
from replications.sharp.method import SHARP, SHARPConfig, leave_one_out, own_slot, shapley_values
from replications.sharp.shapley import matched_credit
from tests.helpers import run_view


def shadowed_record(value="exact"):
    """2 facts, 3 workers: worker 0 calls fact 0's distractor, worker 1 fact 1's right tool, worker 2 fact
    0's right tool; the planner answers each fact with its first valid result, so fact 0 is the decoy."""
    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv, decoy, distractor_tool, fact, right_tool

    env = ToolHopsEnv(ToolHopsConfig(mode="parallel", k=2, extra_workers=1, value=value, train_size=4,
                                     heldout_size=4, dev_size=4))
    ep = env.new_episode({"world": 7, "attrs": ["boss", "twin"], "entities": ["k", "m"]}, random.Random(0))
    ep.start()
    for action in (" boss twin boss", " " + distractor_tool("boss", "k", 4), " " + right_tool("twin", "m", 4),
                   " " + right_tool("boss", "k", 4), f" {decoy('boss', 'k', 7)} {fact('twin', 'm', 7)}"):
        r = ep.step(action)
    assert r.reward == 0.0
    return env, r.info["record"]


def test_coalition_values_by_hand():
    from envs.testbeds.toolhops import coalition_value

    truth = ["a", "b", "c", "d"]
    assert coalition_value(["a", "b", "c", "d"], truth, "exact") == 1.0
    assert coalition_value(["a", "b", "c", "x"], truth, "exact") == 0.0
    assert coalition_value(["a", "b", "?", "?"], truth, "soft") == pytest.approx(0.25)
    # harm: 2 right (1/4), 1 wrong (-1/8), 1 placeholder (0)
    assert coalition_value(["a", "b", "x", "?"], truth, "harm") == pytest.approx(0.25 - 0.125)


def test_answer_only_value_with_a_shadowed_right_worker_by_hand():
    """v(S) = 1 iff workers 1 and 2 are in S and worker 0 is not (masking the distractor lets the planner's
    replay use worker 2's right value), else 0. Shapley (weights 1/3, 1/6, 1/3 for |S| = 0, 1, 2):
    phi_0 = 1/3 (v(M) - v({1,2})) = -1/3, phi_1 = 1/6 (v({1,2}) - v({2})) = 1/6, phi_2 = 1/6; sum 0 = v(M).
    Leave-one-out: -1, 0, 0; own slot: 0, 1, 1; broadcast: 0 for all."""
    env, rec = shadowed_record()
    value = lambda s: env.replay(rec, frozenset({0, 1, 2}) - s).value  # noqa: E731
    assert value(frozenset({1, 2})) == 1.0 and value(frozenset({0, 1, 2})) == 0.0
    assert value(frozenset({0, 1})) == 0.0 and value(frozenset({1})) == 0.0
    assert shapley_values([0, 1, 2], value) == pytest.approx({0: -1 / 3, 1: 1 / 6, 2: 1 / 6})
    assert leave_one_out([0, 1, 2], value) == pytest.approx({0: -1.0, 1: 0.0, 2: 0.0})
    assert own_slot(rec, 3) == {0: 0.0, 1: 1.0, 2: 1.0}


def test_an_unknown_value_is_an_error():
    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv

    with pytest.raises(ValueError, match="env.value"):
        ToolHopsEnv(ToolHopsConfig(value="f1"))


def test_matched_credit_by_hand():
    """worker 0: 1, 0, 1, 0 (mean 1/2, SD 1/2) -> 1, -1, 1, -1; worker 1: 0, 0, 2, 0 (mean 1/2, SD sqrt(3)/2)
    -> -1/sqrt(3) three times and sqrt(3); worker 2 constant -> 0 (no signal)."""
    credits = [[{0: 1.0, 1: 0.0, 2: 0.3}, {0: 0.0, 1: 0.0, 2: 0.3}],
               [{0: 1.0, 1: 2.0, 2: 0.3}, {0: 0.0, 1: 0.0, 2: 0.3}]]
    out = matched_credit(credits)
    assert [e[0] for g in out for e in g] == pytest.approx([1, -1, 1, -1])
    s = 3 ** 0.5
    assert [e[1] for g in out for e in g] == pytest.approx([-1 / s, -1 / s, s, -1 / s])
    assert [e[2] for g in out for e in g] == [0.0] * 4


def test_matched_weights_give_every_credit_the_same_per_worker_sd():
    """On a batch the demonstrator plays (the #37 setting), each worker's reward minus R^b has SD lambda_s
    in every credit arm (the tool reward off), and the credit reaches the reward as R^b + lambda_s c'."""
    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv
    from replications.sharp.candidates import scripted_groups

    env = ToolHopsEnv(ToolHopsConfig(mode="parallel", k=4, extra_workers=2, value="exact", train_size=8,
                                     heldout_size=8, dev_size=8))
    groups = scripted_groups(env, 8, 4, seed=1)
    for credit in ("local", "loo", "exact", "mc"):
        cfg = build_dataclass(SHARPConfig, {"credit": credit, "weights": "matched", "lambda_s": 0.7,
                                            "lambda_p": 0.0}, "method")
        m = SHARP(cfg, run_view(env))
        values = m.credit(groups, 0).values
        extra = {w: [v[w] - e.reward for g, vg in zip(groups, values, strict=True)
                     for e, v in zip(g.episodes, vg, strict=True)] for w in ("worker_0", "worker_5")}
        sds = [float(np.std(xs)) for xs in extra.values()]
        assert all(sd == pytest.approx(0.7, abs=1e-9) or sd == 0.0 for sd in sds), (credit, sds)
        assert max(sds) == pytest.approx(0.7, abs=1e-9), credit


def test_reversal_share_by_hand():
    """Cell A: b orders (0, 1) and (0, 2); a reverses (0, 1) only; (1, 2) and cell B are ties under b."""
    from experiments.shared_batch import reversal_share

    a, b = np.array([0.5, 0.0, 1.0, 3.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0, 0.0])
    assert reversal_share(a, b, ["A", "A", "A", "B", "B"]) == pytest.approx(0.5)
    assert reversal_share(b, b, ["A"] * 5) == 0.0
    assert np.isnan(reversal_share(a, np.zeros(5), ["A"] * 5))


def test_oracle_share_by_hand():
    """GRPO 0.1, 0.2, 0.3; local +0.2 each; exact +0.1 each: share 0.5 and every resample gives 0.5.
    With exact +0.0, +0.1, +0.2 and local +0.2, +0.2, +0.2: share 0.1 / 0.2 = 0.5, interval inside [0, 1]."""
    from replications.sharp.tables import oracle_share

    def runs(exact_gain):
        grpo = [0.1, 0.2, 0.3]
        arms = {"grpo": grpo, "local": [g + 0.2 for g in grpo],
                "sharp-exact": [g + d for g, d in zip(grpo, exact_gain, strict=True)]}
        return {("v", 4, a): [{"seed": s, "success_auc": x} for s, x in enumerate(xs)]
                for a, xs in arms.items()}

    assert oracle_share(runs([0.1, 0.1, 0.1]), "v", 4, "sharp-exact") == pytest.approx((0.5, 0.5, 0.5, 3))
    share, lo, hi, n = oracle_share(runs([0.0, 0.1, 0.2]), "v", 4, "sharp-exact")
    assert (share, n) == (pytest.approx(0.5), 3) and 0.0 <= lo < 0.5 < hi <= 1.0
