"""The arith environment: exact verifier, tiers, malformed actions, the demonstrator."""

import json
import random

from envs.testbeds.arith import ArithConfig, ArithEnv


def make(mode="single"):
    return ArithEnv(ArithConfig(mode=mode, train_size=60, heldout_size=30, max_value=20))


def test_task_set_splits_tiers_and_no_leak():
    env = make()
    ts = env.task_set()
    assert len(ts["train"]) == 60 and len(ts["heldout"]) == 30
    assert set(ts["train"]["tier"]) == {1, 2, 3}
    assert not set(ts["train"]["task"]) & set(ts["heldout"]["task"])
    for row in ts["train"]:
        assert len(json.loads(row["task"])["steps"]) == row["tier"]


def test_expert_solves_every_task_in_both_modes():
    for mode in ("single", "stepwise"):
        env = make(mode)
        for row in env.task_set()["train"]:
            ep = env.new_episode(json.loads(row["task"]), random.Random(0))
            obs, result = ep.start(), None
            while obs is not None:
                result = ep.step(ep.expert_action())
                obs = result.next
            assert result.reward == 1.0 and result.success


def test_wrong_and_malformed_answers():
    env = make()
    task = {"start": 7, "steps": [["+", 5], ["-", 3]]}
    ep = env.new_episode(task, random.Random(0))
    assert ep.start().text == "Q: 7+5-3\nA:"
    assert ep.step(" 7+5=12 12-3=9 #9").reward == 1.0
    assert env.new_episode(task, random.Random(0)).step(" #8").reward == 0.0
    for garbage in ["", "the answer is nine", "#", "\x00\x01 #nine", "9"]:
        r = env.new_episode(task, random.Random(0)).step(garbage)
        assert r.next is None and r.reward == 0.0 and r.info.get("invalid")
        assert [e.kind for e in r.events] == ["invalid_action"]


def test_stepwise_multi_turn_and_invalid():
    env = make("stepwise")
    task = {"start": 7, "steps": [["+", 5], ["-", 3]]}
    ep = env.new_episode(task, random.Random(0))
    assert ep.start().text.endswith("7+5=")
    r = ep.step("12")
    assert r.next is not None and r.next.text == "12-3="
    assert ep.step("9").reward == 1.0
    bad = env.new_episode(task, random.Random(0))
    bad.start()
    assert bad.step("twelve").events[0].kind == "invalid_action"


def test_demonstrator_shortcut_share():
    task = {"start": 7, "steps": [["+", 5], ["-", 3]]}
    always = ArithEnv(ArithConfig(demo_shortcut=1.0, train_size=10, heldout_size=5))
    never = ArithEnv(ArithConfig(demo_shortcut=0.0, train_size=10, heldout_size=5))
    ep = always.new_episode(task, random.Random(0))
    assert ep.expert_action() == " #9"
    assert ep.step(" #9").info == {"worked": False, "invalid": False}
    ep = never.new_episode(task, random.Random(0))
    assert ep.expert_action() == " 7+5=12 12-3=9 #9"
    assert ep.step(ep.expert_action()).info == {"worked": True, "invalid": False}
    half = ArithEnv(ArithConfig(demo_shortcut=0.5, train_size=10, heldout_size=5))
    rng = random.Random(1)
    share = sum(half.new_episode(task, rng).shortcut for _ in range(2000)) / 2000
    assert abs(share - 0.5) < 0.05


def test_numbers_are_bounded_ascii():
    """A non-ASCII digit (#١٦ reads as 16 to int()) or a number past 18 digits is an invalid action, never
    a crash."""
    task = {"start": 7, "steps": [["+", 9]]}  # 16
    assert make().new_episode(task, random.Random(0)).step(" #16").success
    for answer in [" #١٦", " #𝟏𝟔", " #1６", " #" + "9" * 19, " #" + "9" * 5000, " #-" + "1" * 100_000]:
        r = make().new_episode(task, random.Random(0)).step(answer)
        assert r.next is None and r.reward == 0.0 and r.info["invalid"]
        assert [e.kind for e in r.events] == ["invalid_action"]
    for answer in ["١٦", "9" * 5000]:
        r = make("stepwise").new_episode(task, random.Random(0)).step(answer)
        assert r.next is None and [e.kind for e in r.events] == ["invalid_action"]
    # ASCII, leading zero: as before
    assert make("stepwise").new_episode(task, random.Random(0)).step("016").success
