"""The planner-worker tool environment: rules, malformed actions, and the counterfactual replay."""

import json
import random

import pytest

from envs.registry import ENVS
from envs.testbeds.toolplan import (
    DISTRACTOR_TOOL,
    PLACEHOLDER,
    RIGHT_TOOL,
    ToolPlanConfig,
    ToolPlanEnv,
    match,
    replay,
)

TASK = {"queries": [["pop", "k"], ["area", "m"], ["year", "b"]], "values": ["Q", "F", "Z"],
        "decoys": ["R", "G", "A"]}


def play(actions, task=TASK, k=3):
    env = ToolPlanEnv(ToolPlanConfig(k=k, train_size=8, heldout_size=4))
    ep = env.new_episode(task, random.Random(0))
    obs, seen, result = ep.start(), [], None
    for action in actions:
        assert obs is not None
        seen.append(obs)
        result = ep.step(action)
        obs = result.next
    return seen, result, obs


def test_registered_and_k_checked():
    assert ENVS["toolplan"] is ToolPlanEnv
    with pytest.raises(ValueError, match="env.k"):
        ToolPlanEnv(ToolPlanConfig(k=6))


def test_right_tools_solve_the_task():
    seen, result, obs = play([" pop area year", " census", " atlas", " archive", " Q F Z"])
    assert obs is None and result.reward == 1.0 and result.success
    assert [o.role for o in seen] == ["planner", "worker", "worker", "worker", "planner"]
    assert all(o.new_context for o in seen[1:4]) and not seen[4].new_context
    assert seen[1].text == "SUB: pop k\nTOOL:" and seen[4].text == "R: Q F Z\nANS:"
    assert result.info["record"]["tool_kinds"] == ["value", "value", "value"]


def test_distractor_wrong_tool_and_bad_tool():
    tools = [" " + DISTRACTOR_TOOL["pop"], " census", " nonsense"]
    seen, result, _ = play([" pop area year", *tools, " R ERR BAD"])
    assert seen[4].text == "R: R ERR BAD\nANS:"  # distractor looks valid; wrong tool errors; bad name flagged
    assert result.reward == 0.0
    assert result.info["record"]["tool_kinds"] == ["distractor", "error", "invalid"]
    assert result.info["distractor_rate"] == pytest.approx(1 / 3)
    assert result.info["tool_error_rate"] == pytest.approx(2 / 3)


def test_wrong_attribute_in_plan_gives_errors():
    seen, result, _ = play([" year area year", " archive", " atlas", " archive", " ERR F Z"])
    assert seen[1].text == "SUB: year k\nTOOL:"
    assert result.info["record"]["results"] == ["ERR", "F", "Z"]
    assert result.info["slot_accuracy"] == pytest.approx(2 / 3) and result.reward == 0.0


@pytest.mark.parametrize("plan", ["", "pop area", "pop area year temp", "pop ; area ; year", "\x00\x01"])
def test_malformed_plan_ends_with_an_invalid_action(plan):
    _, result, obs = play([plan])
    assert obs is None and result.reward == 0.0
    assert [e.kind for e in result.events] == ["invalid_action"]
    assert "attributes" in result.events[0].data["why"]
    assert result.info["record"]["answer"] is None


def test_malformed_answer_scores_zero():
    _, result, _ = play([" pop area year", " census", " atlas", " archive", " Q F"])
    assert result.reward == 0.0 and [e.kind for e in result.events] == ["invalid_action"]


def test_match_is_half_share_plus_half_exact():
    assert match(["Q", "F", "Z"], ["Q", "F", "Z"]) == 1.0
    assert match(["Q", "?", "Z"], ["Q", "F", "Z"]) == pytest.approx(1 / 3)
    assert match([], ["Q", "F"]) == 0.0


def test_replay_replaces_the_masked_workers_outputs():
    _, result, _ = play([" pop area year", " census", " " + DISTRACTOR_TOOL["area"], " archive", " Q G Z"])
    record = result.info["record"]
    full = replay(record, frozenset())
    assert full.results == ["Q", "G", "Z"] and full.answer == ["Q", "G", "Z"]
    assert full.value == pytest.approx(match(["Q", "G", "Z"], ["Q", "F", "Z"]))
    masked = replay(record, frozenset({0, 2}))
    assert masked.results == [PLACEHOLDER, "G", PLACEHOLDER]  # what the planner would have seen
    assert masked.answer == [PLACEHOLDER, "G", PLACEHOLDER]  # ... and composed
    assert masked.value == 0.0
    assert replay(record, frozenset({1})).value == pytest.approx(1 / 3)
    assert record["results"] == ["Q", "G", "Z"]  # the record itself is untouched
    assert ToolPlanEnv.replay is not None


def test_demonstrator_is_imperfect_but_plans_and_composes_right():
    env = ToolPlanEnv(ToolPlanConfig(k=4, train_size=64, heldout_size=8, demo_distractor=0.25,
                                     demo_wrong=0.1))
    rng = random.Random(0)
    kinds = []
    for row in env.task_set()["train"]:
        ep = env.new_episode(json.loads(row["task"]), rng)
        obs = ep.start()
        while obs is not None:
            res = ep.step(ep.expert_action())
            obs = res.next
        kinds += res.info["record"]["tool_kinds"]
        assert res.info["plan_ok"] and res.info["record"]["answer"] == res.info["record"]["results"]
    assert 0.15 < kinds.count("distractor") / len(kinds) < 0.35
    assert 0.03 < kinds.count("error") / len(kinds) < 0.2
    assert kinds.count("invalid") == 0


def test_task_sets_are_disjoint_and_tools_are_known():
    env = ToolPlanEnv(ToolPlanConfig(k=2, train_size=100, heldout_size=30))
    ts = env.task_set()
    assert not set(ts["train"]["task"]) & set(ts["heldout"]["task"])
    assert set(RIGHT_TOOL) == set(DISTRACTOR_TOOL)
