"""Provenance events read from the text of an episode (#46): the machinery `bfcl` and `tau2` share. Each
environment's own module states its rules in full, with a worked example (what its user input, tool results
and failed actions are): `envs/benchmarks/bfcl/provenance.py`, `envs/benchmarks/tau2/provenance.py`.

**Values** (`values`): the literal argument values of an action's calls: strings and finite numbers, nested
ones included (in lists, tuples, sets and dict values; dict keys are the agent's vocabulary, not data;
booleans and None are left out); strings without a letter or a digit are left out.

**Tokens and matching** (`tokens`, `Provenance.origin`): the tokens of a text are its maximal runs of
letters, digits, `_`, `.` and `-`, a trailing `.` removed, that hold a letter or a digit. A string that is
one token appears in a text when it is one of the text's tokens; another string, when it is a substring of
the text; a number, when it equals a token that is a numeral (36, 36.0 and `36.00` are equal). Case counts.

**Origins and events** (`Provenance`): the texts the agent saw and wrote, in order, each with its origin
(`USER`, -1: the user's input; i: the tool results of action i; None: an action, the agent's own); a value's
origin is that of the first text it appears in. An action j that did not fail and writes values gets one
`Event("provenance", j, {"source": s, "kind": "input" | "success_utilization"})` per distinct origin s of
its values; a failed action right after a failed action (the agent's previous action, whatever the user
said between) gets `failed_utilization` from it, and nothing else.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from common.episode import Event

USER = -1  # the provenance source of the user's input (IAPO graph.py's direct user input)
_TOKEN = re.compile(r"[\w.\-]+")
_NUMERAL = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


def tokens(text: str) -> list[str]:
    """The tokens of `text`, in order (see the module docstring).

    >>> tokens("Move 'final_report.pdf' to /alex/temp. -5, '..' x-1")
    ['Move', 'final_report.pdf', 'to', 'alex', 'temp', '-5', 'x-1']
    """
    return [t for t in (t.rstrip(".") for t in _TOKEN.findall(text)) if any(c.isalnum() for c in t)]


def values(value: Any) -> list[str | int | float]:
    """The values in one argument value, in order (see the module docstring).

    >>> values(["a b", 3, 2.5, True, None, "..", {"priority": 2}, ("x",), float("nan")])
    ['a b', 3, 2.5, 2, 'x']
    """
    if isinstance(value, str):
        return [value] if any(c.isalnum() for c in value) else []
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
        return [value]
    if isinstance(value, dict):
        return values(list(value.values()))
    if isinstance(value, (list, tuple, set, frozenset)):
        return [v for item in value for v in values(item)]
    return []  # complex numbers, bytes, ...


def _number(x: int | float) -> Decimal:
    return Decimal(x) if isinstance(x, int) else Decimal(repr(x))


class Provenance:
    """One episode's texts in order of play, the origins of their values, and the events of each action."""

    def __init__(self, first_observation: str | None = None):
        self.texts: list[tuple[int | None, str]] = []  # (origin, text), in order
        self.token_origin: dict[str, int | None] = {}
        self.number_origin: dict[Decimal, int | None] = {}
        self.failed_turn: int | None = None  # the previous action's turn when it failed
        if first_observation is not None:
            self.see(first_observation, USER)

    def see(self, text: str, origin: int | None) -> None:
        """A text shown or written next: the user's (USER), turn i's tool results (i), an action (None)."""
        self.texts.append((origin, text))
        for t in tokens(text):
            self.token_origin.setdefault(t, origin)
            if _NUMERAL.fullmatch(t):
                self.number_origin.setdefault(Decimal(t), origin)

    def origin(self, value: str | int | float) -> int | None:
        """The origin of `value` (None: the agent's own, or it appeared nowhere yet)."""
        if not isinstance(value, str):
            return self.number_origin.get(_number(value))
        if tokens(value) == [value]:
            return self.token_origin.get(value)
        return next((o for o, text in self.texts if value in text), None)

    def step(self, turn: int, action: str, kwargs: list[dict[str, Any]], failed: bool) -> list[Event]:
        """The events of the agent's action `turn`, its calls' keyword arguments `kwargs` (none for a text
        reply or an invalid action), `failed` (the environment's rule); then the action's text is the
        agent's."""
        events: list[Event] = []
        if failed and self.failed_turn is not None:
            events.append(Event("provenance", turn, {"source": self.failed_turn,
                                                     "kind": "failed_utilization"}))
        elif kwargs and not failed:
            written = [v for kw in kwargs for v in values(list(kw.values()))]
            sources = sorted({s for v in written if (s := self.origin(v)) is not None})
            events += [Event("provenance", turn, {"source": s, "kind": "input" if s == USER
                                                  else "success_utilization"}) for s in sources]
        self.see(action, None)
        self.failed_turn = turn if failed else None
        return events
