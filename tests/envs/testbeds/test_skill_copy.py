"""skill_families, layout `copy` (issue #41, the second attempt): letters as tool labels, the solve prompt
ends with the document's line as far as it was followed, and on the suite's trained tokenizer every lookup is
a copy of one token."""

from __future__ import annotations

import json
import random

import pytest

from common.models import train_tokenizer
from envs.testbeds.skill_families import ROLES, SkillFamiliesEnv, doc_kind
from envs.testbeds.skill_induction import LETTERS
from tests.helpers import play_skill, skill_env

TASK = {"family": "t", "order": ["read", "sort", "check", "write"], "plan": 3,
        "tools": [["a", "sort"], ["b", "clean"], ["c", "read"], ["d", "check"]]}
NEXT = {**TASK, "plan": 4,
        "tools": [["a", "write"], ["b", "read"], ["c", "check"], ["d", "sort"], ["e", "merge"]]}


def env(layout: str = "copy", **kw) -> SkillFamiliesEnv:
    return skill_env(layout=layout, **kw)


play = play_skill


def test_the_solve_prompt_repeats_the_document_line_as_far_as_it_was_followed():
    texts, r = play(env(), {**TASK, "skill": "read sort"}, [" read c", " sort a", " clean b", " check d"])
    assert texts == ["skill: read sort\ntools: sort a clean b read c check d\nskill:", "ok\nskill: read",
                     "ok\nskill: read sort", "no\nskill: read sort"]
    assert r.success and r.reward == 1.0 and r.info["found"] == ["c", "a", "d"] and r.info["misses"] == 1


def test_calls_are_step_letter_pairs_and_anything_else_is_invalid():
    for bad in [" read 3", " c", " sort c", " read c c", " read f", ""]:
        texts, r = play(env(), TASK, [bad, " read c", " sort a", " check d"])
        assert texts[1] == "no\nskill:" and r.success and r.reward == 0.5, bad
        assert r.info["invalid_calls"] == 1, bad


def test_concrete_documents_are_letters_and_fail_on_the_next_instance():
    assert doc_kind(["c", "a"], LETTERS) == "concrete" and doc_kind(["3", "1"], LETTERS) == "other"
    assert doc_kind(["c", "a"]) == "other"  # the numbered and induction layouts: numbers, as before
    task = {**TASK, "skill": "read", "found": ["c", "a"]}
    texts, r = play(env(), task, [" <skill> read sort </skill>"], "curate")
    assert texts[0] == ("skill: read\ntools: sort a clean b read c check d\nfound: read sort\ncalls: c a\n"
                        "curate:")
    assert r.info["doc_abstract"] and r.info["doc_right"]
    _, r = play(env(), task, [" <skill> c a </skill>"], "curate")
    assert r.info["doc_concrete"] and not r.info["doc_right"]
    _, r = play(env(), {**NEXT, "skill": "read sort"}, [" read b", " sort d", " check c", " write a"])
    assert r.success
    _, r = play(env(), {**NEXT, "skill": "c a"}, [" check c", " write a"])
    assert not r.success and r.info["found"] == []


def test_the_copy_layout_has_the_numbered_layouts_tasks_with_letters_for_numbers():
    a, b = env("numbered"), env("copy")
    letter = dict(zip("123456789", LETTERS, strict=True))
    for split in a.task_set():
        for ta, tb in zip(a.task_set()[split]["task"], b.task_set()[split]["task"], strict=True):
            x = json.loads(ta)  # the numbered task, its labels (tools, found, concrete documents) lettered
            x["tools"] = [[letter[n], s] for n, s in x["tools"]]
            if "found" in x:
                x["found"] = [letter[n] for n in x["found"]]
            if "skill" in x:
                x["skill"] = " ".join(letter.get(w, w) for w in x["skill"].split())
            assert x == json.loads(tb)


@pytest.mark.parametrize("plan", [2, 3, 4])
def test_the_demonstrator_with_the_right_document_always_succeeds(plan):
    e = env(demo_slip=0.0)
    rng = random.Random(plan)
    for _ in range(30):
        order = e.new_order(rng)
        task = {**e.instance(rng, "f", order, plan), "skill": " ".join(order[: plan - 1])}
        ep = e.new_episode(task, rng)
        obs, r = ep.start(), None
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        assert r is not None and r.success


def test_on_the_trained_tokenizer_every_step_and_label_is_one_token_and_the_prompt_copies_the_document():
    # the corpus of the cpu scale's second testbed (conf/env/skill_families.yaml, the -ind arms' overrides)
    e = env(train_size=600, heldout_size=96, dev_size=48, demo_size=400, demo_abstract=0.4, demo_concrete=0.3)
    tok = train_tokenizer(list(e.corpus()), 384)
    used = sorted({n for row in e.task_set()["demo"]["task"] for n, _ in json.loads(row)["tools"]})
    assert used == list(LETTERS[:5])
    for word in [*ROLES, *used]:
        assert len(tok.tokenize(" " + word)) == 1, word
    # the prompt's steps are the document's tokens: the next step is the document line's next token
    doc = tok.encode("skill: read sort check\n")
    prompt = tok.encode("ok\nskill: read sort")
    n = len(prompt) - 2  # the prompt without `ok`, newline
    assert prompt[2:] == doc[:n] and tok.decode(doc[n:n + 1]) == " check"
    # and a label is the token after its step in the tools line
    tools = tok.encode("tools: sort a check b")
    assert [tok.decode([t]) for t in tools[2:]] == [" sort", " a", " check", " b"]


def test_random_actions_use_the_copy_layouts_labels():
    e, rng = env(), random.Random(0)
    ep = e.new_episode(TASK, rng)
    obs = ep.start()
    r = ep.step(e.random_action(ep, obs, rng))  # a listed step and its letter: never invalid
    assert not any(ev.kind == "invalid_action" for ev in r.events)
    cur = e.new_episode({**TASK, "found": ["c"]}, rng, "curate")
    words = {w for _ in range(50) for w in e.random_action(cur, cur.start(), rng).split()[1:-1]}
    assert words and words <= {*ROLES, *LETTERS} and words & set(LETTERS)
