"""envs/testbeds/braid/: operations and contracts on hand-computed cases, the generator's
invariants, the splits, and the text episode."""

import json
import random

import pytest

from envs.testbeds.braid import (
    DOMAINS,
    OPS,
    BraidConfig,
    BraidEnv,
    BraidTask,
    apply_op,
    input_contract,
    is_type,
    output_contract,
    perturb,
    read,
    render,
)


@pytest.mark.parametrize(("op", "k", "inputs", "out"), [
    ("sort", 0, [[3, 1, 2]], [1, 2, 3]),
    ("rev", 0, [[3, 1, 2]], [2, 1, 3]),
    ("evens", 0, [[3, 4, 2, 7]], [4, 2]),
    ("sum", 0, [[3, 4, 2]], 9),
    ("max", 0, [[3, 40, 2]], 40),
    ("len", 0, [[]], 0),
    ("concat", 0, [[1], [2, 3]], [1, 2, 3]),
    ("add", 5, [10], 15),
    ("mul", 3, [7], 21),
    ("mod", 7, [23], 2),
    ("digits", 0, [507], [5, 0, 7]),
    ("plus", 0, [4, 5], 9),
    ("dedup", 0, ["banana"], "ban"),
    ("rev_s", 0, ["abc"], "cba"),
    ("vowels", 0, ["banana"], 3),
    ("join", 0, ["ab", "cd"], "abcd"),
    ("shift", 2, ["azy"], "cba"),
])
def test_every_operation_on_a_hand_computed_case(op, k, inputs, out):
    assert apply_op(op, k, inputs) == out
    assert output_contract(op, k, inputs, out)


def test_contracts_catch_malformed_and_some_wrong_values_but_are_not_the_truth():
    assert not input_contract("max", 0, [[]])  # precondition: a non-empty list
    assert apply_op("max", 0, [[]]) is None
    assert not input_contract("concat", 0, [[1] * 7, [2] * 6])  # 13 items > 12
    assert not input_contract("sort", 0, ["abc"])  # wrong type
    assert not output_contract("sort", 0, [[3, 1]], [3, 1])  # not sorted
    assert not output_contract("sort", 0, [[3, 1]], None)  # malformed
    assert not output_contract("mod", 5, [23], 5)  # out of [0, 5)
    assert not output_contract("max", 0, [[1, 2]], 3)  # not an input item
    assert output_contract("sum", 0, [[1, 2]], 4)  # wrong, yet plausible: contracts are not the truth
    assert output_contract("shift", 1, ["abc"], "xyz")


def test_types_and_reading_hostile_text():
    assert is_type(0, "int") and not is_type(True, "int") and not is_type(-1, "int")
    assert is_type([], "list") and not is_type([100], "list") and not is_type("a", "list")
    assert is_type("ab", "str") and not is_type("", "str") and not is_type("Ab", "str")
    assert read(" 1 2 3", "list") == [1, 2, 3] and read("-", "list") == [] and read("1 x", "list") is None
    assert read("١٦", "int") is None and read("9" * 8, "int") is None and read(" 42", "int") == 42
    assert read("abc", "str") == "abc" and read("a b", "str") is None and read("x" * 500, "str") is None
    assert render([]) == "-" and render(None) == "?" and render([1, 2]) == "1 2"


def test_perturb_keeps_the_type_and_changes_the_value():
    rng = random.Random(0)
    for value, kind in [(0, "int"), (500, "int"), ([], "list"), ([5], "list"), ([1, 2, 3], "list"),
                        ("a", "str"), ("abc", "str")]:
        for _ in range(50):
            wrong = perturb(value, rng)
            assert wrong != value and is_type(wrong, kind)
    assert perturb(None, rng) is None


def test_tasks_are_well_formed_dags_of_their_domain_and_splits_are_disjoint():
    env = BraidEnv(BraidConfig(train_size=80, heldout_size=80, dev_size=40))
    splits = env.task_set()
    assert {len(splits[s]) for s in ("train", "heldout", "dev")} == {80, 40}
    keys = [set(splits[s]["task"]) for s in ("train", "heldout", "dev")]
    assert not (keys[0] & keys[1]) and not (keys[0] & keys[2]) and not (keys[1] & keys[2])
    for row in splits["train"]:
        task = BraidTask.parse(json.loads(row["task"]))
        assert task.domain == row["tier"] and 3 <= len(task.nodes) <= 6 and 1 <= len(task.sinks) <= 2
        assert all(n.op in DOMAINS[task.domain][1] for n in task.nodes)
        assert all(isinstance(a, str) or a < n.index for n in task.nodes for a in n.args)  # topological
        truth = task.truth()
        assert all(is_type(truth[n.index], OPS[n.op].output) for n in task.nodes)
        assert all(any(f"x{j}" in n.args for n in task.nodes) for j in range(len(task.sources)))


def test_episode_oracle_succeeds_and_a_wrong_or_unreadable_answer_fails():
    env = BraidEnv(BraidConfig(train_size=8, heldout_size=8, dev_size=8, demo_error=0.0))
    task = json.loads(env.task_set()["heldout"][0]["task"])
    ep = env.new_episode(task, random.Random(0))
    obs = ep.start()
    assert obs.role == "agent" and obs.text.startswith("TASK ")
    while obs is not None:
        result = ep.step(ep.expert_action())
        obs = result.next
    assert result.success and result.reward == 1.0 and result.info["node_accuracy"] == 1.0
    ep = env.new_episode(task, random.Random(0))
    ep.start()
    result = ep.step("not a value at all")
    assert [e.kind for e in result.events] == ["invalid_action"]
    while result.next is not None:
        result = ep.step(ep.expert_action())
    assert not result.success  # the malformed value propagates to a sink (every node feeds one)
