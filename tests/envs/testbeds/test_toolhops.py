"""The dependent-hops / redundancy tool environment: rules, hidden contexts, malformed actions, and
the counterfactual replay (re-running the tools downstream of a masked worker), by hand."""

import json
import random

import pytest

from envs.registry import ENVS
from envs.testbeds.toolhops import (
    ATTRIBUTES,
    CLASSES,
    PLACEHOLDER,
    TOOL_TABLE,
    TOOLS,
    ToolHopsConfig,
    ToolHopsEnv,
    decoy,
    distractor_tool,
    fact,
    replay,
    right_tool,
)

WORLD = 12345
CHAIN = {"world": WORLD, "start": "k", "attrs": ["boss", "twin"]}
PARALLEL = {"world": WORLD, "attrs": ["boss", "twin"], "entities": ["k", "m"]}


def env(**kw):
    return ToolHopsEnv(ToolHopsConfig(train_size=8, heldout_size=4, dev_size=4, **kw))


def play(task, actions, **kw):
    ep = env(**kw).new_episode(task, random.Random(0))
    obs, seen, result = ep.start(), [], None
    for action in actions:
        assert obs is not None
        seen.append(obs.text)
        result = ep.step(action)
        obs = result.next
    assert obs is None
    return seen, result


def test_registered_and_settings_checked():
    assert ENVS["toolhops"] is ToolHopsEnv
    for bad, match in (({"k": 6}, "env.k"), ({"mode": "tree"}, "env.mode"),
                       ({"extra_workers": 1}, "needs env.mode=parallel"),
                       ({"mode": "parallel", "k": 2, "extra_workers": 3}, "extra_workers"),
                       ({"classes": 9}, "env.classes"),
                       ({"demo_distractor": 0.8, "demo_wrong": 0.3}, "sum <= 1")):
        with pytest.raises(ValueError, match=match):
            env(**bad)


def test_hidden_table_has_8_x_classes_contexts():
    assert len(TOOL_TABLE) == len(ATTRIBUTES) * len(CLASSES) == 64
    assert all(r != d and r in TOOLS and d in TOOLS for r, d in TOOL_TABLE.values())
    # at 4 classes the right tool of one attribute depends on the entity's class: 32 contexts in play
    contexts = {(a, right_tool(a, e, 4)) for a in ATTRIBUTES for e in "abcdefghijklmnopqrstuvwxyz"}
    assert len(contexts) > len(ATTRIBUTES)
    assert decoy("boss", "k", WORLD) != fact("boss", "k", WORLD)


def test_chain_right_tools_solve_and_the_next_query_is_the_last_result():
    e1 = fact("boss", "k", WORLD)
    e2 = fact("twin", e1, WORLD)
    seen, r = play(CHAIN, [" boss twin", " " + right_tool("boss", "k", 4), " " + right_tool("twin", e1, 4),
                           f" {e1} {e2}"])
    assert seen[0] == "Q: k > boss > twin\nPLAN:"
    assert seen[1].startswith("SUB: boss ") and seen[1].endswith(" k\nTOOL:")
    assert seen[2].endswith(f" {e1}\nTOOL:")  # worker 2's query is built from worker 1's result
    assert seen[3] == f"R: {e1} {e2}\nANS:"
    assert r.reward == 1.0 and r.info["record"]["tool_kinds"] == ["value", "value"]


def test_an_upstream_distractor_makes_a_right_downstream_call_wrong():
    wrong = decoy("boss", "k", WORLD)
    downstream = fact("twin", wrong, WORLD)
    _, r = play(CHAIN, [" boss twin", " " + distractor_tool("boss", "k", 4),
                        " " + right_tool("twin", wrong, 4), f" {wrong} {downstream}"])
    rec = r.info["record"]
    assert rec["tool_kinds"] == ["distractor", "value"] and r.reward == 0.0
    assert rec["results"] == [wrong, downstream] and downstream != rec["truth"][1]
    assert r.info["distractor_first"] == 1.0


def test_after_an_error_the_downstream_worker_is_blocked():
    other = next(t for t in TOOLS if t not in (right_tool("boss", "k", 4), distractor_tool("boss", "k", 4)))
    seen, r = play(CHAIN, [" boss twin", " " + other, " census", " ERR ERR"])
    assert seen[2] == "SUB: twin none ERR\nTOOL:" and r.info["record"]["tool_kinds"] == ["error", "blocked"]


def test_chain_replay_reruns_the_tools_downstream_of_a_masked_worker():
    e1 = fact("boss", "k", WORLD)
    e2 = fact("twin", e1, WORLD)
    _, r = play(CHAIN, [" boss twin", " " + right_tool("boss", "k", 4), " " + right_tool("twin", e1, 4),
                        f" {e1} {e2}"])
    rec = r.info["record"]
    assert replay(rec, frozenset()).value == 1.0
    masked_first = replay(rec, frozenset({0}))
    # worker 2's tool re-run on the placeholder query
    assert masked_first.results == [PLACEHOLDER, PLACEHOLDER]
    assert masked_first.value == 0.0
    masked_second = replay(rec, frozenset({1}))
    assert masked_second.results == [e1, PLACEHOLDER] and masked_second.answer == [e1, PLACEHOLDER]
    assert masked_second.value == pytest.approx(0.25)  # 1/2 * 1/2 right slots, no exact match


def test_parallel_redundant_workers_replay_by_hand():
    """K=2 facts, 3 workers: 0 and 2 both on fact 0, right; 1 on fact 1, right."""
    v0, v1 = fact("boss", "k", WORLD), fact("twin", "m", WORLD)
    seen, r = play(PARALLEL, [" boss twin boss", " " + right_tool("boss", "k", 4),
                              " " + right_tool("twin", "m", 4), " " + right_tool("boss", "k", 4),
                              f" {v0} {v1}"], mode="parallel", extra_workers=1)
    assert seen[-1] == f"R: boss {v0} ; twin {v1} ; boss {v0}\nANS:"
    rec = r.info["record"]
    assert rec["slots"] == [0, 1, 0] and rec["worker_truth"] == [v0, v1, v0] and r.reward == 1.0
    values = {s: replay(rec, frozenset({0, 1, 2}) - set(s)).value for s in
              [(), (0,), (1,), (2,), (0, 1), (0, 2), (1, 2), (0, 1, 2)]}
    # slot 0 is right iff worker 0 or 2 is present, slot 1 iff worker 1 is: v = 1/4 s0 + 1/4 s1 + 1/2 s0 s1
    assert values == pytest.approx({(): 0.0, (0,): 0.25, (1,): 0.25, (2,): 0.25, (0, 1): 1.0, (0, 2): 0.25,
                                    (1, 2): 1.0, (0, 1, 2): 1.0})


def test_parallel_replay_falls_back_to_the_other_worker_of_a_fact():
    """Worker 0 calls the distractor (its value was answered), worker 2 the right tool: masking 0 lets
    the replayed planner answer fact 0 with worker 2's value."""
    v0, v1, bad = fact("boss", "k", WORLD), fact("twin", "m", WORLD), decoy("boss", "k", WORLD)
    _, r = play(PARALLEL, [" boss twin boss", " " + distractor_tool("boss", "k", 4),
                           " " + right_tool("twin", "m", 4), " " + right_tool("boss", "k", 4),
                           f" {bad} {v1}"], mode="parallel", extra_workers=1)
    rec = r.info["record"]
    assert r.reward == 0.0 and replay(rec, frozenset()).value == pytest.approx(0.25)
    assert replay(rec, frozenset({0})).answer == [v0, v1] and replay(rec, frozenset({0})).value == 1.0


def test_malformed_actions_are_invalid_not_exceptions():
    _, r = play(CHAIN, [" boss"])
    assert r.reward == 0.0 and r.events[0].kind == "invalid_action" and not r.info["plan_ok"]
    _, r = play(PARALLEL, [" boss boss boss"], mode="parallel", extra_workers=1)  # fact twin uncovered
    assert r.events[0].kind == "invalid_action"
    _, r = play(CHAIN, [" boss twin", " hammer", " \x00", " a"])
    rec = r.info["record"]
    assert rec["tool_kinds"] == ["invalid", "invalid"] and rec["answer"] == [PLACEHOLDER, PLACEHOLDER]
    assert any(e.kind == "invalid_action" for e in r.events)


@pytest.mark.parametrize("settings", [{"k": 4},
                                      {"mode": "parallel", "k": 2, "extra_workers": 2, "classes": 8}])
def test_demonstrator_error_rates_and_oracle(settings):
    e = env(**settings)
    ok = 0
    kinds: list[str] = []
    for seed in range(300):
        task = e.generate_task(random.Random(seed), e.cfg.k)
        ep = e.new_episode(task, random.Random(seed))
        obs = ep.start()
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        ok += r.success
        kinds += [k for k in r.info["record"]["tool_kinds"] if k != "blocked"]
        json.dumps(r.info)
    assert kinds.count("distractor") / len(kinds) == pytest.approx(0.3, abs=0.05)
    assert kinds.count("error") / len(kinds) == pytest.approx(0.1, abs=0.04)
    assert 0.02 < ok / 300 < 0.6
    oracle = env(**settings, demo_distractor=0.0, demo_wrong=0.0)
    task = oracle.generate_task(random.Random(0), oracle.cfg.k)
    ep = oracle.new_episode(task, random.Random(0))
    obs = ep.start()
    while obs is not None:
        r = ep.step(ep.expert_action())
        obs = r.next
    assert r.reward == 1.0
