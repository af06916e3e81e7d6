"""The textworld environment: seeded games cached on disk, disjoint splits, the winning policy wins,
commands the game does not admit are invalid actions, and wandering does not win."""

from __future__ import annotations

import json
import random

import pytest

from envs.benchmarks.textworld.env import TextWorldEnv
from envs.benchmarks.textworld.games import TextWorldConfig, _textworld, game_file
from envs.registry import ENVS

try:
    _textworld()  # the package, with the placeholder jericho when the real one is absent
except ImportError:
    pytest.skip("textworld is not installed (make setup installs it --no-deps)", allow_module_level=True)


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> TextWorldEnv:
    return TextWorldEnv(TextWorldConfig(train_size=6, heldout_size=3, dev_size=3,
                                        cache_dir=str(tmp_path_factory.mktemp("tw"))))


def tasks(env, split="train"):
    return [json.loads(t) for t in env.task_set()[split]["task"]]


def play(env, task, choose):
    ep = env.new_episode(task, random.Random(0))
    obs, events, r = ep.start(), [], None
    while obs is not None:
        r = ep.step(choose(ep, obs))
        events += r.events
        obs = r.next
    return r, events


def test_splits_are_seeded_disjoint_and_tiered(env):
    seeds = {s: {t["seed"] for t in tasks(env, s)} for s in ("train", "heldout", "dev")}
    assert not seeds["train"] & seeds["heldout"] and not seeds["train"] & seeds["dev"]
    assert not seeds["dev"] & seeds["heldout"]
    assert [t["quest_length"] for t in tasks(env)] == [1, 2, 3, 1, 2, 3]
    again = TextWorldEnv(TextWorldConfig(train_size=6, heldout_size=3, dev_size=3,
                                         cache_dir=env.cfg.cache_dir))
    assert tasks(again, "heldout") == tasks(env, "heldout")


def test_games_are_made_once_and_cached(env):
    t = tasks(env)[0]
    path = game_file(env.cfg.cache_dir, t["seed"], t["quest_length"], env.cfg.rooms, env.cfg.objects)
    assert path.startswith(env.cfg.cache_dir) and path.endswith(".json")
    assert game_file(env.cfg.cache_dir, t["seed"], t["quest_length"], env.cfg.rooms, env.cfg.objects) == path


def test_the_winning_policy_wins_every_game(env):
    for t in tasks(env) + tasks(env, "heldout"):
        r, events = play(env, t, lambda ep, obs: ep.expert_action())
        assert r.reward == 1.0 and r.info["won"] and not events, t


def test_the_first_observation_states_the_objective_and_the_room(env):
    ep = env.new_episode(tasks(env)[0], random.Random(0))
    text = ep.start().text
    assert text.startswith("Objective: ") and "You are in the " in text
    assert "Commands: " in text and text.endswith(">")


@pytest.mark.parametrize("action", ["", "dance", "go up", "\x00", "take " + "x" * 100_000,
                                    "GO\tNORTH\nlook"[:0] + "xyzzy"])
def test_commands_the_game_does_not_admit_are_invalid(env, action):
    ep = env.new_episode(tasks(env)[1], random.Random(0))
    ep.start()
    r = ep.step(action)
    assert [e.kind for e in r.events] == ["invalid_action"] and r.next.text.startswith("Invalid command.")


def test_commands_match_case_and_spacing_insensitively(env):
    ep = env.new_episode(tasks(env)[0], random.Random(0))
    ep.start()
    command = ep.expert_action()
    r = ep.step("  " + command.upper().replace(" ", "   ") + "\nand then some")
    assert not r.events


def test_wandering_until_the_step_limit_loses(env):
    r, events = play(env, tasks(env)[2], lambda ep, obs: "look")
    assert r.reward == 0.0 and r.info["steps"] == env.cfg.max_steps and not events


def test_provenance_and_registry(env):
    p = env.provenance()
    assert p["package"] == "textworld" and p["license"] == "MIT"
    assert ENVS["textworld"] is TextWorldEnv
