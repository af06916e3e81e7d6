"""IAPO's influence graph: the provenance annotator on played service_desk episodes, and the LLM
annotator's parsing of fixed answers."""

import random

from common.episode import Episode, Event, Turn
from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv
from replications.iapo.graph import annotation_prompt
from replications.iapo.method import (
    InfluenceGraph,
    LLMAnnotator,
    argument_annotator,
    parse_annotation,
    provenance_annotator,
)


def played(actions, intent="refund", delay=2):
    """A service_desk episode of scripted actions, recorded as the rollout records a model's."""
    t = {"intent": intent, "method": "cash", "order": "K", "trap": "Q", "delay": delay,
         "remarks": ["it was a gift", "the box was blue"][:delay], "probe": "refund"}
    state = ServiceDeskEnv(ServiceDeskConfig()).new_episode(t, random.Random(0))
    ep, obs = Episode("t", delay), state.start()
    for a in actions:
        ep.turns.append(Turn("agent", "policy", [1], [5] * (1 + len(a.split())), [0.0], a,
                             prompt_text=obs.text))
        result = state.step(a)
        for e in result.events:
            e.turn = len(ep.turns) - 1
            ep.events.append(e)
        if result.next is None:
            ep.reward = result.reward
            break
        obs = result.next
    return ep


def test_graph_of_the_ideal_dialogue():
    g = provenance_annotator(played(["ask", "lookup", "ok", "ok", "refund cash K", "end"]))
    assert g.n == 6
    assert g.edges == {(0, 4, "input"), (1, 4, "success_utilization"), (4, 5, "success_utilization")}
    assert g.user_input == {0, 1, 2, 3, 4} and g.errors == set()
    d_plus, d_minus, d_in, e = g.degrees()
    assert d_plus == [1, 1, 0, 0, 1, 0] and d_minus == [0] * 6 and e == [0] * 6
    assert d_in == [1, 1, 1, 1, 1 + 2, 1]


def test_graph_of_a_trap_and_a_redundant_lookup():
    g = provenance_annotator(played(["ask", "refund cash Q", "lookup", "lookup", "ok", "ok", "refund cash K",
                                     "end"]))
    assert g.errors == {1}
    assert (1, 2, "failed_utilization") in g.edges  # the fallback lookup after the trap
    assert (2, 6, "success_utilization") in g.edges  # the first lookup's id was used
    assert not any(s == 3 for s, _, _ in g.edges)  # the redundant lookup: nothing consumed it
    d_plus, d_minus, _, e = g.degrees()
    assert d_minus[1] == 1 and e[1] == 1 and d_plus[3] == 0


def test_scripted_turns_are_not_actions():
    ep = played(["ask", "lookup", "ok", "ok", "refund cash K", "end"])
    ep.turns[2].adapter = None  # a scripted actor: evidence, never credited
    g = provenance_annotator(ep)
    assert g.n == 5 and (0, 3, "input") in g.edges and (1, 3, "success_utilization") in g.edges


def test_parse_annotation_fixed_strings():
    text = "\n".join([
        "EDGE 0 -> 3 input", "EDGE A1 -> A3 success_utilization", "  EDGE 2->4 failed_utilization  ",
        "EDGE 3 -> 1 input",  # backward: dropped
        "EDGE 2 -> 2 input",  # self-loop: dropped
        "EDGE 0 -> 9 input",  # out of range: dropped
        "EDGE 0 -> 1 helped",  # unknown kind: dropped
        "ERROR 2", "ERROR A4", "ERROR 7", "USER 0", "USER 3", "I think action 1 was great.", "EDGE 0 -> ", "",
        "DONE", "EDGE 0 -> 1 input",  # after DONE: ignored
    ])
    g = parse_annotation(text, 5)
    assert g.edges == {(0, 3, "input"), (1, 3, "success_utilization"), (2, 4, "failed_utilization")}
    assert g.errors == {2, 4} and g.user_input == {0, 3}
    assert parse_annotation("", 3) == InfluenceGraph(3)
    assert parse_annotation("EDGE 99999999 -> 1 input\nERROR -1\n" + "x" * 10000, 2) == InfluenceGraph(2)


def test_llm_annotator_prompts_with_the_definitions_and_parses():
    ep = played(["ask", "lookup", "refund cash K", "end"], delay=0)
    prompts = []

    def frozen(prompt):
        prompts.append(prompt)
        return "EDGE 1 -> 2 success_utilization\nUSER 0\nDONE"

    g = LLMAnnotator(frozen)(ep)
    assert g.edges == {(1, 2, "success_utilization")} and g.user_input == {0}
    assert prompts == [annotation_prompt(ep)]
    for word in ("failed_utilization", "success_utilization", "input", "[A2] refund cash K", "tool: order K"):
        assert word in prompts[0]


def test_argument_annotator_needs_recognisable_arguments():
    # service_desk's ids are single capital letters, which text alone cannot tell from words: without
    # its provenance events the graph keeps only the error flag (the provenance annotator is the default)
    ep = played(["ask", "refund cash Q", "lookup", "ok", "ok", "refund cash K", "end"])
    ep.events = [e for e in ep.events if e.kind != "provenance"]
    g = argument_annotator(ep)
    assert g.edges == set() and g.errors == {1} and g.user_input == set()


def test_argument_annotator_with_a_simulated_user():
    ep = Episode("t", 1)
    turn = lambda role, text, prompt, adapter="policy", trainable=True: Turn(  # noqa: E731
        role, adapter, [1], [5], [0.0], text, prompt_text=prompt, trainable=trainable)
    ep.turns = [turn("agent", "hello", "tools: find_user(id)"),
                turn("user", "I am user_7", "hello", "user", False),
                turn("agent", "find_user user_7", "I am user_7"),
                turn("agent", "cancel R-22", "ok: order R-22"),
                turn("agent", "cancel R-22", "error: R-22 is shipped")]
    ep.events = [Event("error", 3, {}), Event("error", 4, {})]
    g = argument_annotator(ep)
    # actions: 0 (turn 0), 1 (turn 2), 2 (turn 3), 3 (turn 4); user_7 came from the user, not an action
    assert g.user_input == {1} and g.errors == {2, 3}
    assert g.edges == {(1, 2, "failed_utilization"), (1, 3, "failed_utilization")}
