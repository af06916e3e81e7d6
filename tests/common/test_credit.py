"""Advantage estimators against hand-computed groups."""

import numpy as np
import pytest

from common.credit import CREDIT, assign_outcome_credit, drgrpo, get_estimator, grpo, normalize_by_key, rloo
from common.episode import Episode, Group, Turn


def test_grpo_hand_computed():
    # rewards 1,0,0,1: mean 0.5, sample std sqrt(1/3) = 0.57735
    adv = grpo(np.array([1.0, 0.0, 0.0, 1.0]))
    expected = 0.5 / (np.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(adv, [expected, -expected, -expected, expected], rtol=1e-9)


def test_grpo_three_values():
    # rewards 0, 1, 2: mean 1, sample std 1 -> -1, 0, 1 (up to eps)
    np.testing.assert_allclose(grpo(np.array([0.0, 1.0, 2.0])), [-1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)], rtol=1e-12)


def test_grpo_constant_and_single_groups_carry_no_signal():
    np.testing.assert_array_equal(grpo(np.array([1.0, 1.0, 1.0])), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(grpo(np.array([1.0])), [0.0])


def test_drgrpo_is_mean_centered_only():
    np.testing.assert_allclose(drgrpo(np.array([1.0, 0.0, 0.0, 0.0])), [0.75, -0.25, -0.25, -0.25])


def test_rloo_leave_one_out_baseline():
    # r = 3, 1, 2: baselines (1+2)/2=1.5, (3+2)/2=2.5, (3+1)/2=2
    np.testing.assert_allclose(rloo(np.array([3.0, 1.0, 2.0])), [1.5, -1.5, 0.0])
    np.testing.assert_array_equal(rloo(np.array([5.0])), [0.0])


def test_registry_and_unknown_estimator():
    assert set(CREDIT) >= {"grpo", "drgrpo", "rloo"}
    with pytest.raises(ValueError, match="unknown advantage estimator 'ppo'.*choose one of"):
        get_estimator("ppo")


def test_normalize_by_key_keeps_groups_apart():
    values = np.array([1.0, 0.0, 10.0, 20.0])
    out = normalize_by_key(values, ["a", "a", "b", "b"], drgrpo)
    np.testing.assert_allclose(out, [0.5, -0.5, -5.0, 5.0])


def test_outcome_credit_is_broadcast_to_every_turn():
    def ep(reward, n_turns):
        e = Episode("t", 1, turns=[Turn("r", "policy", [1], [2], [-0.1], "x") for _ in range(n_turns)])
        e.reward = reward
        return e

    group = Group("t", 1, [ep(1.0, 2), ep(0.0, 3)])
    assign_outcome_credit([group], drgrpo)
    assert [t.advantage for t in group.episodes[0].turns] == [0.5, 0.5]
    assert [t.advantage for t in group.episodes[1].turns] == [-0.5, -0.5, -0.5]
