"""Hostile action text every environment must survive: `step` never raises, episodes end, results are
well-formed.

A model's output is arbitrary text. `fuzz(env, turn_cap, rng)` plays an environment with seeded random
and hostile strings (huge numbers, 100 kB strings, control characters, NUL, Unicode digits, fake calls
in an environment's own syntax, empty and blank strings): first every hostile string at every turn of
every variant (`full_pass_tasks` tasks), then random mixtures (each turn hostile, random or the
demonstrator's) until `mixture` hostile actions were played; between hostile turns it plays the
environment's own demonstrator so that deep turns are reached. It raises AssertionError, saying what,
when a step raises or returns a malformed `StepResult` (a reward that is no finite float, an unknown
event kind, data or info that is not JSON, an unknown next role), when the demonstrator raises on what
a hostile turn left behind, or when an episode runs past `turn_cap(task)` turns.

A new environment's author calls it from a test, with the environment's own words so that the fake
calls are near misses of its syntax:

    env = MyEnv(MyConfig(train_size=24, heldout_size=6))
    report = fuzz(env, lambda task: len(task["steps"]) + 2, random.Random(0), words=MY_VERBS)
    assert report.roles == set(env.roles)  # every role was given hostile text
"""

from __future__ import annotations

import json
import math
import random
import string
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.episode import Event, EventKind
from envs.api.base import Environment, Observation, StepResult

EVENT_KINDS = set(typing.get_args(EventKind))
HUGE = "9" * 5000  # past int()'s 4300-digit limit
UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩۱۲३४৫௬๗༨᠙𝟎𝟏𝟐¹²³½"  # \d or str.isdigit() accept most of these
ODD_SPACE = "\t\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000\ufeff"
CONTROL = "".join(map(chr, range(32))) + "\x7f"

HOSTILE = [
    "", " ", "\n", "\t \r\n", ODD_SPACE, "\x00", "\x00" * 100, CONTROL, "\x1b[31m#1\x1b[0m", "\ud800",
    "\ufffd", HUGE, "#" + HUGE, " #-" + HUGE, "#" + "9" * 100_000, "#" * 100_000, "=" * 100_000,
    " " * 100_000, "a " * 50_000, "1 " * 50_000, "#1 " * 30_000, "add tea " + HUGE,
    "send " + HUGE + " " + HUGE, "book mon " + HUGE, "add tea ٣", "add\u3000tea\u30002", "#١٦", "١٦", "F=١",
    "#𝟏𝟔", " census\x00", "pop\u00a0area", "done\x00", UNICODE_DIGITS, "#" + UNICODE_DIGITS, "A=" + HUGE,
    " " + HUGE, "-" * 10_000 + "1",
]


def fake_calls(rng: random.Random, words: Sequence[str] = (), plan_words: Sequence[str] = ()) -> list[str]:
    """Near misses in the environments' syntax (answers, messages, tool calls, plans): `words` are the
    environments' own (items, names, tools), `plan_words` those a plan is made of (attributes)."""
    number = rng.choice(["0", "7", "-3", "+5", "007", "9" * 18, "9" * 19, HUGE, "-" + HUGE, "١٦", "1_000",
                         "𝟏", "²"])
    letter = rng.choice(["F", "A", "Z", "f", "É", ""])
    word = rng.choice([*words, "x", "", HUGE])
    return [
        f"#{number}", f" #{number}", f"# {number} ", f"{number}", f"{letter}={number}",
        f" {letter} = {number}\n",
        f"1+2=3 #{number}", f"#{number}#{number}", f"add {word} {number}", f"add {word} {number} {number}",
        f"send {number} {number}", f"book {word} {number}", f"find {word}", f"remove {word}", "pay", "done",
        f"done {number}", f"pay{number}", f" {word}",
        " " + " ".join(rng.choices([*plan_words, word], k=rng.randint(0, 7))),
        " " + " ".join(rng.choices([*string.ascii_uppercase, "?", number], k=rng.randint(0, 7))),
    ]


def random_text(rng: random.Random) -> str:
    """Random text from one of a few alphabets (printable, digits and signs, control and odd space,
    Unicode digits), mostly short, one time in fifty 100,000 characters long."""
    alphabet = rng.choice([string.printable, string.digits + " #=-+", CONTROL + ODD_SPACE,
                           UNICODE_DIGITS + "# ", string.ascii_lowercase + " 0123456789",
                           string.printable + UNICODE_DIGITS + ODD_SPACE])
    n = rng.choice([0, 1, 2, 5, 20, 80, 300]) if rng.random() < 0.98 else 100_000
    return "".join(rng.choices(alphabet, k=n))


def _require(condition: bool, what: str) -> None:
    """An AssertionError naming `what` unless `condition` (explicit, so that `python -O` keeps the checks)."""
    if not condition:
        raise AssertionError(what)


def check_result(env: Environment, r: Any) -> None:
    """Raise AssertionError unless `r` is a well-formed `StepResult` of `env` (what the rollout and the
    records rely on: a finite float reward, known event kinds, JSON data and info, a known next role)."""
    _require(isinstance(r, StepResult), f"{env.name}: step returned {type(r).__name__}, not a StepResult")
    _require(isinstance(r.reward, float) and math.isfinite(r.reward), f"{env.name}: reward {r.reward!r}")
    _require(isinstance(r.success, bool), f"{env.name}: success {r.success!r} is not a bool")
    _require(isinstance(r.events, list) and isinstance(r.info, dict), f"{env.name}: events or info malformed")
    for e in r.events:
        _require(isinstance(e, Event) and e.kind in EVENT_KINDS and isinstance(e.turn, int)
                 and isinstance(e.data, dict), f"{env.name}: malformed event {e!r}")
        json.dumps(e.data)
    json.dumps(r.info)  # records are JSON
    if r.next is not None:
        _require(r.next.role in env.roles and isinstance(r.next.text, str)
                 and isinstance(r.next.new_context, bool),
                 f"{env.name}: malformed next observation {r.next!r:.200}")


def play(env: Environment, task: dict[str, Any], variant: str, seed: int, choose: Callable[[int], str | None],
         roles: set[str], turn_cap: Callable[[dict[str, Any]], int]) -> int:
    """One episode; `choose(turn)` gives the action (None: the demonstrator's). Returns the hostile
    actions played (and adds the roles that played one to `roles`)."""
    ep = env.new_episode(task, random.Random(seed), variant)
    obs: Observation | None = ep.start()
    turns = hostile = 0
    while obs is not None:
        _require(obs.role in env.roles, f"{env.name}: unknown role {obs.role!r}")
        # the demonstrator reads state hostile turns left behind: it must not raise
        expert = ep.expert_action()
        _require(isinstance(expert, str), f"{env.name}: the demonstrator's action is not text")
        action = choose(turns)
        if action is not None:
            hostile += 1
            roles.add(obs.role)
        r = ep.step(expert if action is None else action)
        check_result(env, r)
        obs = r.next
        turns += 1
        _require(turns <= turn_cap(task), f"{env.name} ran past its turn cap")
    return hostile


@dataclass
class FuzzReport:
    hostile: int = 0  # hostile actions played
    roles: set[str] = field(default_factory=set)  # the roles that were given one


def fuzz(env: Environment, turn_cap: Callable[[dict[str, Any]], int], rng: random.Random, *,
         full_pass_tasks: int = 2, mixture: int = 3000, words: Sequence[str] = (),
         plan_words: Sequence[str] = ()) -> FuzzReport:
    """Play `env`'s train tasks with hostile text (the module's docstring); raise AssertionError on what
    breaks. `full_pass_tasks`: tasks given every hostile string at every turn below `turn_cap(task)`;
    `mixture`: the hostile actions of the random mixtures that follow (fewer for environments whose
    steps are slow: a sandbox, a simulator)."""
    tasks = [json.loads(row["task"]) for row in env.task_set()["train"]]
    report = FuzzReport()
    for variant in env.variants():  # every hostile string at every turn, the demonstrator elsewhere
        for task in tasks[:full_pass_tasks]:
            for turn in range(turn_cap(task)):
                for text in [*HOSTILE, *fake_calls(rng, words, plan_words)]:
                    at_turn = lambda t, turn=turn, text=text: text if t == turn else None  # noqa: E731
                    seed = rng.randrange(10**6)
                    report.hostile += play(env, task, variant, seed, at_turn, report.roles, turn_cap)

    def choose(t: int) -> str | None:
        u = rng.random()
        if u < 0.3:
            return None
        if u < 0.6:
            return rng.choice(fake_calls(rng, words, plan_words))
        return random_text(rng) if u < 0.9 else rng.choice(HOSTILE)

    while report.hostile < mixture:  # random mixtures: each turn hostile, random or the demonstrator's
        task, variant = rng.choice(tasks), rng.choice(env.variants())
        report.hostile += play(env, task, variant, rng.randrange(10**6), choose, report.roles, turn_cap)
    return report
