"""River's repetition penalty against hand-computed episodes, a slow reference, and its invariants."""

import doctest
import itertools
import random

import pytest

from replications.river import penalty as penalty_module
from replications.river.method import repetition_penalty
from replications.river.penalty import jaccard, repeated_turns


def test_doctests():
    assert doctest.testmod(penalty_module).failed == 0


def test_jaccard_by_hand():
    assert jaccard("a b c", "a b c") == 1.0
    assert jaccard("a b c d", "a b c e") == pytest.approx(3 / 5)
    assert jaccard("a a b", "b a") == 1.0  # sets: duplicates and order do not count
    assert jaccard("a  b\n", "a b") == 1.0  # any whitespace separates
    assert jaccard("", "") == 1.0 and jaccard("", "x") == 0.0 and jaccard("   ", "") == 1.0


def test_a_plain_repeat_is_penalized_once_per_repeat():
    turns = [("grep k3 a", "k3 47"), ("grep k3 a", "k3 47"), ("echo 47 > out", ""), ("submit", "")]
    # turn 1 repeats turn 0; turn 3: command J("submit","echo 47 > out") = 0, not a repeat of turn 2
    assert repetition_penalty(turns) == [0.0, -0.05, 0.0, 0.0]


def test_both_command_and_observation_must_repeat():
    same_cmd_new_obs = [("cat out", "1"), ("cat out", "2")]  # the command repeats, the output changed
    same_obs_new_cmd = [("cat a", "k1 5"), ("grep k1 a", "k1 5")]  # another command, same output
    assert repetition_penalty(same_cmd_new_obs) == [0.0, 0.0]
    assert repetition_penalty(same_obs_new_cmd) == [0.0, 0.0]


def test_strictly_above_threshold():
    # commands "a b c d" vs "a b c d e": J = 4/5 = 0.8 exactly: not above 0.8
    turns = [("a b c d", "x"), ("a b c d e", "x")]
    assert repetition_penalty(turns) == [0.0, 0.0]
    assert repetition_penalty(turns, threshold=0.79) == [0.0, -0.05]
    # 9 of 10 tokens shared: J = 0.9 > 0.8
    long = " ".join(f"t{i}" for i in range(9))
    assert repetition_penalty([(long, "o"), (long + " t9", "o")]) == [0.0, -0.05]


def test_empty_texts_are_identical():
    assert repetition_penalty([("", ""), ("", "")]) == [0.0, -0.05]
    assert repetition_penalty([("ls", ""), ("ls", "")]) == [0.0, -0.05]  # empty outputs repeat too


def test_the_similar_earlier_turn_must_be_one_and_the_same():
    # turn 2's command matches turn 0's, its observation matches turn 1's: no single earlier turn matches both
    turns = [("cat a", "one"), ("cat b", "two"), ("cat a", "two")]
    assert repetition_penalty(turns) == [0.0, 0.0, 0.0]


def test_cap_without_partial_penalty():
    loop = [("ls", "a b")] * 6
    assert repetition_penalty(loop) == [0.0, -0.05, -0.05, -0.05, 0.0, 0.0]  # 0.15 = three repeats
    # cap 0.12 allows two penalties of 0.05 (0.10); a third would exceed it and gets 0, not -0.02
    assert repetition_penalty(loop, cap=0.12) == [0.0, -0.05, -0.05, 0.0, 0.0, 0.0]
    assert repetition_penalty(loop, cap=0.0) == [0.0] * 6
    assert repetition_penalty(loop, delta=0.1, cap=0.15) == [0.0, -0.1, 0.0, 0.0, 0.0, 0.0]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="threshold"):
        repetition_penalty([], threshold=1.5)
    with pytest.raises(ValueError, match="delta"):
        repetition_penalty([], delta=-0.05)
    assert repetition_penalty([]) == []


def slow_reference(turns, threshold=0.8, delta=0.05, cap=0.15):
    """The definition spelled out with explicit set arithmetic and fractions-free loops."""
    def sim(x, y):
        a, b = set(x.split()), set(y.split())
        union = a | b
        return 1.0 if not union else len(a & b) / len(union)

    out, spent = [], 0.0
    for t in range(len(turns)):
        hit = False
        for u in range(t):
            if sim(turns[t][0], turns[u][0]) > threshold and sim(turns[t][1], turns[u][1]) > threshold:
                hit = True
        if hit and round(spent + delta, 9) <= round(cap, 9):
            spent += delta
            out.append(-delta)
        else:
            out.append(0.0)
    return out


def random_episode(rng):
    words = ["cat", "ls", "a", "b", "k1", "5", "grep", ">", "out", ""]
    n = rng.randint(0, 10)
    return [(" ".join(rng.choices(words, k=rng.randint(0, 4))),
             " ".join(rng.choices(words, k=rng.randint(0, 3))))
            for _ in range(n)]


def test_matches_the_slow_reference_and_keeps_its_invariants():
    rng = random.Random(0)
    for _ in range(2000):
        turns = random_episode(rng)
        threshold = rng.choice([0.0, 0.5, 0.8, 0.99])
        delta, cap = rng.choice([(0.05, 0.15), (0.05, 0.12), (0.1, 0.3), (0.03, 0.0)])
        got = repetition_penalty(turns, threshold, delta, cap)
        assert got == slow_reference(turns, threshold, delta, cap)
        assert len(got) == len(turns)
        assert all(v in (0.0, -delta) for v in got)  # all or nothing per turn
        assert -sum(got) <= cap + 1e-9  # the cap holds
        assert got[:1] in ([], [0.0])  # the first turn has nothing to repeat
        flags = repeated_turns(turns, threshold)
        assert all(f for f, v in zip(flags, got, strict=True) if v)  # only repeats are penalized
        # penalties go to the earliest repeats: once one repeat is spared, no later one is penalized
        spared = [f and v == 0.0 for f, v in zip(flags, got, strict=True)]
        first_spared = spared.index(True) if True in spared else len(got)
        assert all(v == 0.0 for v in got[first_spared:])


def test_prefix_consistency():
    """A turn's penalty depends on the episode up to that turn only (what the agent could see)."""
    rng = random.Random(1)
    for _ in range(300):
        turns = random_episode(rng)
        full = repetition_penalty(turns)
        for k in range(len(turns) + 1):
            assert repetition_penalty(turns[:k]) == full[:k]


def test_order_of_distinct_earlier_turns_does_not_matter():
    base = [("cat a", "x y"), ("ls", "a b"), ("grep k a", "k 1")]
    last = ("ls", "a b")
    for perm in itertools.permutations(base):
        assert repetition_penalty([*perm, last])[-1] == -0.05
