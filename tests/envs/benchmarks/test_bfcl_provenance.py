"""`bfcl`'s provenance events (#46), hand-computed on small episodes (envs/benchmarks/bfcl/provenance.py
defines them): a call step that works uses the user's input (source -1) and the earlier turns whose tool
results first showed an argument value it writes; a failed action right after a failed one carries that
error on; a value the agent wrote first is its own."""

from __future__ import annotations

import doctest
import random

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make setup installs it --no-deps)")

from envs.api import provenance as shared  # noqa: E402
from envs.benchmarks.bfcl.apps import scenarios  # noqa: E402
from envs.benchmarks.bfcl.env import CATEGORIES, BfclConfig, BfclEnv  # noqa: E402
from envs.benchmarks.bfcl.provenance import tokens, values  # noqa: E402
from experiments.compare_config import applicable  # noqa: E402
from replications.iapo.graph import provenance_annotator  # noqa: E402
from tests.envs.benchmarks.test_bfcl_pins import ODD  # noqa: E402
from tests.helpers import played_episode  # noqa: E402

IN, OK, FAIL = "input", "success_utilization", "failed_utilization"
FILES, LOGS, MATH = 0, 1, 15  # base scenarios: final_report.pdf in document/; log.txt in workspace/; MathAPI


def play(index: int, actions: list[str]) -> tuple[list[tuple[int, int, str]], list]:
    """The (source, turn, kind) of every provenance event of base scenario `index` played with `actions`
    (the episode may go on), and each step's result."""
    ep = BfclEnv(BfclConfig()).new_episode(scenarios("base")[index], random.Random(0))
    ep.start()
    found, results = [], []
    for j, action in enumerate(actions):
        results.append(ep.step(action))
        for e in results[-1].events:
            if e.kind == "provenance":
                assert e.turn == j
                found.append((e.data["source"], j, e.data["kind"]))
    return found, results


def test_tokens_values_and_the_docstrings_examples():
    assert tokens("Move 'final_report.pdf' to temp. x/y-2 [1.5, -3]") == [
        "Move", "final_report.pdf", "to", "temp", "x", "y-2", "1.5", "-3"]
    assert values([{"priority": 2, "tags": ["#a b", ""]}, False, 1e400, "Alice"]) == [2, "#a b", "Alice"]
    # the helpers (and their doctests) live in envs/api/provenance.py, shared with tau2's events
    result = doctest.testmod(shared)
    assert result.attempted > 0 and result.failed == 0


def test_the_worked_example_of_the_docstring():
    found, results = play(FILES, [
        "[cd(folder='document')]",          # 0 document: the user's
        "[ls()]",                           # 1 no values; shows previous_report.pdf
        "[cat(file_name='previous_report.pdf')]",  # 2 first shown by 1 (the user names it only later)
        "[mkdir(dir_name='temp'), mv(source='final_report.pdf', destination='temp')]",  # 3 the user's
        "[cd(folder='nowhere')]",           # 4 {"error": ...}: failed, after a success: none
        "[cd(folder='Year203')]",           # 5 fails too: from 4, not from 2 (whose output showed Year203)
        "[]",                               # 6 ends the turn: none
    ])
    assert "Year203" in results[2].next.text and '"error"' in results[5].next.text
    assert found == [(-1, 0, IN), (1, 2, OK), (-1, 3, IN), (4, 5, FAIL)]


def test_errors_carry_on_only_into_the_failed_action_right_after():
    found, results = play(FILES, [
        "[nosuch(x=1)]",                                    # 0 refused: failed, none
        "[cd('document')]",                                 # 1 raises (positional argument dropped)
        "[cd(folder='document'), cd(folder='nowhere')]",    # 2 one call of two fails: the step failed
        "[cd(folder='x'",                                   # 3 invalid (ends the user's turn)
        "[cd(folder=__import__('os').getcwd())]",           # 4 refused, after the invalid one
        "[pwd()]",                                          # 5 works: no values, no event
        "[cd(folder='nowhere')]",                           # 6 fails after a success: none
        "All done.",                                        # 7 a text reply: not failed, none
        "[cd(folder='nowhere')]",                           # 8 fails after the reply: none
        "[]",                                               # 9 none
    ])
    assert [e.kind for e in results[3].events] == ["invalid_action"] + ["provenance"]
    assert "Error during execution" in results[1].next.text
    assert found == [(0, 1, FAIL), (1, 2, FAIL), (2, 3, FAIL), (3, 4, FAIL)]


def test_the_agents_own_values_have_no_source_and_numbers_match_as_numbers():
    found, _ = play(MATH, [
        "[add(a=123456, b=654321)]",          # 0 the agent's own numbers -> {"result": 777777}
        "[multiply(a=777777.0, b=2)]",        # 1 777777.0 is 0's 777777 -> {"result": 1555554.0}
        "[touch(file_name='my notes.txt'), echo(content='alpha beta', file_name='my notes.txt')]",  # 2 own
        "[ls()]",                             # 3 shows my notes.txt (the agent wrote it first)
        "[cat(file_name='my notes.txt')]",    # 4 none: the agent's own; shows alpha beta
        "[mean(numbers=[777777, 1555554])]",  # 5 nested numbers of 0 and 1 -> {"result": 1166665.5}
        "[subtract(a=123456, b=1166665.5)]",  # 6 123456 the agent's (echoed in 0's `name`, not shown)
    ])
    assert found == [(0, 1, OK), (0, 5, OK), (1, 5, OK), (5, 6, OK)]


def test_a_later_user_turn_is_input_and_strings_with_spaces_match_as_substrings():
    found, results = play(LOGS, [
        "[ls(a=True)]",                                      # 0 shows workspace
        "[]",                                                # 1 user: "Go to workspace ... 'archive'."
        "[cd(folder='workspace'), mv(source='log.txt', destination='archive')]",  # 2 log.txt, archive: the
        # user's; workspace: 0's (the user names it too, but after 0 showed it)
    ])
    assert "'archive'" in results[1].next.text and "workspace" in results[0].next.text
    assert found == [(-1, 2, IN), (0, 2, OK)]
    found, results = play(FILES, [
        "[cd(folder='document'), grep(file_name='final_report.pdf', pattern='budget analysis')]",  # 0
        "[grep(file_name='final_report.pdf', pattern='report content including')]",  # 1 shown by 0
        "[grep(file_name='final_report.pdf', pattern='report content includ')]",  # 2 a substring too
    ])
    assert "report content including budget" in results[0].next.text
    assert found == [(-1, 0, IN), (-1, 1, IN), (0, 1, OK), (-1, 2, IN), (0, 2, OK)]


def test_iapo_applies_and_reads_every_event():
    """bfcl offers provenance events, so IAPO applies; the graph IAPO builds from a played episode has the
    events' edges, user input (source -1) and the invalid action as an error."""
    assert "provenance_events" in BfclEnv.offers and applicable("iapo", "bfcl")
    actions = ["[cd(folder='document')]", "[ls()]", "[cat(file_name='previous_report.pdf')]",
               "[cd(folder='nowhere')]", "[cd(folder='x'", "[cat(file_name='final_report.pdf')]", "[]"]
    _, results = play(FILES, actions)
    graph = provenance_annotator(played_episode("agent", actions, results))
    assert sorted(graph.edges) == [(1, 2, OK), (3, 4, FAIL)]
    assert graph.user_input == {0, 5} and graph.errors == {4}  # bfcl emits no `error` event for 3


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_event_points_back_and_pairs_are_unique(category):
    env = BfclEnv(BfclConfig(categories=[category]))
    rng = random.Random(3)
    for task in scenarios(category)[::20]:
        ep = env.new_episode(task, rng)
        obs, j = ep.start(), 0
        while obs is not None:
            u = rng.random()
            r = ep.step(rng.choice(ODD) if u < 0.2 else env.random_action(ep, obs, rng) if u < 0.6
                        else ep.expert_action())
            pairs = [(e.data["source"], e.data["kind"]) for e in r.events if e.kind == "provenance"]
            assert all(-1 <= s < j and (s == -1) == (k == IN) for s, k in pairs)
            assert all(s == j - 1 for s, k in pairs if k == FAIL) and len({s for s, _ in pairs}) == len(pairs)
            assert all(e.turn == j for e in r.events if e.kind == "provenance")
            obs, j = r.next, j + 1
