"""The thinker_solver environment: tiers, message classes, costs, variants, the demonstrator."""

import json
import random

import pytest

from envs.testbeds.thinker_solver import ThinkerSolverConfig, ThinkerSolverEnv, classify

TASK_EASY = {"facts": [["F", 1], ["C", 3], ["A", 7]], "asked": "F", "shown": ["F", "C", "A"]}
TASK_HARD = {"facts": [["F", 1], ["C", 3], ["A", 7]], "asked": "F", "shown": ["C", "A"]}


def make(**kw):
    return ThinkerSolverEnv(ThinkerSolverConfig(train_size=60, heldout_size=30, **kw))


def finish(ep, actions):
    """Play `actions` from the episode's start to its end; the observations seen and the last result."""
    obs, seen, result = ep.start(), [], None
    for a in actions:
        seen.append(obs)
        result = ep.step(a)
        obs = result.next
    assert obs is None
    return seen, result


def play(env, task, actions, variant="main"):
    return finish(env.new_episode(task, random.Random(0), variant), actions)


def test_task_set_tiers_and_what_the_solver_sees():
    env = make()
    ts = env.task_set()
    assert set(ts["train"]["tier"]) == {1, 2, 3}
    assert not set(ts["train"]["task"]) & set(ts["heldout"]["task"])
    for row in ts["train"]:
        task = json.loads(row["task"])
        letters = [k for k, _ in task["facts"]]
        assert task["asked"] == letters[0]
        hidden = set(letters) - set(task["shown"])
        expected = {1: not hidden, 2: hidden and task["asked"] not in hidden, 3: hidden == {task["asked"]}}
        assert expected[row["tier"]]


def test_prompts_help_and_cost():
    env = make(cost_per_char=0.02)
    seen, r = play(env, TASK_HARD, [" F=1", " #1"])
    assert seen[0].role == "thinker" and seen[0].text == "Facts: F=1 C=3 A=7. Q: F?\nT:"
    assert seen[1].role == "solver" and seen[1].text == "Facts: F=? C=3 A=7. Q: F?\nT: F=1\nA:"
    assert r.success and r.reward == pytest.approx(1 - 0.06)
    assert r.info["msg_help"] and not r.info["msg_silent"] and r.info["hard"]
    # the Thinker's cost is its own turn reward
    ep = env.new_episode(TASK_HARD, random.Random(0))
    ep.start()
    assert ep.step(" F=1").reward == pytest.approx(-0.06)


def test_message_classes():
    assert classify("", "F", 1) == "silent" and classify("  ", "F", 1) == "silent"
    assert classify(" F=1", "F", 1) == "help" and classify("F = 1 ", "F", 1) == "help"
    assert classify(" F=4", "F", 1) == "wrong" and classify(" 4", "F", 1) == "wrong"
    assert classify("1", "F", 1) == "help"
    assert classify(" C=3", "F", 1) == "other" and classify("blah", "F", 1) == "other"


def test_garbage_never_raises():
    env = make()
    for garbage in ["", "\x00\x01", "F=", "#", "the answer", " #x", "F=1 F=2", "-3"]:
        seen, r = play(env, TASK_EASY, [garbage, garbage])
        assert r.reward <= 1.0
    _, r = play(env, TASK_EASY, ["hello", "no answer"])
    assert not r.success and [e.kind for e in r.events] == ["invalid_action"]
    ep = env.new_episode(TASK_EASY, random.Random(0))
    ep.start()
    assert [e.kind for e in ep.step("hello").events] == ["invalid_action"]
    assert ep.step(" #1").success  # an unreadable message is passed on; the Solver still answers


def test_variants():
    env = make()
    seen, r = play(env, TASK_HARD, [" #1"], variant="solo")
    assert [o.role for o in seen] == ["solver"] and seen[0].text.endswith("T:\nA:") and r.success
    seen, r = play(env, TASK_HARD, [" F=1", " #5"], variant="empty_guidance")
    assert seen[1].text == "Facts: F=? C=3 A=7. Q: F?\nT:\nA:" and not r.success and r.info["msg_help"]
    seen, r = play(env, TASK_HARD, [" #4", " F=1", " #1"], variant="paired")
    assert [o.role for o in seen] == ["solver", "thinker", "solver"]
    assert seen[0].text.endswith("T:\nA:") and seen[2].text.endswith("T: F=1\nA:") and seen[2].new_context
    assert r.info["help"] and not r.info["hurt"] and r.info["contribution"] == 1 and r.success
    _, r = play(env, TASK_EASY, [" #1", " F=4", " #4"], variant="paired")
    assert r.info["hurt"] and r.info["contribution"] == -1
    with pytest.raises(ValueError):
        env.new_episode(TASK_EASY, random.Random(0), "nope")


def test_demonstrator_mix_and_solver():
    env = make(expert_help=0.5, expert_silent=0.3, expert_wrong=0.2)
    kinds, solved = [], {1: [], 3: []}
    for seed in range(2000):
        for tier, task in ((1, TASK_EASY), (3, TASK_HARD)):
            ep = env.new_episode(task, random.Random(seed))
            obs, r = ep.start(), None
            while obs is not None:
                r = ep.step(ep.expert_action())
                obs = r.next
            solved[tier].append(r.success)
            if tier == 1:
                kinds.append(next(k for k in ("help", "wrong", "silent") if r.info[f"msg_{k}"]))
    assert abs(kinds.count("help") / 2000 - 0.5) < 0.04 and abs(kinds.count("wrong") / 2000 - 0.2) < 0.03
    assert all(solved[1])  # easy: the Solver answers from what it sees, whatever the Thinker says
    # hard: right when the Thinker helps, else a 1-in-10 guess
    assert abs(sum(solved[3]) / 2000 - (0.5 + 0.5 * 0.1)) < 0.04
    with pytest.raises(ValueError):
        make(expert_help=0.9, expert_silent=0.3, expert_wrong=0.2)


def test_numbers_are_bounded_ascii():
    """Non-ASCII digits and numbers past 18 digits are not numbers: no crash, an invalid action."""
    env = make()
    for message in [" ١", " F=١", " F=" + "1" * 5000, " " + "9" * 19]:
        assert classify(message, "F", 1) == "other"
        ep = env.new_episode(TASK_HARD, random.Random(0))
        ep.start()
        assert [e.kind for e in ep.step(message).events] == ["invalid_action"]
        assert ep.expert_action().startswith(" #")  # the demonstrator Solver cannot read it: it guesses
    for answer in [" #١", " #" + "1" * 5000]:
        _, r = play(env, TASK_EASY, [" F=1", answer])
        assert not r.success and [e.kind for e in r.events] == ["invalid_action"]


# ---- the free-riding setting (#18) -------------------------------------------------------------------
FREERIDE = {"question": "sum", "see_probs": [0.1, 0.5, 0.9], "follow_known": 0.3, "cost_per_char": 0.0,
            "expert_help": 0.6, "expert_silent": 0.2, "expert_wrong": 0.2}
TASK_SUM = {"facts": [["F", 7], ["C", 5], ["A", 2]], "asked": "F", "summed": "C", "shown": [], "p_see": 0.5}


def episode_with(task, knows, variant="main", **kw):
    """A free-riding episode whose hidden draw came out `knows` (the first seed that gives it)."""
    env = make(**{**FREERIDE, **kw})
    for seed in range(100):
        ep = env.new_episode(task, random.Random(seed), variant)
        if ep.knows == knows:
            return ep
    raise AssertionError("no seed gave the draw")


def test_freeride_tasks_tiers_and_derived_answer():
    env = make(**FREERIDE)
    assert env.tiers == (1, 2, 3)
    for row in env.task_set()["train"]:
        task = json.loads(row["task"])
        letters = [k for k, _ in task["facts"]]
        assert task["p_see"] == {1: 0.9, 2: 0.5, 3: 0.1}[row["tier"]] and task["shown"] == []
        assert task["asked"] == letters[0] and task["summed"] == letters[1]
    ep = env.new_episode(TASK_SUM, random.Random(0))
    assert ep.value == (7 + 5) % 10 == 2


def test_freeride_prompts_hide_the_draw_from_the_thinker():
    knows, lacks = episode_with(TASK_SUM, True), episode_with(TASK_SUM, False)
    (t1, s1), r1 = finish(knows, [" 2", " #2"])
    (t2, s2), r2 = finish(lacks, [" 2", " #2"])
    assert t1.text == t2.text == "Facts: F=7 C=5 A=2. Q: F+C?\nT:"  # the Thinker cannot tell
    assert s1.text == "Facts: F=? C=? A=?. Q: F+C? K=2\nT: 2\nA:"
    assert s2.text == "Facts: F=? C=? A=?. Q: F+C? K=?\nT: 2\nA:"
    assert r1.reward == r2.reward == 1.0 and r1.success  # binary: no message cost
    assert r1.info["knows"] and not r2.info["knows"] and r2.info["hard"] and r1.info["p_see"] == 0.5
    assert r1.info["msg_help"] and finish(episode_with(TASK_SUM, True), [" 7", " #7"])[1].info["msg_wrong"]


def test_freeride_knows_with_the_tasks_probability_per_episode():
    env = make(**FREERIDE)
    for p in (0.1, 0.5, 0.9):
        draws = [env.new_episode({**TASK_SUM, "p_see": p}, random.Random(s)).knows for s in range(3000)]
        assert abs(sum(draws) / 3000 - p) < 0.03


def test_freeride_demonstrator_solver_follows_hints():
    env = make(**FREERIDE)
    # knows: answers what it knows, but follows a (wrong) hint 30% of the time; lacks: follows, else guesses
    follows, lacks_right = [], []
    for seed in range(3000):
        ep = env.new_episode(TASK_SUM, random.Random(seed))
        ep.start()
        ep.step(" 7")  # a wrong hint (an addend)
        answer = ep.expert_action()
        if ep.knows:
            follows.append(answer == " #7")
            assert answer in (" #7", " #2")
        else:
            assert answer == " #7"
        silent = env.new_episode(TASK_SUM, random.Random(seed))
        silent.start()
        silent.step("")
        if not silent.knows:
            lacks_right.append(silent.expert_action() == " #2")
        else:
            assert silent.expert_action() == " #2"
    assert abs(sum(follows) / len(follows) - 0.3) < 0.04
    assert abs(sum(lacks_right) / len(lacks_right) - 0.1) < 0.03  # alone, a 1-in-10 guess


def test_freeride_demonstrator_thinker_mix_and_slips():
    env = make(**FREERIDE)
    kinds = []
    for seed in range(3000):
        ep = env.new_episode(TASK_SUM, random.Random(seed))
        ep.start()
        message = ep.expert_action()
        kinds.append(classify(message, "F", 2) if message else "silent")
        if kinds[-1] == "wrong":
            assert message in (" 7", " 5")  # one addend instead of the sum
    for kind, share in (("help", 0.6), ("silent", 0.2), ("wrong", 0.2)):
        assert abs(kinds.count(kind) / 3000 - share) < 0.03


def test_freeride_oracle_and_random():
    """`check`'s bar on this setting: the oracle (the demonstrator that always helps) wins every
    episode; a random policy (the environment's `random_action`) wins about 1 in 10."""
    oracle = make(**{**FREERIDE, "expert_help": 1.0, "expert_silent": 0.0, "expert_wrong": 0.0})
    rng, wins = random.Random(0), {"oracle": [], "random": []}
    for i, row in enumerate(oracle.task_set()["heldout"]):
        task = json.loads(row["task"])
        for who in wins:
            ep = oracle.new_episode(task, random.Random(i))
            obs, r = ep.start(), None
            while obs is not None:
                r = ep.step(ep.expert_action() if who == "oracle" else oracle.random_action(ep, obs, rng))
                obs = r.next
            wins[who].append(r.reward)
    assert sum(wins["oracle"]) / len(wins["oracle"]) == 1.0
    assert sum(wins["random"]) / len(wins["random"]) <= 0.2


def test_freeride_settings_are_checked():
    for bad in ({"question": "sum"}, {"question": "max", "see_probs": [0.5]}, {"see_probs": [0.5, 1.5]},
                {"see_probs": [0.5, 0.5]}, {"see_probs": [0.5], "follow_known": 2.0}):
        with pytest.raises(ValueError, match="env\\."):
            make(**bad)
