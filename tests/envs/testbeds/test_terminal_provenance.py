"""`terminal`'s provenance events (#46), hand-computed on small episodes (envs/testbeds/terminal/provenance.py
defines them): a command that works uses the task prompt (source -1) and the earlier turns whose output first
showed a name it writes; a failed action right after a failed one carries that error on."""

from __future__ import annotations

import json
import random

import pytest

from envs.api import sandbox
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv
from envs.testbeds.terminal.provenance import names
from experiments.compare_config import applicable
from replications.iapo.graph import provenance_annotator
from tests.helpers import play_to_end, played_episode, provenance_edges

IN, OK, FAIL = "input", "success_utilization", "failed_utilization"
BACKENDS = ["sim", pytest.param("sandbox", marks=pytest.mark.skipif(
    sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}"))]
CHAIN = {"instruction": "find k3 in a, then that key in b; write its value to out",
         "files": {"a": "k1 11\nk3 k7\n", "b": "k7 52\nk2 13\n", "memo": "40\n"},
         "verifier": {"kind": "exact", "expect": "52"}, "answer": "52", "defect": "clean", "kind": "chain",
         "tier": 2}
COUNT = {"instruction": "count the lines of b; write the count to out",
         "files": {"a": "k1 11\nk3 47\n", "b": "k7 52\nk2 13\n", "memo": "40\n"},
         "verifier": {"kind": "exact", "expect": "2"}, "answer": "2", "defect": "clean", "kind": "count",
         "tier": 1}


def env_of(backend: str = "sim") -> TerminalEnv:
    return TerminalEnv(TerminalConfig(train_size=8, heldout_size=4, dev_size=0, backend=backend, cache=False))


def play(task, actions, backend="sim"):
    """Each step's result, the episode played to its end with `actions`."""
    return play_to_end(env_of(backend), task, actions)


edges = provenance_edges


def test_names():
    assert names("grep k3 a") == ["grep", "k3", "a"] and names("echo 47 > out") == ["echo", "47", "out"]
    assert names("cat /task/b.txt|wc -l 2>&1 . ..") == ["cat", "task", "b.txt", "wc", "-l", "2", "1"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_composition_task_uses_the_prompt_and_each_lookup(backend):
    # 0 grep k3 a -> "k3 k7"; 1 grep k7 b -> "k7 52" (k7 shown by 0); 2 echo 52 > out (52 shown by 1)
    results = play(CHAIN, [" grep k3 a", " grep k7 b", " echo 52 > out", " submit"], backend)
    assert results[-1].reward == 1.0
    assert edges(results) == [(-1, 0, IN), (-1, 1, IN), (0, 1, OK), (-1, 2, IN), (1, 2, OK)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_errors_carry_on_only_into_the_failed_action_right_after(backend):
    results = play(COUNT, [
        " cat c",           # 0 fails (no file c): no event
        " cat zz",          # 1 fails right after a failure: 0 -> 1 failed
        " ls",              # 2 works after a failure: names only its own words; shows a b memo
        " cat memo",        # 3 memo first shown by 2; shows 40
        " echo 40 > out",   # 4 out is the prompt's, 40 first shown by 3
        " ",                # 5 invalid (empty), after a success: no event
        " wc -l b",         # 6 works after an invalid action: b is the prompt's, no failed edge
        " nosuchcommand",   # 7 fails after a success: no event; the turn cap (8) ends the episode
    ], backend)
    assert results[5].events[0].kind == "invalid_action"
    assert results[-1].info["failed_actions"] == 3 and results[-1].info["record"]["end"] == "turn cap"
    assert edges(results) == [(0, 1, FAIL), (2, 3, OK), (-1, 4, IN), (3, 4, OK), (-1, 6, IN)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_failed_commands_output_counts_its_error_framing_and_the_agents_own_words_do_not(backend):
    # 0 fails, but its output shows a's lines (47 among them) after `error: exit 1`: the 1 of `exit 1` is
    # the environment's framing, not output; 1 writes 99 first (its own), 2 shows it back; 3 writes 99 and
    # 1 (neither is shown output: only the prompt's out), 4 the 47 that 0 showed
    task = {**COUNT, "instruction": "find k3 in a; write its value to out", "answer": "47",
            "verifier": {"kind": "exact", "expect": "47"}, "kind": "lookup"}
    results = play(task, [" cat a zz", " echo 99 > x", " cat x", " echo 99 1 > out", " echo 47 > out",
                          " submit"], backend)
    assert results[0].next is not None and results[0].next.text.startswith("error: exit 1 k1 11 k3 47")
    assert results[2].next is not None and results[2].next.text == "99\n$"
    assert [e.kind for e in results[0].events] == ["tool_call", "error"]
    assert edges(results) == [(-1, 3, IN), (-1, 4, IN), (0, 4, OK)]  # x, 99: the agent's own words
    assert results[-1].reward == 1.0


def test_the_demonstrators_loops_and_shortcuts():
    """A repeated lookup shows nothing new (47 stays the first lookup's); the shortcut uses only the prompt's
    `out` (memo was never shown)."""
    results = play({**COUNT, "instruction": "find k3 in a; write its value to out", "kind": "lookup"},
                   [" grep k3 a", " grep k3 a", " echo 47 > out", " submit"])
    assert edges(results) == [(-1, 0, IN), (-1, 1, IN), (-1, 2, IN), (0, 2, OK)]
    assert edges(play(COUNT, [" cp memo out", " submit"])) == [(-1, 0, IN)]


def test_iapo_applies_and_reads_every_event():
    """terminal offers provenance events (its audit as before), so IAPO applies; the graph IAPO builds from
    a played episode has the events' edges, errors and user input (source -1)."""
    assert {"provenance_events", "env_pool_with_audit"} <= TerminalEnv.offers
    assert TerminalEnv.offers_for({}) == TerminalEnv.offers and applicable("iapo", "terminal")
    actions = [" cat c", " cat zz", " ls", " cat memo", " echo 40 > out", " ", " wc -l b", " nosuchcommand"]
    results = play(COUNT, actions)
    graph = provenance_annotator(played_episode("x", actions, results))
    assert sorted(graph.edges) == [(0, 1, FAIL), (2, 3, OK), (3, 4, OK)]
    assert graph.errors == {0, 1, 5, 7} and graph.user_input == {4, 6}


def test_every_event_points_back_and_pairs_are_unique():
    env = TerminalEnv(TerminalConfig(train_size=60, heldout_size=30, dev_size=12, backend="sim"))
    rng = random.Random(5)
    for split in ("train", "heldout"):
        for row in env.task_set()[split]:
            ep = env.new_episode(json.loads(row["task"]), rng)
            obs, j = ep.start(), 0
            while obs is not None:
                r = ep.step(env.random_action(ep, obs, rng) if rng.random() < 0.5 else ep.expert_action())
                pairs = [(e.data["source"], e.data["kind"]) for e in r.events if e.kind == "provenance"]
                assert all(-1 <= s < j and (s == -1) == (k == IN) for s, k in pairs)
                assert len({s for s, _ in pairs}) == len(pairs)
                obs, j = r.next, j + 1
