"""`terminal`'s provenance events (#46) changed nothing else: the digests below were computed from the code
before they were added (envs/testbeds/terminal/ at 92b5cff), and the code now gives the same ones with the
provenance events left out. River's committed runs (cpu, small, terminal-planted) depend on these
observations, rewards, events and infos.

A digest is sha256 (16 hex) of the JSON of the transcripts (tests/helpers.py `transcript`: each turn's role,
observation, new_context, action, reward, success, events but provenance ones, info) of every task of the
train, held-out, dev and demo splits of a small setting, played by the scripted demonstrator and by the
random policy (`random_action`, its own stream); the sandboxed ones play a few tasks, their `sandbox_s`
(wall-clock seconds) left out.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from envs.api import sandbox
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv
from tests.helpers import digest, transcript

SMALL = {"train_size": 60, "heldout_size": 30, "dev_size": 12, "demo_size": 20}
# River's second setting (replications/river/conf/replication.yaml, the pl-* arms)
PLANTED = {"share_planted": 0.5, "share_leak": 0.0, "share_weak": 0.1, "share_reject": 0.05,
           "share_unsolvable": 0.05, "share_trivial": 0.0, "share_ambiguous": 0.0}
SETTINGS: dict[str, tuple[dict[str, Any], int | None]] = {  # name -> (settings, tasks per split; None: all)
    "sim": ({**SMALL, "backend": "sim"}, None),
    "sim-planted": ({**SMALL, **PLANTED, "backend": "sim"}, None),
    "sim-loops": ({**SMALL, "backend": "sim", "demo_loop": 0.6, "demo_slip": 0.3, "max_turns": 5}, None),
    "sandbox": ({**SMALL, "backend": "sandbox"}, 4),
}
# name -> (demonstrator, random policy), from the code at 92b5cff
PINS = {
    "sim": ("3abdd8d9a0d08a7d", "47ec4551b44146f0"),
    "sim-planted": ("3fb6ef880fe6c684", "2fc44a0c1d9513bc"),
    "sim-loops": ("783ac4cbfe0b697e", "736dfb2ec4b9cef0"),
    "sandbox": ("ce110b5d77580c98", "4f081c749b3464dc"),
}


def without_provenance(event: Any) -> bool:
    return bool(event.kind != "provenance")


def plays(settings: dict[str, Any], n: int | None, policy: str,
          keep_event: Any = without_provenance) -> list[Any]:
    """The transcripts of the first `n` tasks (None: all) of each split, played by `policy`."""
    env = TerminalEnv(TerminalConfig(**settings))
    tasks = env.task_set()
    rng, action_rng = random.Random(0), random.Random(7)
    out = []
    for split in ("train", "heldout", "dev", "demo"):
        rows = tasks[split] if n is None else tasks[split].select(range(n))
        out += [transcript(env, json.loads(row["task"]), rng, policy=policy, action_rng=action_rng,
                           keep_event=keep_event, drop_info=("sandbox_s",)) for row in rows]
    return out


def plays_digest(name: str, policy: str) -> str:
    return digest(plays(*SETTINGS[name], policy))


@pytest.mark.parametrize("name", PINS)
def test_transcripts_and_rewards_are_as_before_provenance_events(name):
    if SETTINGS[name][0]["backend"] == "sandbox" and sandbox.available() is not None:
        pytest.skip(f"no sandbox here: {sandbox.available()}")
    assert (plays_digest(name, "expert"), plays_digest(name, "random")) == PINS[name]


def test_the_pins_see_a_change_and_the_plays_carry_provenance_events():
    """The digests are not blind (a setting that changes the plays moves them), and what they leave out is
    there: the same plays with every event hold provenance events of each kind."""
    assert digest(plays({**SMALL, "backend": "sim", "demo_slip": 0.5}, None, "expert")) != PINS["sim"][0]
    kinds = {event["data"]["kind"] for policy in ("expert", "random")
             for play in plays(*SETTINGS["sim"], policy, keep_event=None) for turn in play
             for event in turn[6] if event["kind"] == "provenance"}
    assert kinds == {"input", "success_utilization", "failed_utilization"}
