"""`bfcl`'s provenance events (#46) changed nothing else: the digests below were computed from the code
before they were added (envs/benchmarks/bfcl/ at c440139), and the code now gives the same ones with the
provenance events left out.

A digest is sha256 (16 hex) of the JSON of the transcripts (each step's role, observation, new_context,
action, reward, success, events but provenance ones, info) of every `STRIDE`-th scenario of a category,
played by the scripted demonstrator, by the random policy (`random_action`) and by a mixed policy (the
demonstrator, the random policy, and hostile or failing calls, text replies and malformed calls, drawn at
random).
"""

from __future__ import annotations

import functools
import random
from typing import Any

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make setup installs it --no-deps)")

from envs.benchmarks.bfcl.apps import scenarios  # noqa: E402
from envs.benchmarks.bfcl.env import CATEGORIES, BfclConfig, BfclEnv  # noqa: E402
from tests.helpers import digest, transcript  # noqa: E402

STRIDE = 7
ODD = ["[cd(folder='nowhere')]", "[cd(folder=__import__('os').getcwd())]", "[power(base=9, exponent=9**99)]",
       "[nosuch(x=1)]", "[cd(folder='x'", "All done.", "[cat(file_name='final_report.pdf'), ls(a=True)]",
       "[mean(numbers=[1, 2.5, 'x'])]", "[cd('document')]", "[]"]
POLICIES = ("expert", "random", "mixed")
# (category, policy) -> digest, from the code at c440139
PINS = {
    ("base", "expert"): "1c06d2046c2cb613",
    ("base", "random"): "a0a674aff28590a0",
    ("base", "mixed"): "2ce7884825084276",
    ("miss_func", "expert"): "e349921ff9db5928",
    ("miss_func", "random"): "42388dbcbb4a6f86",
    ("miss_func", "mixed"): "cf2331350ed9027b",
    ("miss_param", "expert"): "6e5330f3c4023795",
    ("miss_param", "random"): "8155430ed194ca20",
    ("miss_param", "mixed"): "210062156090d01b",
    ("long_context", "expert"): "96b8cfe455b7dc43",
    ("long_context", "random"): "7189a8964c9ddb71",
    ("long_context", "mixed"): "5d0008b01e20b822",
}


def action_of(policy: str, env: BfclEnv, ep: Any, obs: Any, rng: random.Random) -> str:
    if policy == "expert":
        return str(ep.expert_action())
    if policy == "random":
        return env.random_action(ep, obs, rng)
    u = rng.random()
    return (rng.choice(ODD) if u < 0.25 else env.random_action(ep, obs, rng) if u < 0.5
            else ep.expert_action())


def plays(category: str, policy: str, keep_provenance: bool = False, **settings: Any) -> list[list[Any]]:
    """The transcripts of every `STRIDE`-th scenario of `category` played by `policy`."""
    env = BfclEnv(BfclConfig(categories=[category], **settings))
    rng, action_rng = random.Random(0), random.Random(7)
    return [transcript(env, task, rng, policy=functools.partial(action_of, policy), action_rng=action_rng,
                       keep_event=lambda e: keep_provenance or e.kind != "provenance")
            for task in scenarios(category)[::STRIDE]]


@pytest.mark.parametrize(("category", "policy"), PINS)
def test_transcripts_and_rewards_are_as_before_provenance_events(category, policy):
    assert digest(plays(category, policy)) == PINS[category, policy]


def test_the_pins_see_a_change_and_the_plays_carry_provenance_events():
    """The digests are not blind (a setting that changes the plays moves them), and what they leave out is
    there: the same plays with every event hold provenance events of each kind."""
    assert digest(plays("base", "expert", demo_slip=0.5)) != PINS["base", "expert"]
    kinds = {event["data"]["kind"] for policy in POLICIES for play in plays("base", policy, True)
             for turn in play for event in turn[6] if event["kind"] == "provenance"}
    assert kinds == {"input", "success_utilization", "failed_utilization"}


if __name__ == "__main__":  # print the digests (to re-pin after an intended change)
    for c in CATEGORIES:
        for p in POLICIES:
            print(f'    ("{c}", "{p}"): "{digest(plays(c, p))}",')
