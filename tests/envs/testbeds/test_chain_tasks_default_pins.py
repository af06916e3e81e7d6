"""chain_tasks without families is bit-identical to the code before families were added (#46): the digests
below were computed from that code (envs/testbeds/chain_tasks.py at 21c74cd), before the edit that added
`env.families` and moved the apps to chain_apps.py. CANOPY's committed results (and the IAPO and compare
cells on chain_tasks) depend on these task streams, observations and rewards.

A digest is sha256 (16 hex) of the JSON of: every row of every split (id, tier, task: whole columns, not
their printed heads); the first 30 train tasks played by the demonstrator and by the random policy (each
turn: role, observation, new_context, action, reward, success, every event, provenance included, info); the
tokenizer corpus's first 40 texts.
"""

from __future__ import annotations

import json
import random

import pytest

from envs.testbeds.chain_tasks import ChainTasksConfig, ChainTasksEnv
from tests.helpers import digest, split_digests, transcript


def plays_digest(env: ChainTasksEnv, policy: str, n: int = 30) -> str:
    rng = random.Random(0)
    return digest([transcript(env, json.loads(row["task"]), rng, policy=policy, action_rng=random.Random(7))
                   for row in env.task_set()["train"].select(range(n))])


# name -> (settings, split digests, demonstrator, random policy, corpus)
PINS = {
    "default": ({}, {"train": "2be50d31f47f2fe0", "heldout": "07fbe2f05b05a357", "dev": "5946260760674d7f"},
                "3919a44074f81dab", "78007e9ace752b5b", "693920d427bade95"),
    "canopy-cpu": ({"fault_rate": 0.05, "demo_slip": 0.3},
                   {"train": "2be50d31f47f2fe0", "heldout": "07fbe2f05b05a357", "dev": "5946260760674d7f"},
                   "c4908d3bbd5cc700", "33feefcfeb862a5a", "77af7ceb618afb12"),
    "canopy-smoke": ({"train_size": 120, "heldout_size": 24, "fault_rate": 0.1, "demo_slip": 0.25},
                     {"train": "1de063020e84b590", "heldout": "1ad440963496651e", "dev": "63f0bcc638c87c3c"},
                     "e8f397bea55df8d5", "33feefcfeb862a5a", "bed9f1bdcaed233c"),
    "demo-busy": ({"train_size": 60, "heldout_size": 15, "dev_size": 9, "demo_size": 30, "busy_rate": 0.4,
                   "slack": 1},
                  {"train": "879d9d915aa0f850", "heldout": "c36ef29ac04ee967", "demo": "4d55c91a2adb10c2",
                   "dev": "ff8d8ef5effe998b"}, "bf7ca4bd621daf47", "8b8f09c8cd95e4ba", "dd9544d09f8307c7"),
}


@pytest.mark.parametrize("name", PINS)
def test_the_default_tasks_are_bit_identical(name):
    settings, splits, expert, randoms, corpus = PINS[name]
    env = ChainTasksEnv(ChainTasksConfig(**settings))
    assert split_digests(env) == splits
    assert plays_digest(env, "expert") == expert
    assert plays_digest(env, "random") == randoms
    assert digest(list(env.corpus(40))) == corpus
    assert env.task_set()["train"][0]["task"] == '{"items": [["salt", 1], ["rice", 1]]}'
    assert (env.roles, env.offers, env.variants(), env.tiers) == (
        ("agent",), {"single_agent", "provenance_events"}, ("main",), (1, 2, 3))


def test_the_pins_see_a_change():
    """The digests are not blind: a change of one setting moves them."""
    settings, splits, expert, _, _ = PINS["default"]
    assert plays_digest(ChainTasksEnv(ChainTasksConfig(busy_rate=0.2)), "expert") != expert
    assert split_digests(ChainTasksEnv(ChainTasksConfig(data_seed=1235))) != splits


def test_the_config_file_records_no_family_setting():
    """The resolved config of a default chain_tasks run holds no family key, so the runs recorded before
    families keep their identity (common/run_identity.py): CANOPY's cpu cell composes as recorded."""
    from experiments.run import compose

    env = dict(compose("canopy", ["scale=cpu"]).env)
    assert env == {"name": "chain_tasks", "busy_rate": 0.1, "fault_rate": 0.05, "demo_slip": 0.3, "slack": 3,
                   "train_size": 1500, "heldout_size": 150, "dev_size": 64}
