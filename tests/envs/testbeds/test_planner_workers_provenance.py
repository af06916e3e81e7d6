"""toolplan's and toolhops' provenance events (#46): which earlier turn each planner or worker turn used,
for IAPO's influence graph. Turns: the plan is 0, worker m's call m + 1, the answer N + 1."""

import json
import random

import pytest

from common.episode import Episode, Turn
from envs.testbeds.toolhops import TOOLS as HOP_TOOLS
from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv, decoy, distractor_tool, fact, right_tool
from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv
from replications.iapo.graph import provenance_annotator
from tests.helpers import play_to_end, provenance_edges

PLAN_TASK = {"queries": [["pop", "k"], ["area", "m"], ["year", "b"]], "values": ["Q", "F", "Z"],
             "decoys": ["R", "G", "A"]}
WORLD = 12345
CHAIN = {"world": WORLD, "start": "k", "attrs": ["boss", "twin"]}
PARALLEL = {"world": WORLD, "attrs": ["boss", "twin"], "entities": ["k", "m"]}
IN, OK, FAIL = "input", "success_utilization", "failed_utilization"


play = play_to_end
edges = provenance_edges


def toolplan(actions, task=PLAN_TASK):
    return play(ToolPlanEnv(ToolPlanConfig(k=3, train_size=8, heldout_size=4)), task, actions)


def toolhops(task, actions, **kw):
    return play(ToolHopsEnv(ToolHopsConfig(train_size=8, heldout_size=4, dev_size=4, **kw)), task, actions)


def wrong_tool(attr, entity):
    """A tool that errs on (attr, entity): neither its right tool nor its distractor."""
    good = (right_tool(attr, entity, 4), distractor_tool(attr, entity, 4))
    return next(t for t in HOP_TOOLS if t not in good)


def test_offered_by_both():
    assert "provenance_events" in ToolPlanEnv.offers and "provenance_events" in ToolHopsEnv.offers


def test_toolplan_workers_use_the_plan_and_the_answer_uses_the_results_it_combines():
    # census: the value Q; almanac: area's distractor (G, looks valid); census on year: ERR
    results = toolplan([" pop area year", " census", " almanac", " census", " Q G X"])
    assert results[-1].info["record"]["results"] == ["Q", "G", "ERR"]
    assert edges(results) == [(0, 1, IN), (0, 2, IN), (0, 3, IN),
                              (1, 4, OK), (2, 4, OK), (3, 4, FAIL)]  # the ERR slot: fell back on it
    # a slot the planner did not take from its worker: no edge from that worker
    results = toolplan([" pop area year", " census", " almanac", " census", " Q F ERR"])
    assert edges(results)[3:] == [(1, 4, OK), (3, 4, FAIL)]


def test_toolplan_a_planned_subquery_that_is_not_the_questions_carries_the_plans_mistake():
    results = toolplan([" year area year", " archive", " atlas", " archive", " ERR F Z"])
    assert edges(results) == [(0, 1, FAIL), (0, 2, IN), (0, 3, IN),
                              (1, 4, FAIL), (2, 4, OK), (3, 4, OK)]


def test_malformed_plan_or_answer_uses_nothing():
    assert edges(toolplan([" pop area"])) == []
    results = toolplan([" pop area year", " census", " atlas", " archive", " Q F"])
    assert edges(results) == [(0, 1, IN), (0, 2, IN), (0, 3, IN)]
    assert [e.kind for e in results[-1].events] == ["invalid_action"]


def test_toolhops_chain_a_hop_uses_the_hop_before_it():
    e1 = fact("boss", "k", WORLD)
    e2 = fact("twin", e1, WORLD)
    right = [" " + right_tool("boss", "k", 4), " " + right_tool("twin", e1, 4)]
    results = toolhops(CHAIN, [" boss twin", *right, f" {e1} {e2}"])
    assert results[-1].reward == 1.0
    assert edges(results) == [(0, 1, IN), (0, 2, IN), (1, 2, OK), (1, 3, OK), (2, 3, OK)]
    # worker 0 errs: worker 1 is blocked (it used an invalid output), the answer falls back on both
    wrong0 = wrong_tool("boss", "k")
    results = toolhops(CHAIN, [" boss twin", " " + wrong0, right[1], " a b"])
    assert results[-1].info["record"]["tool_kinds"] == ["error", "blocked"]
    assert edges(results) == [(0, 1, IN), (0, 2, IN), (1, 2, FAIL), (1, 3, FAIL), (2, 3, FAIL)]
    # worker 1's own tool fails on a good query: no edge from worker 0 to it
    wrong1 = wrong_tool("twin", e1)
    results = toolhops(CHAIN, [" boss twin", right[0], " " + wrong1, f" {e1} a"])
    assert edges(results) == [(0, 1, IN), (0, 2, IN), (1, 3, OK), (2, 3, FAIL)]


def test_toolhops_parallel_the_answer_uses_each_worker_whose_result_fills_its_slot():
    v1, bad = fact("twin", "m", WORLD), decoy("boss", "k", WORLD)
    results = toolhops(PARALLEL, [" boss twin boss", " " + distractor_tool("boss", "k", 4),
                                  " " + right_tool("twin", "m", 4), " " + right_tool("boss", "k", 4),
                                  f" {bad} {v1}"], mode="parallel", extra_workers=1)
    # worker 2's right value for boss k was not the one the planner wrote in that slot: no edge
    assert edges(results) == [(0, 1, IN), (0, 2, IN), (0, 3, IN), (1, 4, OK), (2, 4, OK)]


def rollout_episode(results, actions) -> Episode:
    """The episode as the rollout records it: one trainable turn per action, events re-stamped."""
    ep = Episode("t", 0, [Turn("x", "a", [], [1], [0.0], a) for a in actions])
    for j, r in enumerate(results):
        for e in r.events:
            e.turn = j
            ep.events.append(e)
    return ep


@pytest.mark.parametrize("make", [
    lambda: ToolPlanEnv(ToolPlanConfig(k=4, train_size=40, heldout_size=4)),
    lambda: ToolHopsEnv(ToolHopsConfig(k=5, train_size=40, heldout_size=4)),
    lambda: ToolHopsEnv(ToolHopsConfig(k=3, mode="parallel", extra_workers=2, train_size=40, heldout_size=4)),
])
def test_every_worker_uses_the_plan_and_iapo_reads_every_event(make):
    env = make()
    for k, row in enumerate(env.task_set()["train"]):
        for policy in ("expert", "random"):
            ep, rng = env.new_episode(json.loads(row["task"]), random.Random(k)), random.Random(k)
            obs, results, actions = ep.start(), [], []
            while obs is not None:
                actions.append(ep.expert_action() if policy == "expert" else env.random_action(ep, obs, rng))
                results.append(ep.step(actions[-1]))
                obs = results[-1].next
            found = edges(results)
            assert all(0 <= s < t for s, t, _ in found)
            if results[0].next is not None:  # a well-formed plan: each worker names it once
                workers = range(1, len(results) - 1)
                assert [t for s, t, _ in found if s == 0] == list(workers)
            graph = provenance_annotator(rollout_episode(results, actions))
            assert len(graph.edges) == len(found)  # the shape IAPO reads, none dropped
