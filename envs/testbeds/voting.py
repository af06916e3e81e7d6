"""`voting`: three voters answer the same question; the majority answer is the team's answer.

CCPO's second setting (a 3-agent majority vote, LogiQA in the paper) at CPU scale. A task is a
handful of facts and a question about the first (as in `thinker_solver`); each voter is shown
its own subset of the facts (the others appear as `X=?`), and the tier is how many voters are shown
the asked fact (1, 2 or 3).
A voter not shown it can only guess (1 in `num_values`). Voters answer ` #<value>` one after the
other, each in its own context, without seeing the others' votes (a vote without `#<integer>`, in
ASCII digits, at most 18 of them, is an invalid action and never right).

The team is right when a strict majority of the voters that vote give the right value (with one
voter left out, both remaining voters must agree on it). Reward 1 for a right team answer, else 0.

Variants: `main` (all three vote) and `without<i>` (voter i abstains; it is not played), so that
a counterfactual credit of voter i is `outcome(main) - outcome(without<i>)`. Every episode's `info`
records each voter's own correctness (`voter<i>_correct`) and the team's (`majority_correct`).

Counterfactual replay (SHARP's coalition value v(S), #46), `replay(record, masked)`: the masked voters
abstain and the vote is counted again over the others' votes as cast, by the same rule (a strict majority
of the cast votes, so a 1-1 split is not right; no votes cast is not right). Deterministic, no model call;
`record` is the episode's `info["record"]`: `truth` (the right value, once per voter), `results` (each
voter's vote, None for an invalid one or a voter that did not play) and `voted` (the voters that played).
The record is not a metric (evaluation averages numbers only); no observation, reward or task changed.

Scripted demonstrator: a voter answers from its facts if it is shown the asked one, else guesses
uniformly (the guess is drawn from the episode's rng, once per voter).
"""

from __future__ import annotations

import random
import re
import string
from collections import Counter
from dataclasses import dataclass
from typing import Any

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult, parse_int

VOTERS = ("voter0", "voter1", "voter2")
_ANSWER = re.compile(r"#\s*(-?[0-9]+)\s*$")


@dataclass
class VotingConfig(EnvConfig):
    name: str = "voting"
    num_facts: int = 4  # facts per task
    num_letters: int = 8  # variable names are the first `num_letters` capital letters
    num_values: int = 10  # values are 0..num_values-1


def majority_correct(votes: list[int | None], value: int) -> bool:
    """A strict majority of the cast votes is the right value (None: an invalid vote, never right)."""
    if not votes:
        return False
    count = Counter(v for v in votes if v is not None)
    return count.get(value, 0) * 2 > len(votes)


@dataclass
class VoteReplay:
    """A counterfactual replay of one vote: the votes counted and the team's outcome."""

    cast: list[int | None]  # the unmasked voters' votes, in voter order (None: an invalid vote)
    value: float  # 1.0 if a strict majority of `cast` is right, else 0.0: v(S) for S = the unmasked voters


def replay(record: dict[str, Any], masked: frozenset[int] | set[int]) -> VoteReplay:
    """Count the vote again with the voters `masked` (0-based indices) abstaining (`record`:
    `Episode.info["record"]` of a `voting` episode). Deterministic, no model call."""
    cast = [record["results"][i] for i in record["voted"] if i not in masked]
    return VoteReplay(cast, float(majority_correct(cast, record["truth"][0])))


class VotingEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], rng: random.Random, variant: str, num_values: int):
        self.facts = [(k, int(v)) for k, v in task["facts"]]
        self.asked: str = task["asked"]
        self.value = dict(self.facts)[self.asked]
        self.shown: list[list[str]] = task["shown"]  # per voter
        absent = int(variant.removeprefix("without")) if variant.startswith("without") else None
        self.voters = [i for i in range(len(VOTERS)) if i != absent]
        self.position = 0
        self.votes: list[int | None] = []
        self.guesses = [rng.randrange(num_values) for _ in VOTERS]

    def prompt(self, i: int) -> str:
        facts = " ".join(f"{k}={v if k in self.shown[i] else '?'}" for k, v in self.facts)
        return f"Facts: {facts}. Q: {self.asked}?\nA:"

    def start(self) -> Observation:
        i = self.voters[0]
        return Observation(VOTERS[i], self.prompt(i), new_context=True)

    def expert_action(self) -> str:
        i = self.voters[self.position]
        return f" #{self.value}" if self.asked in self.shown[i] else f" #{self.guesses[i]}"

    def step(self, action: str) -> StepResult:
        m = _ANSWER.search(action.strip())
        vote = parse_int(m.group(1)) if m is not None else None
        no_answer = {"why": "no answer: end the reply with #<integer>"}
        events = [] if vote is not None else [Event("invalid_action", 0, no_answer)]
        self.votes.append(vote)
        self.position += 1
        if self.position < len(self.voters):
            i = self.voters[self.position]
            return StepResult(Observation(VOTERS[i], self.prompt(i), new_context=True), events=events)
        ok = majority_correct(self.votes, self.value)
        info: dict[str, Any] = {"majority_correct": ok}
        for i, vote in zip(self.voters, self.votes, strict=True):
            info[f"voter{i}_correct"] = vote == self.value
        results = dict(zip(self.voters, self.votes, strict=True))
        # for counterfactual replays (not a metric: evaluation averages numbers only)
        info["record"] = {"truth": [self.value] * len(VOTERS), "voted": list(self.voters),
                          "results": [results.get(i) for i in range(len(VOTERS))]}
        return StepResult(None, reward=float(ok), success=ok, events=events, info=info)


class VotingEnv(Environment):
    name = "voting"
    roles = VOTERS
    offers = frozenset({"multi_agent_shared_outcome", "majority_vote",  # envs/api/features.py
                        "counterfactual_replay"})
    config_class = VotingConfig
    stop = ("\n",)
    replay = staticmethod(replay)  # counterfactual re-scoring: env.replay(Episode.info["record"], masked)

    def __init__(self, cfg: VotingConfig):
        if not 2 <= cfg.num_facts <= cfg.num_letters <= 26 or cfg.num_values < 2:
            raise ValueError("need 2 <= env.num_facts <= env.num_letters <= 26 and env.num_values >= 2")
        super().__init__(cfg)
        self.cfg: VotingConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1, 2, 3)  # how many voters are shown the asked fact

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        letters = rng.sample(string.ascii_uppercase[: self.cfg.num_letters], self.cfg.num_facts)
        facts = [[k, rng.randrange(self.cfg.num_values)] for k in letters]
        asked = letters[0]  # first, as in thinker_solver: copying, not search
        others = letters[1:]
        informed = set(rng.sample(range(len(VOTERS)), tier))
        shown = []
        for i in range(len(VOTERS)):
            mine = [k for k in others if rng.random() < 0.5]
            shown.append([k for k in letters if k in mine or (k == asked and i in informed)])
        return {"facts": facts, "asked": asked, "shown": shown}

    def variants(self) -> tuple[str, ...]:
        return ("main", *(f"without{i}" for i in range(len(VOTERS))))

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant not in self.variants():
            raise ValueError(f"voting has no episode variant {variant!r}; it has {list(self.variants())}")
        return VotingEpisode(task, rng, variant, self.cfg.num_values)

    def oracle_action(self, state: EpisodeState, obs: Observation) -> str:
        """The hidden right value, for every voter: the voters not shown the asked fact guess, so the
        demonstrator is no oracle (it lacks information rather than making a mistake)."""
        return f" #{state.value}"  # type: ignore[attr-defined]

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """` #<v>`, v uniform in [0, num_values)."""
        return f" #{rng.randrange(self.cfg.num_values)}"
