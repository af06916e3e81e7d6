"""skill_families, layout `induction` (issue #41): the texts by hand, the calls' parsing and scoring, the
curate prompt, and the numbered layout's tasks and splits unchanged."""

from __future__ import annotations

import hashlib
import json
import random

import pytest

from envs.testbeds.skill_families import SkillFamiliesConfig, SkillFamiliesEnv
from envs.testbeds.skill_induction import parse_call, tools_line
from tests.helpers import play_skill, skill_env

TASK = {"family": "t", "order": ["read", "sort", "check", "write"], "plan": 3,
        "tools": [["1", "sort"], ["2", "clean"], ["3", "read"], ["4", "check"]]}
# the next instance of the same family: the same steps under other numbers
NEXT = {**TASK, "plan": 4,
        "tools": [["1", "write"], ["2", "read"], ["3", "check"], ["4", "sort"], ["5", "merge"]]}


def env(layout: str = "induction", **kw) -> SkillFamiliesEnv:
    return skill_env(layout=layout, **kw)


play = play_skill


def test_following_a_document_is_a_chain_of_next_token_copies():
    texts, r = play(env(), {**TASK, "skill": "read sort"}, [" read 3", " sort 1", " check 4"])
    assert texts == ["skill: read sort\ntools: sort 1 clean 2 read 3 check 4\nskill:", "ok\nread", "ok\nsort"]
    assert r.success and r.reward == 1.0 and r.info["found"] == ["3", "1", "4"]
    # every step word is the token after the prompt's last word in the document (or after `skill:`), and
    # every number the token after that word in the tools line
    doc, tools = ["skill:", "read", "sort"], ["tools:", "sort", "1", "clean", "2", "read", "3", "check", "4"]
    for prompt, action in zip(["skill:", "read"], [" read 3", " sort 1"], strict=True):
        step, number = action.split()
        assert doc[doc.index(prompt) + 1] == step and tools[tools.index(step) + 1] == number


def test_misses_and_invalid_calls_are_scored_as_in_the_numbered_layout():
    e = env()
    texts, r = play(e, TASK, [" sort 1", " read 3", " clean 2", " sort 1"])  # miss, ok, miss (second): fails
    assert texts[1] == "no\nskill:" and texts[2] == "ok\nread"
    assert not r.success and r.reward == 0.0 and r.info["misses"] == 2 and r.info["found"] == ["3"]
    # invalid calls: a pair that is not listed, a bare number, a bare step, extra words; each a miss and -0.5
    for bad in [" sort 3", " 3", " read", " read 3 3", " read 9", "<skill> read </skill>", "", "9" * 5000]:
        texts, r = play(e, TASK, [bad, " read 3", " sort 1", " check 4"])
        assert texts[1] == "no\nskill:" and r.success and r.reward == 0.5, bad
        assert r.info["invalid_calls"] == 1, bad
        _, r = play(e, TASK, [bad])
        assert any(ev.kind == "invalid_action" for ev in r.events), bad


def test_parse_call():
    step_of = {"1": "sort", "3": "read"}
    assert parse_call(" read 3", step_of) == "3" and parse_call("sort 1\n", step_of) == "1"
    assert parse_call(" 3 read", step_of) is None and parse_call(" read 1", step_of) is None
    assert tools_line([["1", "sort"], ["2", "clean"]]) == "tools: sort 1 clean 2"


def test_curate_sees_the_steps_and_the_calls_on_two_lines():
    e = env()
    task = {**TASK, "skill": "read", "found": ["3", "1"]}
    texts, r = play(e, task, [" <skill> read sort </skill>"], "curate")
    assert texts[0] == ("skill: read\ntools: sort 1 clean 2 read 3 check 4\nfound: read sort\ncalls: 3 1\n"
                        "curate:")
    assert r.info["doc_abstract"] and r.info["doc_right"] and r.reward == 0.0
    _, r = play(e, task, [" <skill> 3 1 </skill>"], "curate")
    assert r.info["doc_concrete"] and not r.info["doc_right"]
    _, r = play(e, {**TASK, "found": []}, [" <skill> </skill>"], "curate")
    assert r.info["doc_empty"]


def test_a_concrete_document_fails_on_the_next_instance_and_an_abstract_one_carries():
    e = env()
    # task 0 found read (3) then sort (1): the concrete document is "3 1", the abstract "read sort"
    _, r = play(e, {**NEXT, "skill": "read sort"}, [" read 2", " sort 4", " check 3", " write 1"])
    assert r.success
    # the concrete document's numbers, called with their listed steps on the next instance: misses
    _, r = play(e, {**NEXT, "skill": "3 1"}, [" check 3", " write 1"])
    assert not r.success and r.info["found"] == []


@pytest.mark.parametrize("plan", [2, 3, 4])
def test_the_demonstrator_with_the_right_document_always_succeeds(plan):
    e = env(demo_slip=0.0)
    rng = random.Random(plan)
    for _ in range(50):
        order = e.new_order(rng)
        task = {**e.instance(rng, "f", order, plan), "skill": " ".join(order[: plan - 1])}
        ep = e.new_episode(task, rng)
        obs, r = ep.start(), None
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        assert r is not None and r.success and r.reward == 1.0


def test_the_layouts_share_tasks_and_splits_and_the_numbered_splits_are_unchanged():
    a, b = env("numbered"), env("induction")
    for split in a.task_set():
        assert a.task_set()[split]["task"] == b.task_set()[split]["task"]
    # the cpu scale's splits (demo_size 6000), as the numbered layout made them before the induction one
    t = SkillFamiliesEnv(SkillFamiliesConfig(demo_size=6000)).task_set()
    digest = hashlib.sha256(json.dumps({k: list(t[k]["task"]) for k in sorted(t)}).encode()).hexdigest()
    assert digest[:16] == "b0b44256de84ca0f"
    with pytest.raises(ValueError, match="layout"):
        env("words")
