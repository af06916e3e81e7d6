"""chain_tasks' families (`env.families=true`, envs/testbeds/chain_families.py): which tasks share a family
and what they share, a ticket played call by call, the documents (an abstract one serves every task of its
family, a concrete one names nobody right), the curate turn, the splits and the settings."""

from __future__ import annotations

import json
import random
from collections import defaultdict

import pytest

from common.episode import Task
from envs.api.check import oracle_policy, play, random_policy
from envs.api.fuzz import fuzz
from envs.testbeds.chain_families import ROLES, STEPS, VERBS, doc_kind, doc_right, doc_steps
from envs.testbeds.chain_tasks import DAYS, NAMES, ChainTasksConfig, ChainTasksEnv
from replications.skillrise.chain import oracle_doc

TASK = {"family": "f", "order": ["mail guest", "book boss", "mail staff", "book guest"], "plan": 2,
        "people": [["guest", "eve"], ["boss", "ana"], ["owner", "kim"]], "day": "fri"}


def make(**kw):
    base = {"families": True, "busy_rate": 0.0, "train_size": 9, "heldout_size": 3, "dev_size": 3}
    return ChainTasksEnv(ChainTasksConfig(**{**base, **kw}))


def tasks_of(env, split="train"):
    return [json.loads(row["task"]) for row in env.task_set()[split]]


def families_of(tasks):
    out = defaultdict(list)
    for t in tasks:
        out[t["family"]].append(t)
    return list(out.values())


def follow(env, task, doc, seed=0):
    """The demonstrator plays `task` reading `doc`: (last result, its actions)."""
    ep = env.new_episode({**task, "skill": doc}, random.Random(seed))
    obs, actions, result = ep.start(), [], None
    while obs is not None:
        actions.append(ep.expert_action())
        result = ep.step(actions[-1])
        obs = result.next
    return result, actions


def test_a_family_spelled_out():
    env = make()
    rows = env.task_set()["train"]
    assert list(rows["tier"]) == [2, 3, 4] * 3 and env.tiers == (2, 3, 4)
    first = [json.loads(t) for t in rows["task"][:3]]
    order = ["book staff", "mail client", "mail staff", "book guest"]
    assert first == [
        {"day": "thu", "family": "train-f0000", "order": order, "plan": 2,
         "people": [["client", "bob"], ["owner", "eve"], ["staff", "sam"]]},
        {"day": "tue", "family": "train-f0000", "order": order, "plan": 3,
         "people": [["client", "sam"], ["boss", "bob"], ["staff", "kim"]]},
        {"day": "mon", "family": "train-f0000", "order": order, "plan": 4,
         "people": [["guest", "eve"], ["client", "zoe"], ["boss", "kim"], ["staff", "lee"]]}]
    # the people: the plan's roles and one distractor whose role is in no step (owner, then boss, boss);
    # no role keeps a name (client bob, sam, zoe; staff sam, kim, lee)
    assert [oracle_doc(Task(f"t{i}", t["plan"], json.dumps(t))) for i, t in enumerate(first)] == [
        "book staff mail client", "book staff mail client mail staff",
        "book staff mail client mail staff book guest"]
    assert json.loads(rows["task"][3])["family"] == "train-f0001"


def test_what_families_share_over_every_split():
    env = make(train_size=90, heldout_size=30, dev_size=30, demo_size=30, family_distractors=2)
    demo_orders = {tuple(t["order"]) for t in tasks_of(env, "demo")}
    orders: set[tuple[str, ...]] = set()
    for split, n in (("train", 30), ("heldout", 10), ("dev", 10)):
        families = families_of(tasks_of(env, split))
        assert [len(f) for f in families] == [3] * n
        for fam in families:
            order = fam[0]["order"]
            assert len(order) == len(set(order)) == 4 and set(order) <= set(STEPS)
            assert tuple(order) not in orders | demo_orders  # no procedure in two families
            orders.add(tuple(order))
            for p, t in enumerate(fam):
                assert t["order"] == order and t["plan"] == p + 2 and t["day"] in DAYS
                roles = [r for r, _ in t["people"]]
                involved = {s.split()[1] for s in order[:t["plan"]]}
                distractors = set(roles) - involved
                assert involved <= set(roles) and len(roles) == len(set(roles)) == len(involved) + 2
                assert not distractors & {s.split()[1] for s in order}
                names = [n for _, n in t["people"]]
                assert len(set(names)) == len(names) and set(names) <= set(NAMES)
                for earlier in fam[:p]:  # no role keeps a name it had
                    assert not set(map(tuple, t["people"])) & set(map(tuple, earlier["people"]))


def test_a_whole_ticket_and_what_the_solver_sees():
    env = make(invalid_penalty=0.25, slack=4)  # plan 2: 8 calls
    ep = env.new_episode({**TASK, "skill": "mail guest"}, random.Random(0))
    order, eve, ana = ep.world.order_id, ep.world.contact_ids["eve"], ep.world.contact_ids["ana"]
    ticket = f"ticket: order {order} day fri guest eve boss ana owner kim"
    assert ep.start().text == f"skill: mail guest\n{ticket}\nstep 1/2\n> "
    script = [("find eve", f"ok eve {eve}\nstep 1/2\n> "),
              (f"send 99 {order}", "error: no contact 99\nstep 1/2\n> "),  # the apps' error
              (f"send {eve} {order}", f"ok eve {eve}\nstep 2/2\n> "),  # step 1, mail guest: made
              (f"send {eve} {order}", "no\nstep 2/2\n> "),  # apps-valid, not the next step: refused
              ("fly", "error: bad call\nstep 2/2\n> "),  # a bad call: invalid, penalized
              ("find ana", f"ok ana {ana}\nstep 2/2\n> "),
              (f"book mon {ana}", "no\nstep 2/2\n> ")]  # the right person, another day
    for action, text in script:
        r = ep.step(action)
        assert r.next.text == text and not r.next.new_context and r.next.role == "solver", action
    assert ep.world.mails == [(eve, order)] and ep.world.meetings == []  # refusals changed nothing
    r = ep.step(f"book fri {ana}")  # step 2, book boss: the plan is done
    assert r.next is None and r.success and r.reward == pytest.approx(1.0 - 0.25)
    assert r.info == {"calls": 8, "progress": 1.0, "fault": False, "out_of_turns": False,
                      "found": ["mail eve", "book ana"], "misses": 2, "invalid_calls": 1}
    assert ep.world.meetings == [("fri", ana)]


def test_done_gives_up_the_budget_ends_and_a_fault_ends_with_nothing():
    env = make()
    ep = env.new_episode(TASK, random.Random(0))
    r = ep.step("done")
    assert r.next is None and not r.success and r.reward == 0.0
    ep = env.new_episode(TASK, random.Random(0))  # plan 2, slack 3: 7 calls
    for _ in range(6):
        assert ep.step("find eve").next is not None
    r = ep.step("find eve")
    assert r.next is None and r.info["out_of_turns"] and r.reward == 0.0
    faulted = [follow(make(fault_rate=0.5), TASK, "mail guest book boss", seed=s)[0] for s in range(40)]
    assert any(r.info["fault"] for r in faulted) and all(
        [e.kind for e in r.events] == ["fault"] and r.reward == 0.0 for r in faulted if r.info["fault"])


def test_an_abstract_document_serves_every_task_of_its_family_a_concrete_one_names_nobody_right():
    env = make(train_size=30)
    for fam in families_of(tasks_of(env)):
        abstract = " ".join(fam[-1]["order"])  # the whole procedure, abstractly
        for t in fam:
            steps = [tuple(s.split()) for s in t["order"][:t["plan"]]]
            assert doc_steps(abstract, [r for r, _ in t["people"]])[:t["plan"]] == steps
            r, actions = follow(env, t, abstract)
            assert r.success and r.info["misses"] == 0 and len(actions) <= 2 * t["plan"]
        # the names task 0's steps were made with, in order: the concrete document
        name_of = dict(map(tuple, fam[0]["people"]))
        concrete = [name_of[s.split()[1]] for s in fam[0]["order"][:fam[0]["plan"]]]
        for t in fam[1:]:
            people = dict(map(tuple, t["people"]))
            assert all(people[s.split()[1]] != n for s, n in zip(t["order"], concrete, strict=False))
            assert doc_steps(" ".join(concrete), list(people)) == [None] * (len(concrete) // 2)
            # read literally, with the verbs ("mail bob ..."), it names nobody of this ticket's steps either
            literal = " ".join(f"{s.split()[0]} {n}" for s, n in zip(t["order"], concrete, strict=False))
            assert set(doc_steps(literal, list(people))) == {None}
            # the demonstrator plays exactly as without a document
            assert follow(env, t, " ".join(concrete), seed=3)[1] == follow(env, t, "", seed=3)[1]


def test_a_wrong_abstract_document_costs_misses_and_no_document_is_a_search():
    env = make()
    t = tasks_of(env)[0]  # procedure: book staff, mail client, ...
    r, _ = follow(env, t, "book client mail staff")
    assert r.info["misses"] >= 1
    env = make(train_size=900)
    rate: dict[int, list[bool]] = defaultdict(list)
    for k, t in enumerate(tasks_of(env)):
        rate[t["plan"]].append(follow(env, t, "", seed=k)[0].success)
    share = {p: sum(v) / len(v) for p, v in rate.items()}
    assert 0.15 < share[2] < 0.45 and share[3] < share[2] and share[4] < 0.08, share


def test_document_kinds_and_rightness_by_hand():
    order = ["mail guest", "book boss", "mail staff"]
    cases = [([], "empty", False), (["mail", "guest"], "abstract", True),
             (["mail", "guest", "book", "boss"], "abstract", True), (["book", "boss"], "abstract", False),
             (["mail", "guest", "book"], "abstract", False), (["guest", "mail"], "abstract", False),
             (["eve", "ana"], "concrete", False), (["eve", "fri", "47"], "concrete", False),
             (["mail", "eve"], "other", False), (["mail", "guests"], "other", False)]
    for words, kind, right in cases:
        assert (doc_kind(words), doc_right(words, order)) == (kind, right), words
    assert doc_steps("mail guest book eve mail staff", ["guest", "staff"]) == [("mail", "guest"), None,
                                                                               ("mail", "staff")]


def test_the_curate_turn():
    env = make(invalid_penalty=0.5)
    task = {**TASK, "skill": "mail guest", "found": ["mail eve", "book ana", "mail zoe", "sing eve"]}
    ep = env.new_episode(task, random.Random(0), "curate")
    obs = ep.start()  # a found step whose name is not on the ticket, or whose verb is not one, is left out
    assert (obs.role, obs.text) == ("curator", "skill: mail guest\nticket: guest eve boss ana owner kim\n"
                                               "found: mail guest eve, book boss ana\ncurate:")
    r = ep.step(" <skill> mail guest book boss </skill>")
    assert r.next is None and r.reward == 0.0 and r.info["skill"] == "mail guest book boss"
    assert r.info["doc_abstract"] and r.info["doc_right"] and not r.events
    r = env.new_episode(task, random.Random(0), "curate").step("mail guest")  # no tags
    assert r.reward == -0.5 and [e.kind for e in r.events] == ["invalid_action"] and r.info["skill"] == ""
    for abstract, concrete, kind, skill in [(1.0, 0.0, "abstract", "mail guest book boss"),
                                            (0.0, 1.0, "concrete", "eve ana"), (0.0, 0.0, "empty", "")]:
        e = make(demo_abstract=abstract, demo_concrete=concrete)
        cur = e.new_episode(task, random.Random(0), "curate")
        r = cur.step(cur.expert_action())
        assert r.info[f"doc_{kind}"] and r.info["skill"] == skill
        assert r.info["doc_right"] == (kind == "abstract")


def test_the_demo_split_is_scripted_chains_and_leaves_the_other_splits_alone():
    plain, demo = make(), make(demo_size=30, demo_slip=0.1)
    for split in ("train", "heldout", "dev"):
        assert plain.task_set()[split]["task"][:] == demo.task_set()[split]["task"][:]
    rows = tasks_of(demo, "demo")
    assert len(rows) == 10 * 5 and all(t["family"].startswith("demo-") for t in rows)
    kinds = defaultdict(int)
    for f in range(10):
        chain = rows[5 * f: 5 * f + 5]
        assert [t.get("kind", "solve") for t in chain] == ["solve", "curate"] * 2 + ["solve"]
        assert [t["plan"] for t in chain] == [2, 2, 3, 3, 4] and chain[0]["skill"] == ""
        for solve, curate, after in ((chain[0], chain[1], chain[2]), (chain[2], chain[3], chain[4])):
            assert curate["skill"] == solve["skill"] and curate["people"] == solve["people"]
            words = after["skill"].split()
            kind = doc_kind(words)
            kinds[kind] += 1
            assert kind in ("abstract", "concrete", "empty")
            assert kind != "abstract" or doc_right(words, curate["order"])
    assert kinds["abstract"] and kinds["concrete"] and kinds["empty"]


@pytest.mark.parametrize(("setting", "match"), [
    ({"dev_size": 64}, "dev_size must be a multiple of 3"),
    ({"demo_size": 10}, "demo_size must be a multiple of 3"),
    ({"family_steps": 6, "family_distractors": 1}, "family_distractors"),
    ({"family_min_plan": 5}, "family_min_plan"),
    ({"demo_abstract": 0.7, "demo_concrete": 0.4}, "demo_abstract"),
    ({"max_skill_words": 0}, "max_skill_words"),
    ({"order_prior": 1.5}, "order_prior"),
    ({"family_steps": 1, "family_min_plan": 1, "train_size": 12, "heldout_size": 1, "dev_size": 1},
     "only 12"),
])
def test_family_settings_that_cannot_work_are_refused(setting, match):
    with pytest.raises(ValueError, match=match):
        make(**setting)


def test_order_prior_by_hand_unchanged_at_zero_and_what_it_leaves_to_learn():
    """`env.order_prior` (#46): q = 0 draws the procedures as before; q = 1 makes every procedure the
    successor chain from the start (STEPS' order: mail boss, book boss, mail client, ...); q = 0.5 makes a
    step the successor of the step before more often than a uniform draw does, lets families share a
    procedure, and the demonstrator without a document still searches uniformly (it does not know it)."""
    sizes = {"train_size": 300, "heldout_size": 30, "dev_size": 30}
    assert tasks_of(make(**sizes)) == tasks_of(make(order_prior=0.0, **sizes))
    assert {tuple(t["order"]) for t in tasks_of(make(order_prior=1.0, **sizes))} == {
        ("mail boss", "book boss", "mail client", "book client")}
    orders = [t["order"] for t in tasks_of(make(order_prior=0.5, **sizes))[::3]]
    nxt = {a: b for a, b in zip(STEPS, STEPS[1:] + STEPS[:1], strict=True)}
    follows = sum(o[i + 1] == nxt[o[i]] for o in orders for i in range(3)) / (3 * len(orders))
    assert 0.45 <= follows <= 0.65  # q plus the uniform draws' share (1/11 to 1/9 of the rest)
    assert len({tuple(o) for o in orders}) < len(orders)  # families may share one
    uniform = [t["order"] for t in tasks_of(make(**sizes))[::3]]
    assert sum(o[i + 1] == nxt[o[i]] for o in uniform for i in range(3)) / (3 * len(uniform)) < 0.2
    env = make(order_prior=0.5, **sizes)
    won = [follow(env, t, "", seed=k)[0].success for k, t in enumerate(tasks_of(env)) if t["plan"] == 2]
    assert 0.15 < sum(won) / len(won) < 0.45  # plan 2, no document: the uniform search's rate, as without it


def test_roles_offers_and_variants_are_this_instances():
    env = make()
    assert env.roles == ("solver", "curator") and env.offers == {"task_families"}
    assert env.variants() == ("main", "curate") and ChainTasksEnv.roles == ("agent",)
    assert "task_families" not in ChainTasksEnv.offers  # the class's are the default tasks'
    with pytest.raises(ValueError, match="no variant"):
        env.new_episode(TASK, random.Random(0), "solo")


def test_the_check_the_fuzz_and_the_warm_start_key():
    """The oracle wins, the random policy does not (as `python -m envs check` plays them), hostile text never
    breaks a step, and the warm start's key covers the families' code."""
    from common.warmstart import warm_start_code

    env = make(busy_rate=0.1, train_size=48, heldout_size=15)
    sample = tasks_of(env)[:20] + tasks_of(env, "heldout")
    assert sum(play(env, t, oracle_policy, k) for k, t in enumerate(sample)) / len(sample) == 1.0
    assert sum(play(env, t, random_policy, k) for k, t in enumerate(sample)) / len(sample) <= 0.05
    hostile = make(busy_rate=0.5, fault_rate=0.5, demo_slip=0.5, invalid_penalty=0.5, train_size=24,
                   heldout_size=6, demo_size=6)
    report = fuzz(hostile, lambda task: 2 * (2 * task["plan"] + hostile.cfg.slack), random.Random(0),
                  mixture=1500, words=(*VERBS, *ROLES, *NAMES, *DAYS, "send", "book", "find"))
    assert report.roles == {"solver", "curator"}
    assert {"envs.testbeds.chain_families", "envs.testbeds.chain_family_tasks",
            "envs.testbeds.chain_apps"} <= set(warm_start_code(env))
