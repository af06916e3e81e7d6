"""The bfcl environment: fixed splits, the ground truth passes BFCL's checker, wrong plays fail, hostile
calls never run."""

from __future__ import annotations

import json
import random
import time

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make setup installs it --no-deps)")

from envs.benchmarks.bfcl.apps import scenarios  # noqa: E402
from envs.benchmarks.bfcl.calls import parse_calls  # noqa: E402
from envs.benchmarks.bfcl.env import CATEGORIES, BfclConfig, BfclEnv, split_of  # noqa: E402
from envs.registry import ENVS  # noqa: E402


def episode(index: int = 0, category: str = "base", **settings):
    task = scenarios(category)[index]
    ep = BfclEnv(BfclConfig(categories=[category], **settings)).new_episode(task, random.Random(0))
    return task, ep, ep.start()


def play(ep, actions_for_turn) -> tuple[float, list, dict]:
    """Plays `actions_for_turn(turn, step)` (None: the demonstrator's action) to the end."""
    obs, events, step, turn, r = True, [], 0, 0, None
    while obs is not None:
        action = actions_for_turn(ep.turn, step)
        r = ep.step(ep.expert_action() if action is None else action)
        events += r.events
        step = step + 1 if ep.turn == turn else 0
        turn, obs = ep.turn, r.next
    return r.reward, events, r.info


def test_every_category_has_200_scenarios_numbered_0_to_199():
    for category in CATEGORIES:
        rows = scenarios(category)
        assert [t["index"] for t in rows] == list(range(200)), category


def test_splits_are_fixed_by_scenario_number_and_shared_by_categories():
    env = BfclEnv(BfclConfig(categories=["base", "miss_param"], train_size=280, heldout_size=80, dev_size=40))
    ts = env.task_set()
    numbers = {split: {json.loads(t)["index"] for t in ts[split]["task"]} for split in ts}
    assert numbers["heldout"] == set(range(0, 200, 5)) and numbers["dev"] == set(range(3, 200, 10))
    assert len(numbers["train"]) == 140 and not numbers["train"] & (numbers["heldout"] | numbers["dev"])
    assert set(ts["heldout"]["tier"]) == {1, 2} and len(ts["heldout"]) == 80
    assert all(split_of(i) == "heldout" for i in numbers["heldout"])
    with pytest.raises(ValueError, match="40 heldout scenarios per category"):
        BfclEnv(BfclConfig(heldout_size=41))
    with pytest.raises(ValueError, match="categories"):
        BfclEnv(BfclConfig(categories=["composite"]))


@pytest.mark.parametrize("category", CATEGORIES)
def test_the_ground_truth_passes_bfcls_checker(category):
    for index in (0, 1, 49, 120, 199):
        _, ep, _ = episode(index, category)
        reward, events, info = play(ep, lambda turn, step: None)
        assert reward == 1.0 and info["valid"], (category, index, info)
        assert not [e for e in events if e.kind == "invalid_action"]


def test_the_first_observation_is_bfcls_prompt_and_the_first_turn():
    task, _, obs = episode(0)
    assert obs.text.startswith("You are an expert in composing functions.")
    assert '"name": "mv"' in obs.text and obs.text.endswith(task["question"][0][0]["content"])
    _, _, short = episode(0, docs="signatures")
    assert "\nmv(source: string, destination: string): " in short.text and len(short.text) < len(obs.text) / 4


def test_a_missing_call_or_an_idle_agent_fails():
    _, ep, _ = episode(0, demo_slip=1.0)  # the demonstrator drops each turn's last call
    assert play(ep, lambda turn, step: None)[0] == 0.0
    _, ep, _ = episode(0)
    reward, _, info = play(ep, lambda turn, step: "[]")
    assert reward == 0.0 and info["error_type"] == "multi_turn:empty_turn_model_response"
    _, ep, _ = episode(0)  # right calls in the wrong folder: the file system's state differs
    reward, _, info = play(ep, lambda turn, step: "[mkdir(dir_name='temp')]" if (turn, step) == (0, 0)
                           else None)
    assert reward == 0.0 and info["error_type"] == "multi_turn:instance_state_mismatch"


def test_calls_run_on_the_apps_and_results_come_back():
    _, ep, _ = episode(0)
    r = ep.step("[pwd(), cd(folder='document'), ls()]")
    shown = r.next.text
    assert "'role': 'tool'" in shown and "final_report.pdf" in shown
    assert '"current_working_directory": "document"' in shown
    r = ep.step("```\n[cd(folder='nowhere')]\n```")  # backticks stripped as BFCL strips them
    assert "nowhere" in r.next.text and "No such file or directory" in r.next.text


def test_text_ends_the_turn_and_malformed_calls_are_invalid_actions():
    task, ep, _ = episode(0)
    r = ep.step("Sure, I moved the file.")
    assert r.next.text == task["question"][1][0]["content"] and not r.events and ep.turn == 1
    r = ep.step("[cd(folder='x'")  # not a list of calls: BFCL's loop ends the turn too
    assert [e.kind for e in r.events] == ["invalid_action"] and ep.turn == 2
    assert r.next.text.startswith("(Your last message was not a valid list of function calls")


MATH = next(i for i, t in enumerate(scenarios("base")) if "MathAPI" in t["involved_classes"])
HOSTILE = [
    "[__import__(name='os')]", "[eval(source='1')]", "[exec(source='import os')]", "[breakpoint()]",
    "[input()]",
    "[os.system(command='ls')]", "[cd(folder=__import__('os').getcwd())]", "[cd(folder=1+1)]",
    "[cd(folder=(lambda: 1)())]", "[cd(**{'folder': 'x'})]", "[power(base=9, exponent=9**99)]",
    "[power(base=9, exponent=999999999)]", "[logarithm(value=2, base=10, precision=100000000)]",
    "[square_root(number=2, precision=10000000)]", "[_load_scenario(scenario={})]",
    # #34: each held the process in C (which the step's CPU limit cannot interrupt): > 60 s, > 30 s, 2.2 s
    "[round_number(number=7, decimal_places=-100000000)]", "[logarithm(value=2, base=10, precision=1e9)]",
    "[power(base=" + "9" * 4000 + ", exponent=1000)]",
]


@pytest.mark.parametrize("action", HOSTILE)
def test_hostile_calls_never_run_and_change_nothing(action):
    _, ep, _ = episode(MATH)
    r = ep.step(action)
    assert r.next is not None and r.next.text.count("Error during execution") == 1 and ep.decoded == [[]]
    # the rest of the episode as the ground truth: still right
    reward, _, info = play(ep, lambda turn, step: None)
    assert reward == 1.0, info


def test_the_hanging_round_number_returns_at_once():
    _, ep, _ = episode(MATH)
    before = time.process_time()
    # the 51 characters: > 60 s before
    r = ep.step("[round_number(number=7, decimal_places=-100000000)]")
    assert time.process_time() - before < 1.0
    assert "decimal_places out of the range this environment runs" in r.next.text and ep.decoded == [[]]


@pytest.mark.parametrize("action", ["[" * 5000 + "cd(folder='x')" + "]" * 5000, "(" * 100_000,
                                    "[cd(folder='x')]" * 3000])
def test_unparsable_or_huge_actions_end_the_turn_as_invalid(action):
    _, ep, _ = episode(0)
    r = ep.step(action)
    assert [e.kind for e in r.events] == ["invalid_action"] and ep.turn == 1


def test_a_long_literal_argument_runs():
    _, ep, _ = episode(0)
    assert "No such file or directory" in ep.step("[cd(folder='" + "9" * 10_000 + "')]").next.text


def test_positional_arguments_are_dropped_as_bfcls_decoder_drops_them():
    calls, why = parse_calls("[cd('document'), ls(a=True)]")
    assert why is None and [c.text() for c in calls] == ["cd()", "ls(a=True)"]
    _, ep, _ = episode(0)
    assert "missing 1 required positional argument" in ep.step("[cd('document')]").next.text


def test_a_force_quit_past_the_step_limit_scores_zero():
    _, ep, _ = episode(0, max_steps_per_turn=3)
    for _ in range(3):
        assert ep.step("[pwd()]").next is not None
    r = ep.step("[pwd()]")
    assert r.next is None and r.reward == 0.0 and r.info["error_type"] == "multi_turn:force_terminated"
    assert ep.step("[pwd()]").events[0].kind == "invalid_action"


def test_the_checker_leaves_no_app_instances_behind():
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    before = len(vars(multi_turn_utils))
    for index in range(5):
        play(episode(index)[1], lambda turn, step: None)
    assert len(vars(multi_turn_utils)) == before


def test_provenance_and_registry():
    env = BfclEnv(BfclConfig())
    p = env.provenance()
    assert p["package"] == "bfcl-eval" and p["license"] == "Apache-2.0" and p["tasks"] == {"base": 200}
    assert ENVS["bfcl"] is BfclEnv
