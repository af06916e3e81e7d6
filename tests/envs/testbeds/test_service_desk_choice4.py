"""service_desk's `choice` setting with four lookup tools (`env.lookups` = 4, #39): the words and tools,
the wrong tools' answers and the consumer's error, the demonstrator's rates, the draws; and `lookups` = 2
(the default) drawing, prompting and playing exactly what it did before the option existed."""

import hashlib
import json
import random
from collections import Counter

import pytest
import yaml

from envs.api.check import CONF, oracle_policy, random_policy
from envs.api.check import play as check_play
from envs.testbeds import service_desk_choice as choice
from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv
from envs.testbeds.service_desk_choice import SCHEMA, TOOLS, TOOLS4, ideal_choice, schema, tools_for
from tests.helpers import play_events

REMARKS = ["it was a gift", "the box was blue", "i live far away", "it came late"]
SCHEMA4 = ("tools: orders | archive | ledger | backlog | refund <card|cash|credit> | end; "
           "acknowledge with ok, sure, thanks or right")
RIGHT = {"week": "orders", "year": "archive", "month": "ledger", "night": "backlog"}


def task(word="month", delay=2, method="cash", order="K"):
    return {"setting": "choice", "word": word, "method": method, "order": order, "delay": delay,
            "remarks": REMARKS[:delay], "name": "ann", "item": "lamp"}


def env(**cfg):
    return ServiceDeskEnv(ServiceDeskConfig(**{"setting": "choice", "delays": [0, 2], "human_rate": 0.0,
                                               "train_size": 64, "heldout_size": 16, "lookups": 4, **cfg}))


def play(actions, t=None, **cfg):
    return play_events(env(**cfg), t or task(), actions)


def test_the_maps_and_the_schema_line():
    assert TOOLS == {"week": "orders", "year": "archive"} and TOOLS4 == RIGHT
    assert tools_for(2) is TOOLS and tools_for(4) is TOOLS4
    assert schema(2) == SCHEMA and schema() == SCHEMA and schema(4) == SCHEMA4


@pytest.mark.parametrize("word", sorted(RIGHT))
def test_an_ideal_episode_succeeds_for_each_of_the_four_words(word):
    t = task(word=word)
    assert ideal_choice(t) == [RIGHT[word], "ok", "ok", "refund cash", "end"]
    result, texts, events = play(ideal_choice(t, ["sure", "right"]), t)
    assert result.reward == 1.0 and result.success and result.info["actions"] == 5
    assert texts == [f"{SCHEMA4}\nuser: hello, i am ann, i ordered a lamp last {word}\n> ",
                     "tool: order K\nuser: it was a gift\n> ", "user: the box was blue\n> ",
                     "user: that is all, please refund cash\n> ", "tool: refunded order K\n> "]
    assert [(j, d) for j, kind, d in events if kind == "info"] == [
        (0, {"decision": "lookup", "right": True}), (3, {"decision": "refund", "right": True})]
    assert (0, "tool_result", {"tool": RIGHT[word], "id": "K"}) in events
    assert (3, "provenance", {"source": 0, "kind": "success_utilization"}) in events


WRONG = [(w, t) for w in sorted(RIGHT) for t in TOOLS4.values() if t != RIGHT[w]]  # 4 words x 3 wrong tools


@pytest.mark.parametrize("word,tool", WRONG)
def test_each_wrong_tool_finds_no_order_and_the_refund_errors_with_an_edge_from_the_lookup(word, tool):
    result, texts, events = play([tool, "ok", "ok", "refund cash", "end"], task(word=word))
    assert texts[1] == "tool: no order found\nuser: it was a gift\n> "
    assert texts[4] == "tool: error: no order id\n> "
    assert (3, "error", {"why": "tool: error: no order id"}) in events
    assert (3, "provenance", {"source": 0, "kind": "failed_utilization"}) in events
    assert [(j, d) for j, kind, d in events if kind == "info"] == [
        (0, {"decision": "lookup", "right": False}), (3, {"decision": "refund", "right": False})]
    assert not any(kind == "tool_result" for _, kind, _ in events)
    assert result.reward == 0.0 and not result.success and result.info["right_tool"] is False


def test_the_new_tools_are_bad_calls_with_two_lookups_and_a_four_way_task_is_refused():
    result, texts, events = play(["ledger"], task(word="year"), lookups=2)
    assert texts[0].startswith(SCHEMA + "\n") and texts[1].startswith("error: bad call")
    assert (0, "invalid_action", {"why": "error: bad call"}) in events
    with pytest.raises(ValueError, match="env.lookups"):
        env(lookups=2).new_episode(task(word="night"), random.Random(0))


def test_bad_calls_and_hostile_text_never_raise_with_four_lookups():
    for a in ["", "ledger now", "backlog backlog", "refund", "refund cash K", "é" * 300, "LEDGER", "month"]:
        result, texts, events = play(["ledger", a, "backlog"], task(word="night"))
        assert result.next is not None or result.reward == 0.0
    result, texts, events = play(["backlog", "ledger"], task(word="night"))  # one lookup per call
    assert texts[2].startswith("tool: error: one lookup per call") and result.next is not None


def test_the_demonstrator_is_right_at_its_rate_and_else_uniform_over_the_three_wrong_tools():
    e, n = env(demo_right_tool=0.4), 8000
    picks: Counter = Counter()
    for seed in range(n):
        word = sorted(RIGHT)[seed % 4]
        ep = e.new_episode(task(word=word), random.Random(seed))
        tool, wrong = ep.expert_action(), [t for t in TOOLS4.values() if t != RIGHT[word]]
        picks["right" if tool == RIGHT[word] else f"wrong{wrong.index(tool)}"] += 1
    assert abs(picks["right"] / n - 0.4) < 0.02
    assert all(abs(picks[f"wrong{i}"] / n - 0.2) < 0.02 for i in range(3)) and len(picks) == 4
    # played out: it wins exactly when its tool was right; the oracle setting always wins
    for p, lo, hi in ((0.4, 0.33, 0.47), (1.0, 1.0, 1.0)):
        e = env(demo_right_tool=p)
        wins = []
        for seed in range(400):
            ep = e.new_episode(task(word=sorted(RIGHT)[seed % 4]), random.Random(seed))
            obs = ep.start()
            while obs is not None:
                r = ep.step(ep.expert_action())
                obs = r.next
            assert r.reward == float(r.info["right_tool"])
            wins.append(r.reward)
        assert lo <= sum(wins) / 400 <= hi


def test_the_words_are_uniform_over_four_in_the_train_split():
    e = env(train_size=2000, heldout_size=128, orders=3)
    tasks = [json.loads(r["task"]) for r in e.task_set()["train"]]
    firsts = Counter(t["word"] for t in tasks)
    mores = Counter(o["word"] for t in tasks for o in t["more"])
    assert set(firsts) == set(mores) == set(RIGHT)
    assert all(abs(c / 2000 - 0.25) < 0.04 for c in firsts.values())
    assert all(abs(c / 4000 - 0.25) < 0.03 for c in mores.values())
    assert e.provenance()["lookups"] == 4 and "lookups" not in env(lookups=2).provenance()


def test_random_actions_draw_over_the_four_tools():
    verbs = Counter(choice.random_choice_action(random.Random(s), 4).split()[0] for s in range(7000))
    tools = [verbs[t] for t in RIGHT.values()]
    assert set(verbs) == {*RIGHT.values(), *("ok", "sure", "thanks", "right"), "refund", "end"}
    assert all(abs(c / 7000 - 1 / 7) < 0.02 for c in (*tools, verbs["refund"], verbs["end"]))


def test_oracle_and_random_on_the_config_file_with_four_lookups():
    settings = yaml.safe_load((CONF / "service_desk_choice.yaml").read_text())
    assert settings["lookups"] == 2
    settings.update(train_size=64, heldout_size=16, dev_size=16, lookups=4)
    e = ServiceDeskEnv(ServiceDeskConfig(**ServiceDeskEnv.settings_for_check(settings)))
    tasks = [json.loads(r["task"]) for r in e.task_set()["train"]]
    oracle = [check_play(e, t, oracle_policy, s) for s, t in enumerate(tasks)]
    randoms = [check_play(e, t, random_policy, s) for s, t in enumerate(tasks)]
    assert sum(oracle) / len(oracle) == 1.0 and sum(randoms) / len(randoms) <= 0.2


@pytest.mark.parametrize("lookups,setting", [(3, "choice"), (1, "choice"), (0, "choice"), (4, "classic")])
def test_the_config_refuses_other_counts_and_four_outside_the_choice_setting(lookups, setting):
    with pytest.raises(ValueError, match="env.lookups"):
        ServiceDeskEnv(ServiceDeskConfig(setting=setting, lookups=lookups, human_rate=0.0))
    with pytest.raises(ValueError, match="env.lookups"):
        tools_for(3)


def test_three_orders_with_four_lookups_played_ideally_succeed():
    t = task(word="month", delay=1)
    t["more"] = [{"word": "night", "method": "card", "order": "B", "item": "mug", "remarks": REMARKS[1:2]},
                 {"word": "week", "method": "credit", "order": "C", "item": "pen", "remarks": REMARKS[2:3]}]
    assert ideal_choice(t) == ["ledger", "ok", "refund cash", "backlog", "ok", "refund card", "orders", "ok",
                               "refund credit", "end"]
    result, texts, events = play(ideal_choice(t), t, orders=3, delays=[1])
    assert result.reward == 1.0 and result.info["right_tool"] == 1.0 and result.info["orders_refunded"] == 1.0
    assert texts == [f"{SCHEMA4}\nuser: hello, i am ann, i ordered a lamp last month\n> ",
                     "tool: order K\nuser: it was a gift\n> ", "user: please refund cash\n> ",
                     "tool: refunded order K\nuser: also, i ordered a mug last night\n> ",
                     "tool: order B\nuser: the box was blue\n> ", "user: please refund card\n> ",
                     "tool: refunded order B\nuser: also, i ordered a pen last week\n> ",
                     "tool: order C\nuser: i live far away\n> ",
                     "user: that is all, please refund credit\n> ",
                     "tool: refunded order C\n> "]
    # a wrong middle choice (archive for `night`): its refund errors, the customer moves on, reward 0
    acts = ideal_choice(t)
    acts[3] = "archive"
    result, texts, events = play(acts, t, orders=3, delays=[1])
    assert texts[6] == "tool: error: no order id\nuser: also, i ordered a pen last week\n> "
    assert (5, "provenance", {"source": 3, "kind": "failed_utilization"}) in events
    assert result.reward == 0.0 and result.info["orders_refunded"] == pytest.approx(2 / 3)


# ---- lookups = 2: what the code drew and played before `lookups` existed (hashes taken then) -------------
PINNED = {"tasks": "fb7e9f483a0ffe32cc54ae692bf846d74191c52ec445534fd2c4122ffa7d4d2f",
          "tasks_orders3": "8dfd04e0ff8cea96ebdbff7579e70c9d31d75ea2b517767860dd89c5eb9c1f28",
          "plays": "1033128afbc44d675d8b662116bfa683d718cf697c76e155f7c3ad81ca1be853",
          "plays_orders3": "f6a86d4467623cfed57ff10b6e3af2d0371c06aed3e1e8d44d1fea438d035ba4"}


def config_env(**over):
    """The config file's env (train 2000, heldout 128, dev 64), `over` laid over it."""
    settings = yaml.safe_load((CONF / "service_desk_choice.yaml").read_text())
    return ServiceDeskEnv(ServiceDeskConfig(**{**settings, **over}))


def task_hash(e):
    """Every split's rows (train, heldout, demo, dev), in order."""
    h, tasks = hashlib.sha256(), e.task_set()
    for split in sorted(tasks):
        for row in tasks[split]:
            h.update(f"{split}|{row['id']}|{row['tier']}|{row['task']}\n".encode())
    return h.hexdigest()


def play_hash(e):
    """The first 100 train tasks played by the demonstrator and by the random policy: every observation
    text, action, event, reward and info."""
    h = hashlib.sha256()
    for s, row in enumerate(e.task_set()["train"].select(range(100))):
        t = json.loads(row["task"])
        for policy in ("expert", "random"):
            ep, rng = e.new_episode(t, random.Random(s)), random.Random(s + 1)
            obs = ep.start()
            while obs is not None:
                a = ep.expert_action() if policy == "expert" else e.random_action(ep, obs, rng)
                r = ep.step(a)
                h.update(json.dumps([obs.text, a, [(x.kind, x.turn, x.data) for x in r.events], r.reward,
                                     r.info], sort_keys=True, default=str).encode())
                obs = r.next
    return h.hexdigest()


def test_two_lookups_draw_prompt_and_play_exactly_as_before():
    assert task_hash(config_env(demo_size=300)) == PINNED["tasks"]
    assert task_hash(config_env(demo_size=300, orders=3)) == PINNED["tasks_orders3"]
    assert play_hash(config_env()) == PINNED["plays"]
    assert play_hash(config_env(orders=3)) == PINNED["plays_orders3"]
    assert task_hash(config_env(demo_size=300, lookups=4)) != PINNED["tasks"]
