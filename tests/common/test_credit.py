"""Advantage estimators against hand-computed groups."""

import numpy as np
import pytest

from common.credit import (
    BROADCAST,
    CREDIT,
    Credit,
    drgrpo,
    episode_offsets,
    get_estimator,
    grpo,
    normalize_by_key,
    rloo,
    to_advantages,
)
from common.episode import Episode, Group, Turn


def test_grpo_hand_computed():
    # rewards 1,0,0,1: mean 0.5, sample std sqrt(1/3) = 0.57735
    adv = grpo(np.array([1.0, 0.0, 0.0, 1.0]))
    expected = 0.5 / (np.sqrt(1 / 3) + 1e-6)
    np.testing.assert_allclose(adv, [expected, -expected, -expected, expected], rtol=1e-9)


def test_grpo_three_values():
    # rewards 0, 1, 2: mean 1, sample std 1 -> -1, 0, 1 (up to eps)
    np.testing.assert_allclose(grpo(np.array([0.0, 1.0, 2.0])), [-1 / (1 + 1e-6), 0, 1 / (1 + 1e-6)],
                               rtol=1e-12)


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


def _ep(reward, roles, faulted=False):
    e = Episode("t", 1, turns=[Turn(r, "policy", [1], [2, 3], [-0.1, -0.2], "x") for r in roles],
                faulted=faulted)
    e.reward = reward
    return e


def by_role(episode, index):
    return episode.turns[index].role


def test_outcome_credit_is_broadcast_to_every_turn():
    group = Group("t", 1, [_ep(1.0, "rr"), _ep(0.0, "rrr")])
    adv = to_advantages([group], Credit.outcome([group]), by_role, drgrpo)
    assert [adv.scalar((0, t)) for t in range(2)] == [0.5, 0.5]  # keys: (episode index, turn index)
    assert [adv.scalar((1, t)) for t in range(3)] == [-0.5, -0.5, -0.5]
    assert adv.tokens((1, 0), group.episodes[1].turns[0]) == [-0.5, -0.5]  # one per action token


def test_rewards_are_normalized_per_agent_key_within_the_group():
    # two agents a, b; b is absent from the third episode and is left out of b's statistics
    group = Group("t", 1, [_ep(0, "ab"), _ep(0, "ab"), _ep(0, "a")])
    credit = Credit("reward", [[{"a": 1.0, "b": 10.0}, {"a": 0.0, "b": 20.0}, {"a": 2.0}]])
    adv = to_advantages([group], credit, by_role, drgrpo)
    assert [adv.scalar((0, 0)), adv.scalar((1, 0)), adv.scalar((2, 0))] == [0.0, -1.0, 1.0]  # a: mean 1
    assert [adv.scalar((0, 1)), adv.scalar((1, 1))] == [-5.0, 5.0]  # b: mean 15 over two episodes


def test_advantage_credit_is_used_as_given_and_broadcast_fills_missing_keys():
    group = Group("t", 1, [_ep(0, "ab"), _ep(0, "ab")])
    credit = Credit("advantage", [[{"a": 3.0, BROADCAST: -1.0}, {BROADCAST: 2.0}]])
    adv = to_advantages([group], credit, by_role, grpo)
    assert [adv.scalar((0, t)) for t in range(2)] == [3.0, -1.0]  # a's own value; b falls back to '*'
    assert [adv.scalar((1, t)) for t in range(2)] == [2.0, 2.0]


def test_per_token_advantages_override_and_must_match_the_tokens():
    group = Group("t", 1, [_ep(1.0, "a"), _ep(0.0, "a")])
    credit = Credit.outcome([group])
    credit.tokens[(0, 0, 0)] = [0.25, -0.75]
    adv = to_advantages([group], credit, by_role, drgrpo)
    assert adv.tokens((0, 0), group.episodes[0].turns[0]) == [0.25, -0.75] and adv.scalar((0, 0)) == -0.25
    assert adv.tokens((1, 0), group.episodes[1].turns[0]) == [-0.5, -0.5]
    credit.tokens[(0, 0, 0)] = [1.0]
    with pytest.raises(ValueError, match="1 values for 2 action tokens"):
        to_advantages([group], credit, by_role, drgrpo).tokens((0, 0), group.episodes[0].turns[0])


def test_excluded_episodes_leave_the_statistics_and_get_nothing():
    group = Group("t", 1, [_ep(1.0, "a"), _ep(0.0, "a"), _ep(0.0, "a", faulted=True)])
    adv = to_advantages([group], Credit.outcome([group]), by_role, drgrpo, excluded=lambda e: e.faulted)
    assert [adv.scalar((i, 0)) for i in range(3)] == [0.5, -0.5, 0.0]
    assert (2, 0) not in adv.by_turn


def test_reward_penalty_is_applied_per_key_before_normalization():
    group = Group("t", 1, [_ep(1.0, "a"), _ep(1.0, "a")])
    penalty = {0: 0.0, 1: 1.0}  # by episode index
    adv = to_advantages([group], Credit.outcome([group]), by_role, drgrpo, penalty=lambda e, key: penalty[e])
    assert [adv.scalar((i, 0)) for i in range(2)] == [0.5, -0.5]  # rewards 1 and 0 after the penalty


def test_episodes_are_indexed_group_after_group_extra_plays_included():
    first = Group("t", 1, [_ep(1.0, "a"), _ep(0.0, "a")], extra={"solo": [_ep(1.0, "a")]})
    second = Group("u", 1, [_ep(0.0, "a"), _ep(1.0, "a")])
    assert episode_offsets([first, second]) == [0, 3]  # the second group starts after the first's extra play
    adv = to_advantages([first, second], Credit.outcome([first, second]), by_role, drgrpo)
    assert sorted(adv.by_turn) == [(0, 0), (1, 0), (3, 0), (4, 0)]  # extra plays get no credit
    assert [adv.scalar((3, 0)), adv.scalar((4, 0))] == [-0.5, 0.5]


def test_credit_shape_must_match_the_groups():
    group = Group("t", 1, [_ep(1.0, "a"), _ep(0.0, "a")])
    with pytest.raises(ValueError, match="1 episodes for 2 played"):
        to_advantages([group], Credit("reward", [[{"a": 1.0}]]), by_role, grpo)
    with pytest.raises(ValueError, match="0 groups for 1"):
        to_advantages([group], Credit("reward", []), by_role, grpo)
