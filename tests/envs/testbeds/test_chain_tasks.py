"""The chain_tasks environment: the apps, the all-or-nothing verifier, tiers, recoverable errors,
faults, and the demonstrator's slips."""

import json
import random

import pytest

from envs.testbeds.chain_tasks import ChainTasksConfig, ChainTasksEnv

TASK = {"items": [["tea", 2], ["rice", 1]], "contact": "ana", "day": "fri"}


def make(**kw):
    return ChainTasksEnv(ChainTasksConfig(**{"train_size": 90, "heldout_size": 30, "busy_rate": 0.0, **kw}))


def expert(env, task, seed=0):
    """Play the demonstrator to the end; returns (episode, last result, actions)."""
    ep = env.new_episode(task, random.Random(seed))
    obs, result, actions = ep.start(), None, []
    while obs is not None:
        actions.append(ep.expert_action())
        result = ep.step(actions[-1])
        obs = result.next
    return ep, result, actions


def play(env, task, actions, seed=0):
    ep = env.new_episode(task, random.Random(seed))
    obs, result = ep.start(), None
    for a in actions:
        assert obs is not None, "the episode ended early"
        result = ep.step(a)
        obs = result.next
    return ep, result


def test_task_set_splits_tiers_and_no_leak():
    ts = make().task_set()
    assert len(ts["train"]) == 90 and len(ts["heldout"]) == 30
    assert set(ts["train"]["tier"]) == {1, 2, 3}
    assert not set(ts["train"]["task"]) & set(ts["heldout"]["task"])


@pytest.mark.parametrize("busy_rate", [0.0, 0.3])
def test_demonstrator_solves_every_task_and_tiers_grow(busy_rate):
    env = make(busy_rate=busy_rate, slack=10)  # a refused send or book costs a look-up call
    calls: dict[int, set[int]] = {1: set(), 2: set(), 3: set()}
    for k, row in enumerate(env.task_set()["train"]):
        _, result, actions = expert(env, json.loads(row["task"]), seed=k)
        assert result.reward == 1.0 and result.success
        calls[row["tier"]].add(result.info["calls"])
        assert len(actions) >= result.info["calls"]  # busy refusals are turns, not calls
    assert {tier: min(c) for tier, c in calls.items()} == {1: 4, 2: 7, 3: 10}
    if busy_rate == 0:  # a refused send or book adds a look-up: only then can a solution run longer
        assert calls == {1: {4}, 2: {7}, 3: {10}}


def test_a_whole_episode_and_what_the_agent_sees():
    env = make()
    ep = env.new_episode(TASK, random.Random(0))
    order, cid = ep.world.order_id, ep.world.contact_ids["ana"]
    script = [
        ("ready\ntodo: buy tea 2\n> ", "add tea 2"),
        ("ok\ntodo: buy rice 1\n> ", "add rice 1"),
        ("ok\ntodo: pay\n> ", "pay"),
        (f"ok order {order}\ntodo: mail {order} to ana\n> ", "find ana"),
        (f"ok ana {cid}\ntodo: mail {order} to ana\n> ", f"send {cid} {order}"),
        (f"ok ana {cid}\ntodo: book fri with ana\n> ", f"book fri {cid}"),
        ("ok\ntodo: done\n> ", "done"),
    ]
    obs = ep.start()
    for text, action in script:
        assert obs.text == text and obs.new_context and obs.role == "agent"
        assert ep.expert_action() == action
        result = ep.step(action)
        obs = result.next
    assert obs is None and result.reward == 1.0 and result.success


def test_no_partial_credit():
    env = make()
    ep = env.new_episode(TASK, random.Random(0))
    order, cid, other = ep.world.order_id, ep.world.contact_ids["ana"], ep.world.contact_ids["bob"]
    right = ["add tea 2", "add rice 1", "pay", "find ana", f"send {cid} {order}", f"book fri {cid}", "done"]
    assert play(env, TASK, right)[1].reward == 1.0
    for wrong in (["add tea 3", *right[1:]],  # a wrong quantity is accepted, and fails the task
                  [*right[:5], f"book sat {cid}", "done"],  # the wrong day
                  [*right[:4], f"send {other} {order}", f"book fri {cid}", "done"],  # the wrong recipient
                  [*right[:5], "done"],  # the meeting never booked
                  ["add tea 2", "add jam 1", *right[1:]]):  # something extra in the cart
        ep, result = play(env, TASK, wrong)
        assert result.next is None and result.reward == 0.0 and not result.success, wrong


def test_the_todo_moves_on_with_the_steps_call_right_or_wrong():
    env = make()
    ep = env.new_episode(TASK, random.Random(0))
    ep.start()
    # another item: the step is not done; its item, a wrong quantity: moves on
    assert ep.step("add jam 1").next.text.endswith("todo: buy tea 2\n> ")
    assert ep.step("add tea 5").next.text.endswith("todo: buy rice 1\n> ")
    assert ep.world.cart == {"jam": 1, "tea": 5}


def test_errors_are_recoverable_and_malformed_calls_never_raise():
    env = make(slack=20)
    ep = env.new_episode(TASK, random.Random(0))
    ep.start()
    for garbage in ["", "buy tea", "add tea", "add tea two", "\x00\x01", "fly", "done now", "send 1 2",
                    "book xmas 12"]:
        r = ep.step(garbage)
        assert r.next is not None and r.next.text.startswith("error: ") and r.reward == 0.0
        assert r.next.text.endswith("todo: buy tea 2\n> ")
        assert [e.kind for e in r.events if e.kind != "provenance"] in (["invalid_action"], ["error"])
    assert ep.step("add cake 1").next.text.startswith("error: no item cake")
    ep.step("add tea 5")  # a wrong quantity, undone
    assert ep.step("remove tea").next.text.startswith("ok\n") and ep.world.cart == {}
    assert ep.step("pay").next.text.startswith("error: cart empty")


def test_busy_refusals_change_nothing_and_the_demonstrator_recovers():
    env = make(busy_rate=0.5, slack=10)
    recovered = 0
    for seed in range(30):
        ep = env.new_episode(TASK, random.Random(seed))
        obs = ep.start()
        while obs is not None:
            world = ep.world
            before = (dict(world.cart), world.paid, list(world.mails), list(world.meetings), ep.cursor)
            action = ep.expert_action()
            result = ep.step(action)
            obs = result.next
            if obs is not None and obs.text.startswith("error: busy"):
                assert (ep.world.cart, ep.world.paid, ep.world.mails, ep.world.meetings, ep.cursor) == before
                again = ep.expert_action()  # the same call, or the id looked up again
                looked_up_again = again.startswith("find ") and action.split()[0] in ("send", "book")
                assert again == action or looked_up_again
                recovered += again != action
        assert result.success
    assert recovered > 0


def test_turn_budget_ends_every_episode():
    env = make(slack=2)
    task = {"items": [["tea", 2], ["rice", 1]]}  # tier 1: 4 calls, budget 6
    ep, r = play(env, task, ["pay"] * 5)
    assert r.next is not None
    r = ep.step("pay")
    assert r.next is None and r.reward == 0.0 and r.info["out_of_turns"]


def test_fault_mode_flags_a_share_of_episodes():
    results = [expert(make(fault_rate=0.25), TASK, seed=s)[1] for s in range(400)]
    faulted = [r for r in results if r.info["fault"]]
    assert 60 < len(faulted) < 140  # about 25%
    for r in faulted:
        assert r.next is None and r.reward == 0.0 and [e.kind for e in r.events] == ["fault"]
    assert all(r.success for r in results if not r.info["fault"])
    assert not any(expert(make(), TASK, seed=s)[1].info["fault"] for s in range(50))


def test_demonstrator_slips_quantities_and_days_only():
    env = make(demo_slip=0.3)
    tasks = [json.loads(row["task"]) for row in env.task_set()["train"] if row["tier"] == 3]
    wrong, values, success = 0, 0, []
    for k, task in enumerate(tasks * 5):
        ep, result, actions = expert(env, task, seed=k)
        success.append(result.success)
        for item, qty in task["items"]:
            adds = [a for a in actions if a.startswith(f"add {item} ")]
            wrong += adds[0] != f"add {item} {qty}"
            values += 1
        # names never slip
        assert all(a == f"find {task['contact']}" for a in actions if a.startswith("find"))
    assert 0.25 < wrong / values < 0.35
    assert 0.05 < sum(success) / len(success) < 0.2  # about 0.7 ** 6 (five quantities and a day)


def test_bad_config_fails():
    for key in ("fault_rate", "busy_rate", "demo_slip"):
        with pytest.raises(ValueError, match=key):
            make(**{key: 1.0})
    with pytest.raises(ValueError, match="slack"):
        make(slack=-1)


def test_numbers_are_bounded_ascii():
    """A quantity or an id past 18 digits is a bad call (no effect), never a crash; leading zeros read as
    before."""
    env = make(slack=20)
    ep = env.new_episode(TASK, random.Random(0))
    ep.start()
    for call in ["add tea " + "9" * 19, "add tea " + "9" * 5000, "send " + "1" * 5000 + " 47",
                 "book fri " + "1" * 5000, "add tea ٢", "add tea ²"]:
        r = ep.step(call)
        kinds = [e.kind for e in r.events if e.kind != "provenance"]  # (#46: the call after an error uses it)
        assert r.next.text.startswith("error: bad call") and kinds == ["invalid_action"]
    assert ep.world.cart == {}
    ep.step("add tea 02")
    assert ep.world.cart == {"tea": 2}
