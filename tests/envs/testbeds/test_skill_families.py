"""skill_families: the rules by hand, the odds without a document, the splits and the warm start's mix."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from envs.testbeds.skill_families import ROLES, SkillFamiliesConfig, SkillFamiliesEnv, doc_kind, parse_skill
from tests.helpers import play_skill, skill_env

TASK = {"family": "t", "order": ["read", "sort", "check", "write"], "plan": 3,
        "tools": [["1", "sort"], ["2", "clean"], ["3", "read"], ["4", "check"]]}


def env(**kw) -> SkillFamiliesEnv:
    return skill_env(**kw)


play = play_skill


def test_a_right_plan_succeeds_and_a_second_miss_fails():
    e = env()
    texts, r = play(e, {**TASK, "skill": "read sort"}, [" 3", " 1", " 4"])
    assert texts[0] == "skill: read sort\ntools: 1 sort 2 clean 3 read 4 check\nstep 1:"
    assert texts[1] == "ok\nstep 2:" and r.success and r.reward == 1.0 and r.info["found"] == ["3", "1", "4"]
    _, r = play(e, TASK, [" 1", " 3", " 2", " 1"])  # miss, ok, miss (the second): fails
    assert not r.success and r.reward == 0.0 and r.info["misses"] == 2 and r.info["found"] == ["3"]
    texts, r = play(e, TASK, [" 9", " 3", " 1", " 4"])  # an invalid name: a miss, penalized 0.5
    assert texts[1] == "no\nstep 1:" and r.success and r.reward == 0.5 and r.info["invalid_calls"] == 1


def test_hostile_solve_actions_are_invalid_not_errors():
    e = env()
    for text in ["", "\x00", "3 1", "read", "<skill> read </skill>", "9" * 5000]:
        ep = e.new_episode(TASK, random.Random(0))
        ep.start()
        r = ep.step(text)
        assert any(ev.kind == "invalid_action" for ev in r.events)


def test_curate_parses_classifies_and_penalizes():
    e = env()
    task = {**TASK, "skill": "read", "found": ["3", "1"]}
    texts, r = play(e, task, [" <skill> read sort </skill>"], "curate")
    assert texts[0] == "skill: read\ntools: 1 sort 2 clean 3 read 4 check\nfound: 3 read 1 sort\ncurate:"
    assert r.info["skill"] == "read sort" and r.info["doc_abstract"] and r.info["doc_right"]
    assert r.reward == 0.0
    _, r = play(e, task, [" <skill> sort read </skill>"], "curate")
    assert r.info["doc_abstract"] and not r.info["doc_right"]  # abstract, but the wrong order
    _, r = play(e, task, [" <skill> 3 1 </skill>"], "curate")
    assert r.info["doc_concrete"] and r.info["skill"] == "3 1"
    _, r = play(e, task, [" <skill> </skill>"], "curate")
    assert r.info["doc_empty"] and r.reward == 0.0
    for bad in [" read sort", " <skill> a b c d e f g </skill>", " <skill> Read </skill>", "<skill>"]:
        _, r = play(e, task, [bad], "curate")
        assert r.reward == -0.5 and r.info["skill"] == ""
        assert any(ev.kind == "invalid_action" for ev in r.events)


def test_parse_and_kind():
    assert parse_skill("x <skill> read 2 </skill> y", 6) == ["read", "2"]
    assert parse_skill("<skill>read</skill><skill>sort</skill>", 6) == ["read"]
    assert doc_kind([]) == "empty" and doc_kind(["read", "sort"]) == "abstract"
    assert doc_kind(["3", "1"]) == "concrete"
    assert doc_kind(["read", "3"]) == "other" and doc_kind(["banana"]) == "other"


def odds_without_document(e: SkillFamiliesEnv, plan: int, n: int = 3000) -> float:
    """The scripted searcher's success without a document (demo_slip 0): elimination by trial."""
    rng = random.Random(plan)
    wins = 0
    for _ in range(n):
        order = rng.sample(ROLES, 4)
        task = e.instance(rng, "f", order, plan)
        ep = e.new_episode(task, random.Random(rng.random()))
        obs, r = ep.start(), None
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        wins += r.success
    return wins / n


def test_search_without_a_document_has_the_stated_odds():
    e = env(demo_slip=0.0)
    for plan, odds in ((2, 1 / 2), (3, 1 / 6), (4, 1 / 24)):
        assert odds_without_document(e, plan) == pytest.approx(odds, abs=0.03)


def test_splits_are_whole_families_with_orders_of_their_own():
    e = env()
    sets = e.task_set()
    orders = {}
    for split in ("train", "heldout", "dev"):
        rows = [json.loads(r["task"]) for r in sets[split]]
        assert [r["plan"] for r in rows] == [2, 3, 4] * (len(rows) // 3)
        for i in range(0, len(rows), 3):
            family = rows[i:i + 3]
            assert len({r["family"] for r in family}) == 1 and len({tuple(r["order"]) for r in family}) == 1
            orders[tuple(rows[i]["order"])] = split
    assert len(orders) == (30 + 6 + 6) // 3  # no order in two families
    with pytest.raises(ValueError, match="multiple of 3"):
        env(train_size=31)


def test_the_warm_start_writes_every_kind_of_document():
    e = SkillFamiliesEnv(SkillFamiliesConfig(train_size=30, heldout_size=6, dev_size=6, demo_size=1000))
    kinds = Counter()
    rng = random.Random(0)
    for row in e.task_set()["demo"]:
        task = json.loads(row["task"])
        if task.get("kind") == "curate" and task["found"]:  # an empty trace leaves nothing to write
            ep = e.new_episode(task, rng)
            ep.start()
            kinds[doc_kind(parse_skill(ep.expert_action(), 6) or [])] += 1
    total = sum(kinds.values())
    # the curator's mix over traces with something found: abstract 30%, concrete 30%, empty 40%
    assert 0.24 < kinds["abstract"] / total < 0.36 and 0.24 < kinds["concrete"] / total < 0.36
    assert 0.33 < kinds["empty"] / total < 0.47 and kinds["other"] == 0


def prior_player_success(e: SkillFamiliesEnv, know_prior: bool, n: int = 1500) -> float:
    """Mean success over plans 2-4 without a document of a searcher by elimination that tries the prior's
    successor of the last step found first (`know_prior`) or searches uniformly (the demonstrator)."""
    from envs.testbeds.skill_families import PRIOR_NEXT

    rng = random.Random(7)
    wins = 0
    for _ in range(n):
        order = e.new_order(rng)
        for plan in (2, 3, 4):
            ep = e.new_episode(e.instance(rng, "f", order, plan), random.Random(rng.random()))
            obs, r = ep.start(), None
            while obs is not None:
                action = ep.expert_action()
                guess = PRIOR_NEXT[ep.step_of[ep.found[-1]] if ep.found else None]
                untried = [s for n_, s in ep.tools if n_ not in ep.found and n_ not in ep.missed]
                if know_prior and guess in untried:
                    action = " " + ep.name_of[guess]
                r = ep.step(action)
                obs = r.next
            wins += r.success
    return wins / (3 * n)


def test_order_prior_by_hand_and_what_it_leaves_to_learn():
    from envs.testbeds.skill_families import PRIOR_NEXT

    assert PRIOR_NEXT[None] == "read" and PRIOR_NEXT["read"] == "filter" and PRIOR_NEXT["clean"] == "read"
    assert env(order_prior=1.0).new_order(random.Random(0)) == ["read", "filter", "sort", "merge"]
    e = env(order_prior=0.5, demo_slip=0.0)
    rng = random.Random(0)
    orders = [e.new_order(rng) for _ in range(4000)]
    assert all(len(set(o)) == 4 for o in orders)
    # the first step is read with probability q + (1 - q) / 8; a next step is the successor with
    # q + (1 - q) / 7 (the successor is free unless it was drawn before, rare)
    assert sum(o[0] == "read" for o in orders) / 4000 == pytest.approx(0.5 + 0.5 / 8, abs=0.03)
    follows = sum(o[1] == PRIOR_NEXT[o[0]] for o in orders) / 4000
    assert follows == pytest.approx(0.5 + 0.5 / 7, abs=0.03)
    # uniform orders (q = 0) are unchanged: the demonstrator's search, and a prior-aware one gains nothing
    assert prior_player_success(env(demo_slip=0.0), True) == pytest.approx(
        prior_player_success(env(demo_slip=0.0), False), abs=0.03)
    # at q = 0.5 knowing the prior lifts no-document success by about a third (simulated: 0.24 -> 0.57), and a
    # right document still solves every task, so a document carries what the prior does not
    uniform, prior = prior_player_success(e, False), prior_player_success(e, True)
    assert uniform == pytest.approx((1 / 2 + 1 / 6 + 1 / 24) / 3, abs=0.03) and prior > uniform + 0.25
    with pytest.raises(ValueError, match="order_prior"):
        env(order_prior=1.5)


def test_with_a_prior_orders_are_drawn_independently_and_splits_stay_whole_families():
    plain, prior = env().task_set(), env(order_prior=0.5).task_set()
    assert plain["train"]["task"] == env(order_prior=0.0).task_set()["train"]["task"]  # q = 0: unchanged
    rows = [json.loads(r["task"]) for r in prior["train"]]
    assert [r["plan"] for r in rows] == [2, 3, 4] * (len(rows) // 3)
    firsts = Counter(r["order"][0] for r in rows[::3])
    assert firsts.most_common(1)[0][0] == "read"
