"""The reasoning_gym environment: seeded disjoint splits, the package's scorers, the demonstrator, hostile
answers."""

from __future__ import annotations

import json
import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

pytest.importorskip("reasoning_gym", reason="the `envs` extra is not installed (pip install -e '.[envs]')")

from common.config import build_dataclass  # noqa: E402
from envs.benchmarks.reasoning_gym import (  # noqa: E402
    ReasoningGymConfig,
    ReasoningGymEnv,
    answer_text,
    last_number,
)
from envs.registry import ENVS  # noqa: E402

CONF = Path(__file__).resolve().parents[3] / "common" / "conf" / "env" / "reasoning_gym.yaml"


def make(**kw) -> ReasoningGymEnv:
    return ReasoningGymEnv(ReasoningGymConfig(**{"train_size": 60, "heldout_size": 20, "demo_size": 15,
                                                 **kw}))


def tasks(env: ReasoningGymEnv, split: str) -> list[dict]:
    return [json.loads(t) for t in env.task_set()[split]["task"]]


def play(env: ReasoningGymEnv, task: dict, action: str):
    ep = env.new_episode(task, random.Random(0))
    ep.start()
    return ep.step(action)


def test_splits_are_seeded_disjoint_and_round_robin_over_generators():
    env = make()
    ts = env.task_set()
    assert {k: len(v) for k, v in ts.items()} == {"train": 60, "heldout": 20, "demo": 15, "dev": 64}
    questions = {split: {t["question"] for t in tasks(env, split)} for split in ts}
    assert len(questions["train"]) == 60 and len(questions["heldout"]) == 20 and len(questions["demo"]) == 15
    assert not questions["train"] & questions["heldout"] and not questions["train"] & questions["demo"]
    assert not questions["demo"] & questions["heldout"]
    others = questions["train"] | questions["heldout"] | questions["demo"]
    assert len(questions["dev"]) == 64 and not questions["dev"] & others
    # the held-out generators' kind of task
    assert {t["generator"] for t in tasks(env, "dev")} == {"gsm_symbolic"}
    # train: 12 of each of the 5 train generators, tiers 1..5; held-out: gsm_symbolic, tier 6
    assert Counter(ts["train"]["tier"]) == {1: 12, 2: 12, 3: 12, 4: 12, 5: 12}
    assert {t["generator"] for t in tasks(env, "heldout")} == {"gsm_symbolic"}
    assert set(ts["heldout"]["tier"]) == {6}
    assert env.generators[ts["train"]["tier"][3] - 1] == tasks(env, "train")[3]["generator"]
    # the same data_seed gives the same tasks; another gives others
    assert make().task_set()["heldout"]["task"] == ts["heldout"]["task"]
    assert not set(make(data_seed=7).task_set()["heldout"]["task"]) & set(ts["heldout"]["task"])


def test_the_same_generator_in_both_splits_still_never_shares_a_question():
    env = make(train_generators=["aiw"], heldout_generators=["aiw"], train_size=40, heldout_size=20,
               demo_size=0)
    train, held = ({t["question"] for t in tasks(env, s)} for s in ("train", "heldout"))
    assert len(train) == 40 and len(held) == 20 and not train & held


def test_the_demonstrator_answers_right_everywhere():
    env = make()
    for split in ("train", "heldout", "demo"):
        for task in tasks(env, split):
            ep = env.new_episode(task, random.Random(0))
            obs = ep.start()
            assert obs.role == "solver" and task["question"].strip() in obs.text and "<answer>" in obs.text
            result = ep.step(ep.expert_action())
            assert result.next is None and result.reward == 1.0 and result.success, task


def test_the_package_scores_wrong_and_partial_answers():
    env = make()
    task = tasks(env, "heldout")[0]  # gsm_symbolic
    truth = task["answer"]
    assert play(env, task, f"Let me think. 3 + 4 = 7. <answer>{truth}</answer>").reward == 1.0
    assert play(env, task, f"<answer> {truth} ").reward == 1.0  # the stop string already cut `</answer>`
    wrong = play(env, task, f"<answer>{int(float(truth)) + 1}")
    assert wrong.reward == 0.01 and not wrong.success  # gsm_symbolic's own partial credit for a number
    chain = next(t for t in tasks(env, "train") if t["generator"] == "chain_sum")
    assert play(env, chain, f"<answer>{int(chain['answer']) + 1}").reward == 0.0


def test_a_reply_without_an_answer_tag_is_an_invalid_action():
    env = make()
    task = tasks(env, "train")[0]
    result = play(env, task, task["answer"])
    assert result.reward == 0.0 and [e.kind for e in result.events] == ["invalid_action"]
    assert result.info == {"score": 0.0, "answered": False, "tagged": False, "scorer_error": False}


def test_untagged_last_number_scores_the_last_number_and_says_so():
    env = make(untagged="last_number", train_generators=["chain_sum"])
    task = tasks(env, "train")[0]
    truth = task["answer"]
    right = play(env, task, f"First 1 + 2 = 3, then the total is {truth}.")
    assert right.reward == 1.0 and right.success and right.events == []
    assert right.info == {"score": 1.0, "answered": True, "tagged": False, "scorer_error": False}
    wrong = play(env, task, f"The total is {truth}, no wait, {int(truth) + 1}")  # the last number counts
    assert wrong.reward < 1.0 and wrong.info["tagged"] is False
    tagged = play(env, task, f"<answer>{truth}</answer> and 7 more")  # a tag still wins over later numbers
    assert tagged.reward == 1.0 and tagged.info["tagged"] is True
    silent = play(env, task, "I cannot say.")
    assert silent.reward == 0.0 and [e.kind for e in silent.events] == ["invalid_action"]
    assert last_number("3 ÷ 9 = 0.5.") == "0.5" and last_number("12 - 60 = -48 apples") == "-48"
    # ASCII digits only
    assert last_number("x" * 5000 + " 12") == "12" and last_number("١٦ and 𝟏") is None
    with pytest.raises(ValueError, match="untagged"):
        make(untagged="first_number")


def test_basic_arithmetic_without_parentheses_is_refused():
    """reasoning-gym prints such questions without the parentheses their answers use ('Calculate 5 / 9.' ->
    10)."""
    with pytest.raises(ValueError, match="allow_parentheses"):
        make(generator_settings={"basic_arithmetic": {"allow_parentheses": False}})
    env = make(train_generators=["basic_arithmetic"],
               generator_settings={"basic_arithmetic": {"max_terms": 3, "max_digits": 2}})
    # with parentheses allowed the printed expression evaluates to the answer
    for task in tasks(env, "train"):
        expression = task["metadata"]["expression"]
        truth = float(task["answer"])
        assert abs(eval(expression) - truth) < 1e-6, (expression, task["answer"])  # noqa: S307


@pytest.mark.parametrize("text", ["", "<answer>", "<answer></answer>", "<answer>" + "9" * 100_000,
                                  "<answer>\x00\ud800",
                                  "<answer>nan", "<answer>inf", "<answer>1e999999", "<answer>" + "(" * 5000,
                                  "<answer>١٦", "</answer><answer>", "<answer>" * 1000])
def test_hostile_answers_never_raise(text):
    env = make()
    for task in tasks(env, "train")[:5] + tasks(env, "heldout")[:2]:
        result = play(env, task, text)
        assert 0.0 <= result.reward <= 1.0 and result.next is None
        json.dumps(result.info)


def test_answer_text_reads_the_last_answer():
    assert answer_text("<answer>1</answer> then <answer> 2 </answer> trailing") == "2"
    assert answer_text("no tag") is None and answer_text("<answer>") == ""


def test_settings_are_checked_and_applied():
    with pytest.raises(ValueError, match="unknown reasoning_gym generator"):
        make(train_generators=["basic_arithmetc"])
    with pytest.raises(ValueError, match="accepts"):
        make(generator_settings={"chain_sum": {"max_term": 3}})
    with pytest.raises(ValueError, match="at least one"):
        make(heldout_generators=[])
    env = make(train_generators=["chain_sum"],
               generator_settings={"chain_sum": {"min_terms": 2, "max_terms": 2}})
    for task in tasks(env, "train"):
        assert task["question"].count("+") + task["question"].count(" - ") == 1, task["question"]


def test_registry_config_file_and_provenance():
    assert ENVS["reasoning_gym"] is ReasoningGymEnv
    cfg = build_dataclass(ReasoningGymConfig, yaml.safe_load(CONF.read_text()), "env")
    assert cfg.heldout_generators == ["gsm_symbolic"] and "basic_arithmetic" in cfg.train_generators
    prov = make().provenance()
    assert prov["package"] == "reasoning-gym" and prov["license"] == "Apache-2.0" and prov["version"]
    assert prov["tasks"] == {"train": 60, "heldout": 20, "demo": 15}
    json.dumps(prov)


def test_context_check_and_corpus():
    env = make()
    env.check_context(lambda text: len(text.split()), max_length=400, max_new_tokens=64)
    with pytest.raises(ValueError, match="too short"):
        env.check_context(lambda text: len(text.split()), max_length=20, max_new_tokens=8)
    texts = list(env.corpus(10))
    assert len(texts) == 10 and all("<answer>" in t for t in texts)
