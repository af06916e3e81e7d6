"""Braid's values and operations (`env.py` tells the whole story): the three value types, the operations
with their input and output contracts (`OPS`), the domains that draw them (`DOMAINS`), plausible wrong
values (`perturb`) and values as the episode shows and reads them (`render`, `read`)."""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from envs.api.base import parse_int

Value = int | list[int] | str | None  # None: a malformed value
MAX_INT = 10**6
MAX_LIST = 12
MAX_STR = 16
VOWELS = frozenset("aeiou")


def is_type(value: Value, kind: str) -> bool:
    """Whether `value` is a well-formed value of type `kind` (int | list | str)."""
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_INT
    if kind == "list":
        return (isinstance(value, list) and len(value) <= MAX_LIST
                and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x <= 99 for x in value))
    if kind == "str":
        return (isinstance(value, str) and 1 <= len(value) <= MAX_STR
                and all(c in string.ascii_lowercase for c in value))
    raise ValueError(f"unknown value type {kind!r}; types: int, list, str")


@dataclass(frozen=True)
class Op:
    """One typed atomic operation: `fn(inputs, k)` and its contracts."""

    name: str
    category: str  # list | num | text | cipher: what an agent card declares
    inputs: tuple[str, ...]  # input types
    output: str  # output type
    fn: Callable[[Sequence[Any], int], Any]
    pre: Callable[[Sequence[Any], int], bool] = lambda xs, k: True  # beyond the input types
    post: Callable[[Sequence[Any], int, Any], bool] = lambda xs, k, y: True  # beyond the output type
    params: tuple[int, ...] = ()  # the values of k it is drawn with (empty: no parameter)


def _shift(s: str, k: int) -> str:
    return "".join(chr((ord(c) - 97 + k) % 26 + 97) for c in s)


def _dedup(s: str) -> str:
    seen: list[str] = []
    for c in s:
        if c not in seen:
            seen.append(c)
    return "".join(seen)


OPS: dict[str, Op] = {op.name: op for op in [
    Op("sort", "list", ("list",), "list", lambda xs, k: sorted(xs[0]),
       post=lambda xs, k, y: len(y) == len(xs[0]) and y == sorted(y)),
    Op("rev", "list", ("list",), "list", lambda xs, k: xs[0][::-1],
       post=lambda xs, k, y: len(y) == len(xs[0])),
    Op("evens", "list", ("list",), "list", lambda xs, k: [x for x in xs[0] if x % 2 == 0],
       post=lambda xs, k, y: len(y) <= len(xs[0]) and all(x % 2 == 0 for x in y)),
    Op("sum", "list", ("list",), "int", lambda xs, k: sum(xs[0]), post=lambda xs, k, y: y <= 99 * len(xs[0])),
    Op("max", "list", ("list",), "int", lambda xs, k: max(xs[0]), pre=lambda xs, k: len(xs[0]) > 0,
       post=lambda xs, k, y: y in xs[0]),
    Op("len", "list", ("list",), "int", lambda xs, k: len(xs[0]), post=lambda xs, k, y: y <= MAX_LIST),
    Op("concat", "list", ("list", "list"), "list", lambda xs, k: xs[0] + xs[1],
       pre=lambda xs, k: len(xs[0]) + len(xs[1]) <= MAX_LIST,
       post=lambda xs, k, y: len(y) == len(xs[0]) + len(xs[1])),
    Op("add", "num", ("int",), "int", lambda xs, k: xs[0] + k, params=(1, 2, 3, 4, 5, 6, 7, 8, 9),
       post=lambda xs, k, y: y >= k),
    Op("mul", "num", ("int",), "int", lambda xs, k: xs[0] * k, params=(2, 3),
       post=lambda xs, k, y: y % k == 0),
    Op("mod", "num", ("int",), "int", lambda xs, k: xs[0] % k, params=(3, 4, 5, 6, 7, 8, 9),
       post=lambda xs, k, y: y < k),
    Op("digits", "num", ("int",), "list", lambda xs, k: [int(c) for c in str(xs[0])],
       post=lambda xs, k, y: 0 < len(y) <= 7 and all(x <= 9 for x in y)),
    Op("plus", "num", ("int", "int"), "int", lambda xs, k: xs[0] + xs[1], post=lambda xs, k, y: y >= max(xs)),
    Op("dedup", "text", ("str",), "str", lambda xs, k: _dedup(xs[0]),
       post=lambda xs, k, y: len(y) <= len(xs[0]) and len(set(y)) == len(y)),
    Op("rev_s", "text", ("str",), "str", lambda xs, k: xs[0][::-1],
       post=lambda xs, k, y: len(y) == len(xs[0])),
    Op("vowels", "text", ("str",), "int", lambda xs, k: sum(c in VOWELS for c in xs[0]),
       post=lambda xs, k, y: y <= len(xs[0])),
    Op("join", "text", ("str", "str"), "str", lambda xs, k: xs[0] + xs[1],
       pre=lambda xs, k: len(xs[0]) + len(xs[1]) <= MAX_STR,
       post=lambda xs, k, y: len(y) == len(xs[0]) + len(xs[1])),
    Op("shift", "cipher", ("str",), "str", lambda xs, k: _shift(xs[0], k), params=(1, 2, 3, 5, 7, 11, 13),
       post=lambda xs, k, y: len(y) == len(xs[0])),
]}
CATEGORIES = ("list", "num", "text", "cipher")

# domain (= tier) -> (its name, the operations its tasks draw, the source types)
DOMAINS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("lists", ("sort", "rev", "evens", "concat", "sum", "max", "len"), ("list",)),
    ("numbers", ("add", "mul", "mod", "plus", "digits", "sum", "max"), ("int",)),
    ("words", ("dedup", "rev_s", "join", "vowels"), ("str",)),
    ("cipher", ("shift", "rev_s", "dedup", "vowels", "mod"), ("str",)),
    ("stats", ("sort", "evens", "sum", "max", "len", "add", "mod", "mul"), ("list",)),
    ("digits", ("add", "mul", "digits", "sort", "rev", "sum", "max"), ("int",)),
    ("textnum", ("vowels", "dedup", "shift", "add", "mul", "mod", "plus"), ("str",)),
    ("mixed", ("sort", "sum", "add", "mod", "digits", "shift", "vowels", "rev_s", "plus", "concat"),
     ("list", "str")),
)


def input_contract(op: str, k: int, inputs: Sequence[Value]) -> bool:
    """The operation's input contract: every input well-formed and of its type, and its precondition."""
    spec = OPS[op]
    return (len(inputs) == len(spec.inputs)
            and all(is_type(x, t) for x, t in zip(inputs, spec.inputs, strict=True))
            and bool(spec.pre(inputs, k)))


def output_contract(op: str, k: int, inputs: Sequence[Value], output: Value) -> bool:
    """The operation's output contract: the output well-formed, of its type, and its postcondition
    (checkable without the right answer). False when the inputs break the input contract."""
    spec = OPS[op]
    return (input_contract(op, k, inputs) and is_type(output, spec.output)
            and bool(spec.post(inputs, k, output)))


def apply_op(op: str, k: int, inputs: Sequence[Value]) -> Value:
    """The right output of `op` on `inputs`; None (malformed) when the input contract fails."""
    if not input_contract(op, k, inputs):
        return None
    out = OPS[op].fn(inputs, k)
    return out if is_type(out, OPS[op].output) else None


def perturb(value: Value, rng: random.Random) -> Value:
    """A plausible wrong value of the same type (an agent's silent error): one int off by 1..3 (kept
    >= 0), one list item changed or one item dropped, one letter changed. A malformed value stays
    malformed."""
    if value is None:
        return None
    if isinstance(value, int):
        return value + rng.randint(1, 3) if value < 3 or rng.random() < 0.5 else value - rng.randint(1, 3)
    if isinstance(value, list):
        if not value:
            return [rng.randint(0, 99)]
        out = list(value)
        i = rng.randrange(len(out))
        if len(out) > 1 and rng.random() < 0.3:
            del out[i]
        else:
            out[i] = (out[i] + rng.randint(1, 9)) % 100
        return out
    i = rng.randrange(len(value))
    c = rng.choice([x for x in string.ascii_lowercase if x != value[i]])
    return value[:i] + c + value[i + 1:]


# ---- values as text --------------------------------------------------------------------------
def render(value: Value) -> str:
    """A value as the episode shows it (`?` for a malformed one)."""
    if value is None:
        return "?"
    if isinstance(value, list):
        return " ".join(map(str, value)) if value else "-"
    return str(value)


def read(text: str, kind: str) -> Value:
    """A value of type `kind` from action text; None when it does not parse (never raises)."""
    text = text.strip()
    if len(text) > 80:
        return None
    if kind == "int":
        value: Value = parse_int(text, max_digits=7)
    elif kind == "list":
        items = [parse_int(x, max_digits=2) for x in text.split()] if text != "-" else []
        value = None if any(x is None for x in items) else [x for x in items if x is not None]
    else:
        value = text
    return value if is_type(value, kind) else None
