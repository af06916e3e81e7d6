"""Every environment survives hostile action text: `step` never raises, episodes end, results are well-formed.

A model's output is arbitrary text. Each environment is played with seeded random and hostile
strings (huge numbers, 100 kB strings, control characters, NUL, Unicode digits, fake calls in the
environment's own syntax, empty and blank strings) at every turn of every variant, every role
included; between hostile turns it plays its own demonstrator's actions so that deep turns are reached.
"""

from __future__ import annotations

import json
import math
import random
import string
import typing
from collections.abc import Callable
from typing import Any

import pytest

from common.episode import Event, EventKind
from envs.api.base import Environment, StepResult, parse_int
from envs.benchmarks.paper_math.data import sample_data
from envs.registry import ENVS
from envs.testbeds.chain_tasks import DAYS, ITEMS, NAMES, task_steps
from envs.testbeds.toolplan import ATTRIBUTES, TOOLS

EVENT_KINDS = set(typing.get_args(EventKind))
HUGE = "9" * 5000  # past int()'s 4300-digit limit
UNICODE_DIGITS = "٠١٢٣٤٥٦٧٨٩۱۲३४৫௬๗༨᠙𝟎𝟏𝟐¹²³½"  # \d or str.isdigit() accept most of these
ODD_SPACE = "\t\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000\ufeff"
CONTROL = "".join(map(chr, range(32))) + "\x7f"

# Environment settings played (every environment at its defaults, plus the modes that change its rules).
SETTINGS: dict[str, list[dict[str, Any]]] = {
    "arith": [{"mode": "single"}, {"mode": "stepwise", "max_ops": 4}],
    "chain_tasks": [{}, {"busy_rate": 0.5, "fault_rate": 0.5, "demo_slip": 0.5}],
    "toolplan": [{"k": 2}, {"k": 5}],
    "toolhops": [{"k": 2}, {"k": 5, "classes": 8}, {"mode": "parallel", "k": 3, "extra_workers": 3, "classes": 1}],
    "thinker_solver": [{}, {"question": "sum", "see_probs": [0.1, 0.5, 0.9], "follow_known": 0.3, "cost_per_char": 0.0}],
    "voting": [{}],
    "reasoning_gym": [{}, {"untagged": "last_number"}],
    "humaneval": [{}],
    "bfcl": [{"max_steps_per_turn": 2}, {"categories": ["miss_func", "long_context"], "max_steps_per_turn": 2,
                                         "docs": "signatures", "max_result_chars": 200, "demo_slip": 0.5}],
    # retail (its database copies in ~0.04 s; airline's in ~0.25 s) and short conversations: an episode copies it at its first tool call
    "tau2": [{"domains": ["retail"], "dev_size": 4, "max_messages": 2, "tool_docs": "signatures", "demo_slip": 0.5}],
    "textworld": [{"max_steps": 6, "quest_lengths": [1, 3], "demo_slip": 0.5, "dev_size": 2},
                  # families (SkillRise's chains): solver and curator, the curate variant; 12 two-game families
                  {"families": True, "quest_lengths": [1, 2], "max_steps": 5, "demo_slip": 0.5, "dev_size": 2, "invalid_penalty": 0.5}],
    # one JVM per live episode, ~0.1 s per command: two short task types, two commands per episode
    "scienceworld": [{"task_names": ["lifespan-shortest-lived", "find-plant"], "max_steps": 2, "dev_size": 2, "demo_slip": 0.5}],
    # hand-written rows in GSM8K's and MATH's published layouts (envs/benchmarks/paper_math/data.py)
    "paper_math": [{"path": sample_data(), "dev_size": 4}],
    "paper_math_team": [{"path": sample_data(), "train": ["math"], "heldout": ["math500", "aime24"], "dev_size": 4}],
    "service_desk": [{"delays": [0, 2, 4]}, {"delays": [8], "slack": 0, "demo_trap": 0.9, "demo_repeat": 0.9}],
    "braid": [{}, {"demo_error": 1.0}],
    # the simulated shell (the real sandbox runs each command in bubblewrap, ~30 ms: its hostile commands
    # are tested one by one in test_terminal.py)
    "terminal": [{"backend": "sim"}, {"backend": "sim", "max_turns": 4, "demo_loop": 1.0, "demo_shortcut": 0.5}],
    "skill_families": [{}, {"order_length": 3, "min_plan": 1, "distractors": 2, "max_misses": 0, "demo_slip": 0.5}],
}
# hostile actions per setting beyond the every-string-at-every-turn pass (humaneval runs each action
# in the real sandbox, ~50 ms: its hostile programs are tested one by one in test_sandbox/test_humaneval)
MIXTURE_BUDGET: dict[str, int] = {"humaneval": 0, "tau2": 80, "scienceworld": 40}
# tasks given every hostile string at every turn (default 2): one for the simulators whose episodes cost
# ~0.1-0.3 s each (a JVM command, a database copy); the mixtures above still draw from every task
FULL_PASS_TASKS: dict[str, int] = {"tau2": 1, "scienceworld": 1}

# The most turns an episode of `task` may take (chain_tasks: busy refusals do not count against its
# call budget but never come twice in a row).
TURN_CAPS: dict[str, Callable[[Environment, dict[str, Any]], int]] = {
    "arith": lambda env, task: len(task["steps"]),
    "chain_tasks": lambda env, task: 2 * (len(task_steps(task)) + env.cfg.slack),  # type: ignore[attr-defined]
    "toolplan": lambda env, task: len(task["queries"]) + 2,
    "toolhops": lambda env, task: len(task["attrs"]) + env.cfg.extra_workers + 2,  # type: ignore[attr-defined]
    "thinker_solver": lambda env, task: 3,
    "voting": lambda env, task: 3,
    "reasoning_gym": lambda env, task: 1,
    "humaneval": lambda env, task: 1,
    "bfcl": lambda env, task: len(task["question"]) * (env.cfg.max_steps_per_turn + 1),  # type: ignore[attr-defined]
    "tau2": lambda env, task: 2 * env.cfg.max_messages,  # type: ignore[attr-defined]
    "textworld": lambda env, task: env.cfg.max_steps,  # type: ignore[attr-defined]
    "scienceworld": lambda env, task: env.cfg.max_steps,  # type: ignore[attr-defined]
    "paper_math": lambda env, task: 1,
    "paper_math_team": lambda env, task: 3,
    "service_desk": lambda env, task: (2 if task["intent"] == "human" else 4 + task["delay"]) + env.cfg.slack,  # type: ignore[attr-defined]
    "braid": lambda env, task: len(task["nodes"]),
    "terminal": lambda env, task: env.cfg.max_turns,  # type: ignore[attr-defined]
    "skill_families": lambda env, task: task["plan"] + env.cfg.max_misses,  # type: ignore[attr-defined]
}


def fake_calls(rng: random.Random) -> list[str]:
    """Near-misses in every environment's own syntax (answers, messages, tool calls, plans)."""
    number = rng.choice(["0", "7", "-3", "+5", "007", "9" * 18, "9" * 19, HUGE, "-" + HUGE, "١٦", "1_000", "𝟏", "²"])
    letter = rng.choice(["F", "A", "Z", "f", "É", ""])
    word = rng.choice([*ITEMS, *NAMES, *DAYS, *ATTRIBUTES, *TOOLS, "x", "", HUGE])
    return [
        f"#{number}", f" #{number}", f"# {number} ", f"{number}", f"{letter}={number}", f" {letter} = {number}\n",
        f"1+2=3 #{number}", f"#{number}#{number}", f"add {word} {number}", f"add {word} {number} {number}",
        f"send {number} {number}", f"book {word} {number}", f"find {word}", f"remove {word}", "pay", "done",
        f"done {number}", f"pay{number}", f" {word}", " " + " ".join(rng.choices([*ATTRIBUTES, word], k=rng.randint(0, 7))),
        " " + " ".join(rng.choices([*string.ascii_uppercase, "?", number], k=rng.randint(0, 7))),
    ]


HOSTILE = [
    "", " ", "\n", "\t \r\n", ODD_SPACE, "\x00", "\x00" * 100, CONTROL, "\x1b[31m#1\x1b[0m", "\ud800", "\ufffd",
    HUGE, "#" + HUGE, " #-" + HUGE, "#" + "9" * 100_000, "#" * 100_000, "=" * 100_000, " " * 100_000, "a " * 50_000,
    "1 " * 50_000, "#1 " * 30_000, "add tea " + HUGE, "send " + HUGE + " " + HUGE, "book mon " + HUGE,
    "add tea ٣", "add\u3000tea\u30002", "#١٦", "١٦", "F=١", "#𝟏𝟔", " census\x00", "pop\u00a0area", "done\x00",
    UNICODE_DIGITS, "#" + UNICODE_DIGITS, "A=" + HUGE, " " + HUGE, "-" * 10_000 + "1",
]


def random_text(rng: random.Random) -> str:
    alphabet = rng.choice([string.printable, string.digits + " #=-+", CONTROL + ODD_SPACE, UNICODE_DIGITS + "# ",
                           string.ascii_lowercase + " 0123456789", string.printable + UNICODE_DIGITS + ODD_SPACE])
    n = rng.choice([0, 1, 2, 5, 20, 80, 300]) if rng.random() < 0.98 else 100_000
    return "".join(rng.choices(alphabet, k=n))


def check_result(env: Environment, r: Any) -> None:
    assert isinstance(r, StepResult)
    assert isinstance(r.reward, float) and math.isfinite(r.reward), r.reward
    assert isinstance(r.success, bool)
    assert isinstance(r.events, list) and isinstance(r.info, dict)
    for e in r.events:
        assert isinstance(e, Event) and e.kind in EVENT_KINDS and isinstance(e.turn, int) and isinstance(e.data, dict)
        json.dumps(e.data)
    json.dumps(r.info)  # records are JSON
    if r.next is not None:
        assert r.next.role in env.roles and isinstance(r.next.text, str) and isinstance(r.next.new_context, bool)


def play(env: Environment, task: dict[str, Any], variant: str, seed: int, choose: Callable[[int], str | None],
         roles: set[str]) -> int:
    """One episode; `choose(turn)` gives the action (None: the demonstrator's). Returns the hostile actions played
    (and adds the roles that played one to `roles`)."""
    ep = env.new_episode(task, random.Random(seed), variant)
    obs = ep.start()
    turns = hostile = 0
    while obs is not None:
        assert obs.role in env.roles
        expert = ep.expert_action()  # the demonstrator reads state hostile turns left behind: it must not raise
        assert isinstance(expert, str)
        action = choose(turns)
        if action is not None:
            hostile += 1
            roles.add(obs.role)
        r = ep.step(expert if action is None else action)
        check_result(env, r)
        obs = r.next
        turns += 1
        assert turns <= TURN_CAPS[env.name](env, task), f"{env.name} ran past its turn cap"
    return hostile


def environments() -> list[Any]:
    return [pytest.param(cls(cls.config_class(train_size=24, heldout_size=6, demo_size=0, **setting)), id=f"{name}-{i}")
            for name, cls in ENVS.items() for i, setting in enumerate(SETTINGS.get(name, [{}]))]


def test_every_environment_is_fuzzed():
    assert set(ENVS) <= set(SETTINGS) and set(ENVS) <= set(TURN_CAPS)


@pytest.mark.parametrize("env", environments())
def test_step_never_raises_on_hostile_text(env, request):
    rng = random.Random(request.node.name)
    tasks = [json.loads(row["task"]) for row in env.task_set()["train"]]
    hostile, roles = 0, set()
    for variant in env.variants():  # every hostile string at every turn, the demonstrator elsewhere
        for task in tasks[:FULL_PASS_TASKS.get(env.name, 2)]:
            for turn in range(TURN_CAPS[env.name](env, task)):
                for text in [*HOSTILE, *fake_calls(rng)]:
                    at_turn = lambda t, turn=turn, text=text: text if t == turn else None  # noqa: E731
                    hostile += play(env, task, variant, rng.randrange(10**6), at_turn, roles)

    def choose(t: int) -> str | None:
        u = rng.random()
        return None if u < 0.3 else rng.choice(fake_calls(rng)) if u < 0.6 else random_text(rng) if u < 0.9 else rng.choice(HOSTILE)

    while hostile < MIXTURE_BUDGET.get(env.name, 3000):  # random mixtures: each turn hostile, random or the demonstrator's
        hostile += play(env, rng.choice(tasks), rng.choice(env.variants()), rng.randrange(10**6), choose, roles)
    assert roles == set(env.roles)


def test_parse_int_reads_only_bounded_ascii_integers():
    assert [parse_int(s) for s in ("0", "-42", "+7", "007", "9" * 18)] == [0, -42, 7, 7, 10**18 - 1]
    for bad in ("", "-", "+", " 1", "1 ", "1\n", "1_000", "١٦", "𝟏", "²", "9" * 19, HUGE, "1.0", "0x1", "--1"):
        assert parse_int(bad) is None, bad
    assert parse_int("12345", max_digits=4) is None and parse_int("1234", max_digits=4) == 1234
