"""`voting` and `thinker_solver` at their default settings and their committed config files play exactly as
they did before #46 added voting's counterfactual record and thinker_solver's `env.tasks` (its shared rules
moved to envs/testbeds/dyad.py).

The digests were recorded from the code before those edits: sha256 (16 hex) of the JSON of each split's
columns (`id`, `tier`, `task`), and of the transcripts of the first 20 train tasks in every variant, played by
the demonstrator and by the random policy (`random_action`) from `random.Random(0)`: each turn's role,
observation, new_context, action, reward, success, events and info. Voting's `info["record"]` (added by #46,
for SHARP's replays) is left out of the transcripts, so they also pin that it changed nothing else; the
record itself is tested in tests/envs/testbeds/test_voting_replay.py.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import yaml

from common.config import build_dataclass
from envs.api.base import Environment
from envs.testbeds.thinker_solver import ThinkerSolverEnv
from envs.testbeds.voting import VotingEnv
from tests.helpers import digest, split_digests, transcript

CONF = Path(__file__).resolve().parents[3] / "common" / "conf" / "env"


def build(cls: type[Environment], config_file: str | None) -> Environment:
    settings = yaml.safe_load((CONF / f"{config_file}.yaml").read_text()) if config_file else {}
    return cls(build_dataclass(cls.config_class, settings, "env"))


def pins(env: Environment, n: int = 20) -> tuple[dict[str, str], dict[str, str]]:
    tasks = env.task_set()
    # whole columns as lists (a datasets Column hashed by its repr would cover its first five rows only)
    splits = split_digests(env)
    rows = [json.loads(r["task"]) for r in tasks["train"].select(range(n))]
    plays = {}
    for variant in env.variants():
        for policy in ("expert", "random"):
            rng = random.Random(0)
            played = [transcript(env, t, rng, variant, policy, drop_info=("record",)) for t in rows]
            plays[f"{variant}/{policy}"] = digest(played)
    return splits, plays


VOTING_PLAYS = {"main/expert": "bbdade56c5a9b6f5", "main/random": "4e93a25a78f0d7b0",
                "without0/expert": "34f97c5a2f2bd08c", "without0/random": "6cae94deaf42c735",
                "without1/expert": "916928f9862a99a5", "without1/random": "e0803b575fbdada8",
                "without2/expert": "781bb45f8e9fd8a3", "without2/random": "149e94d4d65cf67c"}
FACTS_PLAYS = {"main/expert": "ecc3bc0fac71c435", "main/random": "a70d8077deba94c4",
               "solo/expert": "f6c38f9f89e42838", "solo/random": "501471bf8bd6343e",
               "empty_guidance/expert": "fa2137b27c924ecf", "empty_guidance/random": "2080e6afb684c0ee",
               "paired/expert": "b43cdb25cc7695d2", "paired/random": "7bf0a711a773c380"}
# (environment, config file or None for the defaults) -> (split digests, transcript digests)
PINS: dict[tuple[type[Environment], str | None], tuple[dict[str, str], dict[str, str]]] = {
    (VotingEnv, None): (
        {"train": "d37193cdda778af8", "heldout": "0e781808a902b8d6", "dev": "a52a6fe392821be0"},
        VOTING_PLAYS),
    (VotingEnv, "voting"): (
        {"train": "a592d02611222459", "heldout": "3b8719c87ed27fb3", "dev": "e5976662e0d6c405"},
        VOTING_PLAYS),
    (ThinkerSolverEnv, None): (
        {"train": "b93cee95be9439e2", "heldout": "659cebc57d27fc36", "dev": "d044168027f916ef"}, FACTS_PLAYS),
    (ThinkerSolverEnv, "thinker_solver"): (
        {"train": "a86bb980bec583c7", "heldout": "dda0ee5fe16dfe30", "dev": "e2e4c8a70bb14581"}, FACTS_PLAYS),
    (ThinkerSolverEnv, "thinker_solver_freeride"): (
        {"train": "94bfdb912819db58", "heldout": "53628497c99a5eec", "dev": "e733c0422fbdae77"},
        {"main/expert": "9210500ae3f38926", "main/random": "0c69db054f3e2fc7",
         "solo/expert": "e003eb1ede32baad", "solo/random": "f23e03eeb6510341",
         "empty_guidance/expert": "305cd5930d33e847", "empty_guidance/random": "9b1cd6a4e05fadbe",
         "paired/expert": "a162dd7add4b6411", "paired/random": "72f0f509ecaccc7d"}),
    (ThinkerSolverEnv, "thinker_solver_dyad"): (
        {"train": "d8ab59f3714e5158", "heldout": "f0593e6e2ebac94b", "dev": "ca93888c033e9ae9"},
        {"main/expert": "badc317b644bf233", "main/random": "4e17770eae848aec",
         "solo/expert": "1d162b6f70283057", "solo/random": "c780e21d8ba47c11",
         "empty_guidance/expert": "21129f092d8269f1", "empty_guidance/random": "42b6d3575cb81aec",
         "paired/expert": "c7060866a523e563", "paired/random": "c740396a0e2b744c"}),
}


@pytest.mark.parametrize("key", list(PINS), ids=[f"{c.name}-{f or 'defaults'}" for c, f in PINS])
def test_default_tasks_observations_and_rewards_are_as_before(key):
    cls, config_file = key
    assert pins(build(cls, config_file)) == PINS[key]


def test_the_pins_move_with_a_reward_or_a_task():
    """The digests are fine enough for the pins to fail: a cost of 0.01 a character instead of 0.02 moves the
    plays where the Thinker speaks and no other; another data_seed moves the splits."""
    env = build(ThinkerSolverEnv, None)
    splits, plays = pins(env)
    env.cfg.cost_per_char = 0.01
    cheaper = pins(env)[1]
    assert [k for k in plays if cheaper[k] != plays[k]] == [
        "main/expert", "main/random", "empty_guidance/expert", "empty_guidance/random", "paired/expert",
        "paired/random"]
    other = ThinkerSolverEnv(build_dataclass(ThinkerSolverEnv.config_class, {"data_seed": 1}, "env"))
    assert all(pins(other)[0][k] != splits[k] for k in splits)
