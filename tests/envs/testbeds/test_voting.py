"""The voting environment: majority rule, tiers, the without<i> variants, malformed votes."""

import json
import random

from envs.testbeds.voting import VotingConfig, VotingEnv, majority_correct

TASK = {"facts": [["F", 1], ["C", 3]], "asked": "F", "shown": [["F"], ["F", "C"], ["C"]]}


def play(env, actions, variant="main"):
    ep = env.new_episode(TASK, random.Random(0), variant)
    obs, roles, r = ep.start(), [], None
    for a in actions:
        roles.append((obs.role, obs.text))
        r = ep.step(a)
        obs = r.next
    assert obs is None
    return roles, r


def test_majority():
    assert majority_correct([1, 1, 2], 1) and not majority_correct([1, 2, 3], 1)
    assert not majority_correct([1, None, None], 1) and majority_correct([1, 1], 1)
    assert not majority_correct([1, 2], 1)


def test_votes_and_variants():
    env = VotingEnv(VotingConfig(train_size=30, heldout_size=9))
    roles, r = play(env, [" #1", " #1", " #7"])
    assert [x[0] for x in roles] == ["voter0", "voter1", "voter2"]
    assert roles[2][1] == "Facts: F=? C=3. Q: F?\nA:"
    assert r.success and r.info["voter2_correct"] is False and r.info["voter0_correct"]
    roles, r = play(env, [" #1", " #7"], variant="without1")
    assert [x[0] for x in roles] == ["voter0", "voter2"] and not r.success and "voter1_correct" not in r.info
    _, r = play(env, ["garbage", " #1", " #1"])
    assert r.success and [e.kind for e in r.events] == []  # events of the last vote only
    for row in env.task_set()["train"]:
        task = json.loads(row["task"])
        assert sum(task["asked"] in s for s in task["shown"]) == row["tier"]


def test_votes_are_bounded_ascii_numbers():
    """A non-ASCII digit or a number past 18 digits is an invalid vote (never right), not a crash."""
    env = VotingEnv(VotingConfig(train_size=30, heldout_size=9))
    for bad in [" #١", " #" + "9" * 5000]:
        ep = env.new_episode(TASK, random.Random(0))
        ep.start()
        assert [e.kind for e in ep.step(bad).events] == ["invalid_action"]
        ep.step(" #1")
        r = ep.step(" #7")
        assert not r.success and r.info["voter0_correct"] is False  # one right vote of three
