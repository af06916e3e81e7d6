"""voting's counterfactual replay (#46): a coalition's value is the vote counted again with the other voters
abstaining, by the environment's own rule; checked by hand on three voters, against the played outcome, and
against CCPO's vote counterfactuals."""

from __future__ import annotations

import itertools
import json
import random

import pytest

from envs.api.protocols import CounterfactualReplay
from envs.testbeds.voting import VotingConfig, VotingEnv, replay
from replications.ccpo.counterfactual import vote_counterfactuals
from replications.sharp.shapley import shapley_values

TASK = {"facts": [["F", 1], ["C", 3]], "asked": "F", "shown": [["F"], ["F", "C"], ["C"]]}  # the answer: 1
ENV = VotingEnv(VotingConfig(train_size=30, heldout_size=9))
VOTERS = (0, 1, 2)


def played(actions, variant="main"):
    ep = ENV.new_episode(TASK, random.Random(0), variant)
    ep.start()
    for a in actions:
        r = ep.step(a)
    assert r.next is None
    return r


def value(record):
    """v(S): the replayed outcome with every voter outside S masked."""
    return lambda s: replay(record, frozenset(VOTERS) - s).value


def test_voting_declares_and_implements_the_replay():
    assert "counterfactual_replay" in VotingEnv.offers and isinstance(ENV, CounterfactualReplay)
    assert ENV.replay is replay


def test_the_record_of_a_played_vote():
    r = played([" #1", "garbage", " #7"])
    assert r.info["record"] == {"truth": [1, 1, 1], "voted": [0, 1, 2], "results": [1, None, 7]}
    json.dumps(r.info)  # the record travels with the episode's info
    r = played([" #1", " #7"], variant="without1")
    assert r.info["record"] == {"truth": [1, 1, 1], "voted": [0, 2], "results": [1, None, 7]}


def test_every_coalition_of_two_right_voters_and_one_wrong_by_hand():
    """Votes 1, 1, 7 (the answer is 1). A coalition's voters vote, the others abstain; a strict majority of
    the cast votes must be right: one right vote alone is, a 1-1 split is not, no vote is not."""
    record = played([" #1", " #1", " #7"]).info["record"]
    v = value(record)
    by_hand = {(): 0.0, (0,): 1.0, (1,): 1.0, (2,): 0.0,
               (0, 1): 1.0, (0, 2): 0.0, (1, 2): 0.0, (0, 1, 2): 1.0}
    assert {c: v(frozenset(c)) for c in by_hand} == by_hand
    assert replay(record, frozenset({2})).cast == [1, 1] and replay(record, frozenset({0, 1, 2})).cast == []
    # Shapley, n = 3 (weights 1/3 for |S| = 0 and 2, 1/6 for |S| = 1):
    # voter 0: 1/3 (v{0} - v{}) + 1/6 (v{01} - v{1}) + 1/6 (v{02} - v{2}) + 1/3 (v{012} - v{12})
    #        = 1/3 (1) + 1/6 (0) + 1/6 (0) + 1/3 (1) = 2/3; voter 1 likewise 2/3;
    # voter 2: 1/3 (0) + 1/6 (v{02} - v{0} = -1) + 1/6 (v{12} - v{1} = -1) + 1/3 (v{012} - v{01} = 0) = -1/3
    phi = shapley_values(VOTERS, v)
    assert phi == pytest.approx({0: 2 / 3, 1: 2 / 3, 2: -1 / 3})
    assert sum(phi.values()) == pytest.approx(v(frozenset(VOTERS)) - v(frozenset()))


def test_a_wrong_majority_and_an_invalid_vote_by_hand():
    """Votes 1, 7, 7: the two wrong voters agree, the team is wrong; only voter 0 alone is right:
    phi_0 = 1/3 (v{0} - v{}) = 1/3, phi_1 = phi_2 = 1/6 (v{01} - v{0}) = -1/6."""
    record = played([" #1", " #7", " #7"]).info["record"]
    assert shapley_values(VOTERS, value(record)) == pytest.approx({0: 1 / 3, 1: -1 / 6, 2: -1 / 6})
    # an invalid vote is cast and wrong (not an abstention): votes 1, (none), 1 play as 1, 7, 1
    record = played([" #1", "#x", " #1"]).info["record"]
    v = value(record)
    assert v(frozenset({0, 1})) == 0.0 and v(frozenset({0})) == 1.0 and v(frozenset({1})) == 0.0
    assert shapley_values(VOTERS, v) == pytest.approx({0: 2 / 3, 1: -1 / 3, 2: 2 / 3})


def test_a_voter_that_did_not_play_is_already_abstaining():
    record = played([" #1", " #7"], variant="without1").info["record"]
    assert replay(record, frozenset({1})) == replay(record, frozenset())
    assert replay(record, frozenset()).value == 0.0 and replay(record, frozenset({2})).value == 1.0


def test_the_full_coalition_is_the_played_outcome():
    """On played episodes (the demonstrator and the random policy, every variant), v(all) is the reward and
    v(nobody) is 0."""
    env = VotingEnv(VotingConfig(train_size=60, heldout_size=9))
    rng = random.Random(3)
    outcomes = set()
    for row in env.task_set()["train"]:
        for variant in env.variants():
            ep = env.new_episode(json.loads(row["task"]), rng, variant)
            obs = ep.start()
            while obs is not None:
                r = ep.step(ep.expert_action() if rng.random() < 0.7 else env.random_action(ep, obs, rng))
                obs = r.next
            assert env.replay(r.info["record"], frozenset()).value == r.reward
            assert env.replay(r.info["record"], frozenset(VOTERS)).value == 0.0
            outcomes.add(r.reward)
    assert outcomes == {0.0, 1.0}


def test_leave_one_out_is_ccpos_vote_counterfactual():
    """v(all) - v(all but i) from the replay equals CCPO's vote_counterfactuals on every pattern of right and
    wrong votes (an invalid vote among the wrong ones)."""
    for pattern in itertools.product((True, False), repeat=3):
        votes = [" #1" if ok else (" #7" if i else "no vote") for i, ok in enumerate(pattern)]
        record = played(votes).info["record"]
        loo = [replay(record, frozenset()).value - replay(record, frozenset({i})).value for i in VOTERS]
        assert loo == list(vote_counterfactuals(list(pattern))), pattern
