"""BFCL's call syntax, decoded by this environment (not by BFCL's `ast_parse`, which `eval`s arithmetic
and lambdas in model text): `parse_calls` reads an action into `Call`s, refusing what must not run (the
bounds below keep a call from hanging the process in one C operation; env.py's docstring says why).
"""

from __future__ import annotations

import ast
import inspect
from dataclasses import dataclass
from typing import Any

MAX_ACTION_CHARS = 20_000  # longer actions are not parsed (an invalid action ending the turn)
END_TURN = "[]"
# (function, argument) -> the largest absolute value run: past it the call would hang or exhaust the process
GUARDS: dict[tuple[str, str], int] = {("power", "exponent"): 1000, ("logarithm", "precision"): 1000,
                                      ("square_root", "precision"): 1000,
                                      ("round_number", "decimal_places"): 1000}
MAX_MAGNITUDE = 10**15  # any number in any call's arguments (the ground truth's largest: 987654)


def _literal(node: ast.expr) -> Any:
    """A keyword argument's value: a literal, or a bare name read as its string (BFCL's decoder does both)."""
    if isinstance(node, ast.Name):
        return node.id
    return ast.literal_eval(node)


def _numbers(value: Any) -> list[int | float | complex]:
    """Every number in a literal value, nested ones and dict keys included (bools are not numbers here)."""
    if isinstance(value, bool):
        return []
    if isinstance(value, (int, float, complex)):
        return [value]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [n for v in value for n in _numbers(v)]
    if isinstance(value, dict):
        return [n for k, v in value.items() for n in (*_numbers(k), *_numbers(v))]
    return []


def _too_big(x: int | float | complex, bound: int) -> bool:
    """|x| > bound, read without converting a huge int to float (NaN is not too big: it fails fast)."""
    if isinstance(x, int):
        return x > bound or x < -bound
    return abs(x) > bound


@dataclass
class Call:
    """One decoded call: its name, keyword arguments, and why it may not run (None: it runs)."""

    name: str
    kwargs: dict[str, Any]
    refused: str | None = None

    def text(self) -> str:
        """The call as BFCL's executable string (`name(k=repr(v), ...)`), what its checker replays."""
        return f"{self.name}({', '.join(f'{k}={v!r}' for k, v in self.kwargs.items())})"


def parse_calls(action: str) -> tuple[list[Call], str | None]:
    """The calls an action makes, else ([], why) for malformed call syntax or ([], None) for a text
    reply / `[]`.

    >>> [c.text() for c in parse_calls("[cd(folder='docs'), ls(a=True)]")[0]]
    ["cd(folder='docs')", 'ls(a=True)']
    >>> parse_calls("All done."), parse_calls("[]"), parse_calls("cd(folder=")[1]
    (([], None), ([], None), 'not a Python list of calls (SyntaxError)')
    """
    text = action.strip("`\n ")
    if "(" not in text:
        return [], None  # a text reply or an empty list: the turn ends
    if len(text) > MAX_ACTION_CHARS:
        return [], f"longer than {MAX_ACTION_CHARS} characters"
    if not text.startswith("["):
        text = "[" + text
    if not text.endswith("]"):
        text = text + "]"
    try:
        body = ast.parse(text.strip().strip("'"), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as e:
        return [], f"not a Python list of calls ({type(e).__name__})"
    elts = [body] if isinstance(body, ast.Call) else getattr(body, "elts", None)
    if elts is None or not all(isinstance(e, ast.Call) for e in elts):
        return [], "not a list of function calls"
    calls = []
    for node in elts:
        assert isinstance(node, ast.Call)
        name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)[:100]
        kwargs: dict[str, Any] = {}
        refused = None if isinstance(node.func, ast.Name) else f"{name} is not a function name"
        for kw in node.keywords:
            if kw.arg is None:
                refused = refused or "**arguments are not accepted: name every argument"
                continue
            try:
                kwargs[kw.arg] = _literal(kw.value)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                refused = refused or f"argument {kw.arg} is not a literal value"
        for (fn, arg), bound in GUARDS.items():
            if name == fn and any(_too_big(n, bound) for n in _numbers(kwargs.get(arg))):
                refused = refused or f"{arg} out of the range this environment runs (|{arg}| <= {bound})"
        for arg, value in kwargs.items():
            if any(_too_big(n, MAX_MAGNITUDE) for n in _numbers(value)):
                refused = refused or f"{arg} out of the range this environment runs (|numbers| <= 10**15)"
        calls.append(Call(name, kwargs, refused))
    return calls, None


def keyword_call(call: str, bound: dict[str, Any]) -> str:
    """A ground-truth call with its positional arguments named (`sort('a')` -> `sort(file_name='a')`)."""
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name), call
    names = [p for p in inspect.signature(bound[node.func.id]).parameters]
    kwargs = {names[i]: _literal(a) for i, a in enumerate(node.args)}
    kwargs.update({kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg})
    return Call(node.func.id, kwargs).text()
