"""service_desk's `choice` setting (#39): the upstream lookup choice, the consumer's error, the entropic
acknowledgements, the budget, provenance and decision events, the demonstrator, the oracle/random check."""

import json
import random

import pytest
import yaml

from envs.api.check import CONF, oracle_policy, random_policy
from envs.api.check import play as check_play
from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv
from envs.testbeds.service_desk_choice import ACKS, SCHEMA, ideal_choice
from tests.helpers import play_events

REMARKS = ["it was a gift", "the box was blue", "i live far away", "it came late", "i ordered two",
           "the size was wrong", "my dog chewed it", "my sister has one"]


def task(word="year", delay=2, method="cash", order="K"):
    return {"setting": "choice", "word": word, "method": method, "order": order, "delay": delay,
            "remarks": REMARKS[:delay],
            "name": "ann", "item": "lamp"}


def env(**cfg):
    return ServiceDeskEnv(ServiceDeskConfig(**{"setting": "choice", "delays": [0, 2, 8], "human_rate": 0.0,
                                               "train_size": 64, "heldout_size": 16, **cfg}))


def play(actions, t=None, **cfg):
    return play_events(env(**cfg), t or task(), actions)


def test_ideal_dialogue_in_full():
    result, texts, events = play(["archive", "sure", "ok", "refund cash", "end"])
    assert result.reward == 1.0 and result.success and result.info["actions"] == 5
    assert texts == [f"{SCHEMA}\nuser: hello, i am ann, i ordered a lamp last year\n> ",
                     "tool: order K\nuser: it was a gift\n> ", "user: the box was blue\n> ",
                     "user: that is all, please refund cash\n> ", "tool: refunded order K\n> "]
    # provenance: user input on every action acting on a customer line; the refund uses the lookup's id;
    # the end uses the refund; the decisions are marked for the oracle arm
    user = {"source": -1, "kind": "input"}
    assert [e for e in events if e[1] == "provenance"] == [
        (0, "provenance", user), (1, "provenance", user), (2, "provenance", user), (3, "provenance", user),
        (3, "provenance", {"source": 0, "kind": "success_utilization"}),
        (4, "provenance", {"source": 3, "kind": "success_utilization"})]
    assert [(j, d) for j, kind, d in events if kind == "info"] == [
        (0, {"decision": "lookup", "right": True}), (3, {"decision": "refund", "right": True})]
    assert (0, "tool_result", {"tool": "archive", "id": "K"}) in events


@pytest.mark.parametrize("word,tool", [("week", "orders"), ("year", "archive")])
@pytest.mark.parametrize("delay", [0, 2, 8])
def test_every_ack_word_and_delay_with_the_right_tool_succeeds(word, tool, delay):
    t = task(word=word, delay=delay)
    acks = [ACKS[i % len(ACKS)] for i in range(delay)]
    assert ideal_choice(t, acks)[0] == tool
    result, _, _ = play(ideal_choice(t, acks), t)
    assert result.reward == 1.0 and result.info["actions"] == delay + 3


def test_wrong_tool_fails_and_the_consumer_errors_with_an_edge_from_the_lookup():
    result, texts, events = play(["orders", "ok", "ok", "refund cash", "end"])
    assert texts[1] == "tool: no order found\nuser: it was a gift\n> "  # no error at the lookup itself
    assert not any(e[0] == 0 and e[1] in ("error", "invalid_action") for e in events)
    assert texts[4] == "tool: error: no order id\n> "
    assert (3, "error", {"why": "tool: error: no order id"}) in events
    assert (3, "provenance", {"source": 0, "kind": "failed_utilization"}) in events
    assert result.reward == 0.0 and result.info["right_tool"] is False
    # the choice binds: a second lookup errors (and a refund right after it falls back on that error)
    result, texts, events = play(["orders", "archive", "ok", "ok", "refund cash", "end"], slack=2)
    assert texts[2].startswith("tool: error: one lookup per call") and result.reward == 0.0
    assert result.info["redundant_lookup"] is True


def test_wrong_method_errors_and_a_retry_within_the_slack_succeeds():
    result, texts, events = play(["archive", "ok", "ok", "refund card", "refund cash", "end"], slack=1)
    assert texts[4] == "tool: error: wrong method\n> "
    assert (3, "error", {"why": "tool: error: wrong method"}) in events
    assert (4, "provenance", {"source": 3, "kind": "failed_utilization"}) in events  # the retry
    assert result.reward == 1.0
    result, _, _ = play(["archive", "ok", "ok", "refund card", "refund cash", "end"], slack=0)
    assert result.reward == 0.0 and result.info["out_of_turns"] is True


def test_refund_before_the_request_errors_and_the_remark_is_repeated():
    result, texts, events = play(["archive", "refund cash", "ok", "ok", "refund cash", "end"], slack=1)
    assert texts[2] == "tool: error: the customer is still talking\nuser: it was a gift\n> "
    assert result.reward == 1.0
    # ending without a refund, or an acknowledgement nobody asked for, fails
    assert play(["archive", "ok", "ok", "end"])[0].reward == 0.0
    result, texts, _ = play(["archive", "ok", "ok", "ok", "refund cash", "end"], slack=1)
    assert texts[4] == "user: yes?\n> " and result.reward == 1.0


def test_bad_calls_and_hostile_text_never_raise():
    for a in ["", "refund", "refund cash K", "lookup", "orders now", "é" * 300, "refund  cash ", "OK"]:
        result, _, events = play([a])
        assert result.next is not None or result.reward == 0.0
    result, texts, events = play(["lookup"])
    assert texts[1].startswith("error: bad call")
    assert (0, "invalid_action", {"why": "error: bad call"}) in events


def test_demonstrator_is_a_coin_on_the_tool_and_right_otherwise():
    e = env(demo_right_tool=0.5)
    rights, wins = [], []
    for seed in range(400):
        t = task(word="week" if seed % 2 else "year")
        ep = e.new_episode(t, random.Random(seed))
        obs, acts = ep.start(), []
        while obs is not None:
            a = ep.expert_action()
            acts.append(a)
            r = ep.step(a)
            obs = r.next
        rights.append(r.info["right_tool"])
        wins.append(r.reward)
        assert set(acts[1:-2]) <= set(ACKS) and acts[-1] == "end"
    assert 0.42 < sum(rights) / 400 < 0.58 and wins == [float(x) for x in rights]
    assert e.variants() == ("main",)


def test_oracle_and_random_on_the_config_file():
    settings = yaml.safe_load((CONF / "service_desk_choice.yaml").read_text())
    settings.update(train_size=64, heldout_size=16, dev_size=16)
    cfg = ServiceDeskConfig(**ServiceDeskEnv.settings_for_check(settings))
    e = ServiceDeskEnv(cfg)
    tasks = [json.loads(r["task"]) for r in e.task_set()["train"]]
    oracle = [check_play(e, t, oracle_policy, s) for s, t in enumerate(tasks)]
    randoms = [check_play(e, t, random_policy, s) for s, t in enumerate(tasks)]
    assert sum(oracle) / len(oracle) == 1.0 and sum(randoms) / len(randoms) <= 0.2
    assert {t["delay"] for t in tasks} == {0, 8}


def test_splits_have_enough_distinct_tasks_at_d0_and_the_classic_setting_is_unchanged():
    e = ServiceDeskEnv(ServiceDeskConfig(setting="choice", delays=[0], human_rate=0.0, train_size=1000,
                                         heldout_size=64, demo_size=2000, dev_size=64))
    assert len(e.task_set()["demo"]) == 2000
    classic = ServiceDeskEnv(ServiceDeskConfig())
    assert "setting" not in classic.provenance() and classic.variants() == ("main", "probe")
    with pytest.raises(ValueError, match="setting"):
        ServiceDeskEnv(ServiceDeskConfig(setting="other"))


def orders3(delay=1):
    t = task(word="year", delay=delay)
    t["more"] = [
        {"word": "week", "method": "card", "order": "B", "item": "mug", "remarks": REMARKS[2:2 + delay]},
        {"word": "year", "method": "credit", "order": "C", "item": "pen", "remarks": REMARKS[4:4 + delay]}]
    return t


def test_several_orders_one_after_the_other_in_full():
    t = orders3()
    assert ideal_choice(t, ["sure"]) == ["archive", "sure", "refund cash", "orders", "sure", "refund card",
                                         "archive", "sure", "refund credit", "end"]
    result, texts, events = play(ideal_choice(t), t, orders=3, delays=[1])
    assert result.reward == 1.0 and result.info["actions"] == 10
    assert result.info["right_tool"] == 1.0 and result.info["orders_refunded"] == 1.0
    assert texts == [f"{SCHEMA}\nuser: hello, i am ann, i ordered a lamp last year\n> ",
                     "tool: order K\nuser: it was a gift\n> ", "user: please refund cash\n> ",
                     "tool: refunded order K\nuser: also, i ordered a mug last week\n> ",
                     "tool: order B\nuser: i live far away\n> ", "user: please refund card\n> ",
                     "tool: refunded order B\nuser: also, i ordered a pen last year\n> ",
                     "tool: order C\nuser: i ordered two\n> ", "user: that is all, please refund credit\n> ",
                     "tool: refunded order C\n> "]
    # the end uses every refund; each refund its order's lookup
    used = [(j, d["source"]) for j, kind, d in events
            if kind == "provenance" and d["kind"] == "success_utilization"]
    assert used == [(2, 0), (5, 3), (8, 6), (9, 2), (9, 5), (9, 8)]
    # the budget: 3 x (D + 2) + 1 + slack = 11 actions
    assert play(["archive", "ok", "ok"] + ["yes"] * 20, t, orders=3, delays=[1])[0].info["actions"] == 11


def test_a_wrong_choice_fails_the_episode_and_the_customer_moves_on():
    t = orders3()
    result, texts, events = play(["archive", "ok", "refund cash", "archive", "ok", "refund card", "archive",
                                  "ok", "refund credit", "end"], t, orders=3, delays=[1])
    assert texts[6] == "tool: error: no order id\nuser: also, i ordered a pen last year\n> "
    assert (5, "error", {"why": "tool: error: no order id"}) in events
    assert (5, "provenance", {"source": 3, "kind": "failed_utilization"}) in events
    assert [(j, d) for j, kind, d in events if kind == "info"][2:4] == [
        (3, {"decision": "lookup", "right": False}), (5, {"decision": "refund", "right": False})]
    assert result.reward == 0.0 and result.info["orders_refunded"] == pytest.approx(2 / 3)


def test_one_order_tasks_draw_what_they_always_drew_and_the_demonstrator_plays_every_order():
    from envs.testbeds.service_desk import REMARKS as POOL
    from envs.testbeds.service_desk_choice import generate_choice_task

    one, three = (generate_choice_task(random.Random(7), 2, POOL, k) for k in (1, 3))
    assert {k: v for k, v in three.items() if k != "more"} == one and len(three["more"]) == 2
    assert one == {"setting": "choice", **{k: one[k] for k in ("word", "method", "order", "delay", "remarks",
                                                               "name", "item")}} and "more" not in one
    e = env(orders=3, delays=[2], demo_right_tool=0.6)
    wins, rights = [], []
    for seed in range(200):
        ep = e.new_episode(generate_choice_task(random.Random(seed), 2, POOL, 3), random.Random(seed))
        obs = ep.start()
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        wins.append(r.reward)
        rights.append(r.info["right_tool"])
    assert wins == [float(x == 1.0) for x in rights] and 0.1 < sum(wins) / 200 < 0.35  # 0.6^3 = 0.216
    with pytest.raises(ValueError, match="env.orders"):
        ServiceDeskEnv(ServiceDeskConfig(orders=2))
