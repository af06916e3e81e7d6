"""IAPO's routing weights against hand-computed cases, a slow reference, and their invariants."""

import math

import numpy as np
import pytest

from replications.iapo.method import features, routing_weights, routing_weights_reference

A, B = math.exp(-0.25), math.exp(0.25)  # the clipped multipliers at c = 0.25, before normalization


def test_flat_graph_gives_ones():
    # every action alike (here: each acts on user input): the graph says nothing, w = 1 (GRPO)
    for adv in (1.3, -0.7):
        assert routing_weights([3, 5, 2], [0, 0, 0], [0, 0, 0], [1, 1, 1], [0, 0, 0], adv) == [1.0, 1.0, 1.0]
        assert routing_weights([4], [2], [1], [1], [1], adv) == [1.0]
    # A = 0: nothing to route
    assert routing_weights([2, 2], [1, 0], [0, 0], [0, 0], [0, 0], 0.0) == [1.0, 1.0]


def test_features_by_hand():
    phi_p, phi_m = features([2, 0, 1], [0, 3, 0], [1, 1, 0], [0, 1, 1])
    assert phi_p == pytest.approx([math.log(4), math.log(2), math.log(2)])
    assert phi_m == pytest.approx([0.0, math.log(1 + 1 * (1 + 3 + 1)), math.log(2)])


def test_positive_advantage_by_hand():
    # two actions of 2 tokens; action 0's output was used (d+ = 1): phi+ = (log 2, 0), z = (1, -1),
    # clipped to (0.25, -0.25); no errors, so psi- = 0 and w = L m+ / sum L m+
    w = routing_weights([2, 2], [1, 0], [0, 0], [0, 0], [0, 0], advantage=0.8)
    assert w == pytest.approx([2 * B / (A + B), 2 * A / (A + B)])


def test_positive_advantage_with_an_error_by_hand():
    # action 0 used (d+ = 1), action 1 errored (e = 1): phi- = (0, log 2), psi- = (-log2/2, +log2/2)
    w = routing_weights([1, 1], [1, 0], [0, 0], [0, 0], [0, 1], advantage=1.0, beta_plus=0.05)
    raw = [B * 2 ** 0.025, A * 2 ** -0.025]
    assert w == pytest.approx([2 * r / sum(raw) for r in raw])
    # beta+ = 0: the error no longer cuts the second action's share
    assert (routing_weights([1, 1], [1, 0], [0, 0], [0, 0], [0, 1], 1.0, beta_plus=0.0)
            == pytest.approx([2 * B / (A + B), 2 * A / (A + B)]))


def test_negative_advantage_by_hand():
    # lengths (1, 1, 2); action 1 errored with a failed-use edge and user input: phi- = (0, log 4, 0)
    # mean_L = log4 / 4, z = (-0.577, 1.732, -0.577) -> clipped (-c, c, -c); m = raw / mean_L(raw)
    w = routing_weights([1, 1, 2], [0, 0, 0], [0, 1, 0], [1, 1, 0], [0, 1, 0], advantage=-1.0)
    norm = (A + B + 2 * A) / 4
    assert w == pytest.approx([A / norm, B / norm, A / norm])
    assert w[1] > 1 > w[0]  # the blame goes to the erroring action


def test_wider_clip_widens_the_weights():
    narrow = routing_weights([2, 2], [1, 0], [0, 0], [0, 0], [0, 0], 1.0, c=0.25)
    wide = routing_weights([2, 2], [1, 0], [0, 0], [0, 0], [0, 0], 1.0, c=0.5)
    assert wide[0] > narrow[0] > 1 > narrow[1] > wide[1]
    assert wide == pytest.approx([2 * math.exp(0.5) / (math.exp(0.5) + math.exp(-0.5)),
                                  2 * math.exp(-0.5) / (math.exp(0.5) + math.exp(-0.5))])


def random_graph(rng):
    n = int(rng.integers(1, 9))
    return ([int(x) for x in rng.integers(0 if rng.random() < 0.2 else 1, 12, n)],
            rng.integers(0, 4, n).tolist(), rng.integers(0, 3, n).tolist(), rng.integers(0, 4, n).tolist(),
            rng.integers(0, 2, n).tolist())


@pytest.mark.parametrize("seed", range(300))
def test_invariants_and_reference(seed):
    rng = np.random.default_rng(seed)
    lengths, d_plus, d_minus, d_in, errors = random_graph(rng)
    if sum(lengths) == 0:
        lengths[0] = 1
    adv = float(rng.normal()) * 2
    beta, c = float(rng.choice([0.0, 0.05, 0.3])), float(rng.choice([0.125, 0.25, 0.5]))
    w = routing_weights(lengths, d_plus, d_minus, d_in, errors, adv, beta, c)
    assert w == pytest.approx(routing_weights_reference(lengths, d_plus, d_minus, d_in, errors, adv, beta, c),
                              rel=1e-9)
    assert all(x > 0 for x in w)
    # mass kept
    assert sum(n * x for n, x in zip(lengths, w, strict=True)) == pytest.approx(sum(lengths), rel=1e-9)
    assert all(np.sign(adv * x) == np.sign(adv) for x in w)  # sign kept
    if adv < 0:  # bounded multipliers: each within e^{-2c}..e^{2c}
        assert all(math.exp(-2 * c) - 1e-12 <= x <= math.exp(2 * c) + 1e-12 for x in w)


def test_bad_input_is_a_clear_error():
    with pytest.raises(ValueError, match="support_out has 1 entries for 2 actions"):
        routing_weights([1, 1], [0], [0, 0], [0, 0], [0, 0], 1.0)
    with pytest.raises(ValueError, match="lengths"):
        routing_weights([0, 0], [0, 0], [0, 0], [0, 0], [0, 0], 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        routing_weights([1, 1], [-1, 0], [0, 0], [0, 0], [0, 0], 1.0)
    with pytest.raises(ValueError, match="finite"):
        routing_weights([1, 1], [0, 0], [0, 0], [0, 0], [0, 0], float("nan"))
    assert routing_weights([], [], [], [], [], 1.0) == []
