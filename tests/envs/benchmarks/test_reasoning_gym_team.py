"""reasoning_gym_team (#46): CCPO's dyad on reasoning_gym's tasks: the same splits, the Thinker's guidance
reaching the Solver only where the variant says, the paired variant's solo-vs-joint record."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("reasoning_gym", reason="the `envs` extra is not installed (pip install -e '.[envs]')")

from envs.benchmarks.reasoning_gym import ReasoningGymConfig, ReasoningGymEnv  # noqa: E402
from envs.benchmarks.reasoning_gym_team import (  # noqa: E402
    NO_GUIDANCE,
    ReasoningGymTeamConfig,
    ReasoningGymTeamEnv,
)
from envs.registry import ENVS  # noqa: E402

SIZES = {"train_size": 12, "heldout_size": 4, "dev_size": 4, "demo_size": 0,
         "train_generators": ["chain_sum"], "heldout_generators": ["basic_arithmetic"]}


def make() -> ReasoningGymTeamEnv:
    return ReasoningGymTeamEnv(ReasoningGymTeamConfig(**SIZES))  # type: ignore[arg-type]


def first_task(env: ReasoningGymEnv) -> dict:
    return json.loads(env.task_set()["train"]["task"][0])


def test_registered_offering_the_dyad_with_the_single_agent_splits():
    assert ENVS["reasoning_gym_team"] is ReasoningGymTeamEnv
    assert ReasoningGymTeamEnv.offers == {"multi_agent_shared_outcome", "two_role_dialogue"}
    team, single = make(), ReasoningGymEnv(ReasoningGymConfig(**SIZES))  # type: ignore[arg-type]
    for split in ("train", "heldout", "dev"):
        assert team.task_set()[split]["task"] == single.task_set()[split]["task"]
    assert set(team.variants()) == {"main", "solo", "empty_guidance", "paired"}


@pytest.mark.parametrize("variant, sees", [("main", True), ("empty_guidance", False)])
def test_the_solver_reads_the_guidance_only_in_main(variant, sees):
    env = make()
    task = first_task(env)
    ep = env.new_episode(task, random.Random(0), variant)
    assert ep.start().role == "thinker"
    obs = ep.step("add the two numbers").next
    assert obs is not None and obs.role == "solver" and obs.new_context
    assert ("add the two numbers" in obs.text) == sees and (NO_GUIDANCE in obs.text) != sees
    done = ep.step(f"<answer>{task['answer']}")
    assert done.next is None and done.success and done.reward == 1.0
    assert done.info["msg_silent"] is False and done.info["msg_chars"] == len("add the two numbers")


def test_solo_is_the_solver_alone_and_a_missing_answer_is_invalid():
    env = make()
    ep = env.new_episode(first_task(env), random.Random(0), "solo")
    obs = ep.start()
    assert obs.role == "solver" and NO_GUIDANCE in obs.text
    done = ep.step("I do not know")
    assert done.next is None and not done.success and [e.kind for e in done.events] == ["invalid_action"]


def test_paired_records_solo_and_joint():
    env = make()
    task = first_task(env)
    ep = env.new_episode(task, random.Random(0), "paired")
    assert ep.start().role == "solver"
    assert ep.step("<answer>-1").next.role == "thinker"
    assert ep.step("").next.role == "solver"
    done = ep.step(f"<answer>{task['answer']}")
    assert done.info["solo_correct"] is False and done.info["joint_correct"] is True
    assert done.info["help"] and not done.info["hurt"] and done.info["contribution"] == 1.0
    assert done.info["msg_silent"] is True


def test_the_demonstrator_solves_every_variant():
    env = make()
    for variant in env.variants():
        ep = env.new_episode(first_task(env), random.Random(0), variant)
        result = None
        ep.start()
        while result is None or result.next is not None:
            result = ep.step(ep.expert_action())
        assert result.success, variant
