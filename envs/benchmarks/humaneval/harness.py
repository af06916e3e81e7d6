"""The two processes of one HumanEval test run (`envs/benchmarks/humaneval/env.py`), each in a sandbox of
its own.

This file is copied into both sandboxes as `harness.py` and run by the system Python (standard
library only, nothing of the suite imported):

- `python harness.py serve REQUESTS REPLIES ENTRY` (the **completion's** sandbox, which holds only
  this file and `solution.py`, the prompt + the completion): runs `solution.py` as `__main__`, then
  answers calls of its function `ENTRY`: each request line on descriptor REQUESTS is the arguments,
  each reply line on REPLIES the return value (or the name of the exception raised).
- `python harness.py test REQUESTS REPLIES ENTRY` (the **tests'** sandbox: this file, `solution.py`
  (compiled, never run), `prompt.py` and `test.py`): compiles `solution.py` (a syntax error is a
  verdict of its own), runs the prompt (its helper functions: `poly`, `encode_cyclic`) and the tests
  with `ENTRY` bound to a proxy that sends each call to the completion's process, calls
  `check(ENTRY)` as HumanEval's harness does, and writes one verdict line (`{"verdict": "pass"}`)
  on the descriptor that was its stdout. Whatever the tests print goes to stderr.

Values cross by value, as JSON (`encode` / `decode`): None, bool, int, float (NaN and infinities
included), complex, str, bytes, list, tuple, dict, set, frozenset (a subclass as its base type:
a `Counter` arrives as a dict), range, and an iterator as an iterator over its items. Anything else
(an object that equals everything, a Fraction) is an exception in the tests: the call fails.
Arguments arrive as copies: a completion that mutates its arguments changes only its own copy.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

MAX_REPLY_BYTES = 8 << 20  # a longer reply line is a failed call (a completion flooding the tests)
_TAGS = ("tuple", "set", "frozenset", "dict", "bytes", "complex", "int", "range", "iter")


def encode(value: Any) -> Any:
    """A JSON-ready tree of a plain value (raises TypeError on anything else)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        number = int.__int__(value)
        return number if -(2**63) <= number < 2**63 else {"int": hex(number)}  # hex: no digit limit, linear
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, list):
        return [encode(v) for v in list.__iter__(value)]
    if isinstance(value, tuple):
        return {"tuple": [encode(v) for v in tuple.__iter__(value)]}
    if isinstance(value, dict):
        return {"dict": [[encode(k), encode(v)] for k, v in dict.items(value)]}
    if isinstance(value, set):
        return {"set": [encode(v) for v in set.__iter__(value)]}
    if isinstance(value, frozenset):
        return {"frozenset": [encode(v) for v in frozenset.__iter__(value)]}
    if isinstance(value, (bytes, bytearray)):
        return {"bytes": bytes(value).hex()}
    if isinstance(value, complex):
        return {"complex": [complex.__complex__(value).real, complex.__complex__(value).imag]}
    if isinstance(value, range):
        return {"range": [value.start, value.stop, value.step]}
    if hasattr(type(value), "__next__") and hasattr(type(value), "__iter__"):
        return {"iter": [encode(v) for v in value]}
    raise TypeError(f"a {type(value).__name__} cannot cross to the tests (plain values only)")


def decode(tree: Any) -> Any:
    """The value `encode` made `tree` from; ValueError (or TypeError: an unhashable key) on anything else."""
    if tree is None or isinstance(tree, (bool, int, float, str)):
        return tree
    if isinstance(tree, list):
        return [decode(v) for v in tree]
    if not isinstance(tree, dict) or len(tree) != 1:
        raise ValueError("not an encoded value")
    ((tag, body),) = tree.items()
    if tag not in _TAGS:
        raise ValueError(f"unknown tag {tag!r}")
    if tag == "bytes":
        return bytes.fromhex(_of(body, str))
    if tag == "int":
        return int(_of(body, str), 16)
    if tag == "dict":
        pairs = [_of(pair, list) for pair in _of(body, list)]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError("a dict is a list of [key, value] pairs")
        return {decode(k): decode(v) for k, v in pairs}
    items = [decode(v) for v in _of(body, list)]
    if tag == "complex":
        return complex(*[_of(v, float) for v in items])
    if tag == "range":
        return range(*[_of(v, int) for v in items])
    if tag == "tuple":
        return tuple(items)
    if tag == "set":
        return set(items)
    if tag == "frozenset":
        return frozenset(items)
    return iter(items)


def _of(value: Any, kind: type) -> Any:
    """`value` when it is a `kind` (a float may be an int), else ValueError."""
    if isinstance(value, kind) and not isinstance(value, bool) or (kind is float and type(value) is int):
        return value
    raise ValueError(f"expected a {kind.__name__}")


def serve(requests_fd: int, replies_fd: int, entry_point: str) -> None:
    """The completion's side: run `solution.py`, then answer calls of `entry_point` until the tests hang
    up."""
    requests, replies = os.fdopen(requests_fd, "rb"), os.fdopen(replies_fd, "wb")
    with open("solution.py", encoding="utf-8") as f:
        code = compile(f.read(), "solution.py", "exec")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(code, namespace)
    function = namespace[entry_point]
    for line in requests:
        args, kwargs = decode(json.loads(line))
        try:
            reply: dict[str, Any] = {"value": encode(function(*args, **kwargs))}
        except Exception as e:  # the tests see an exception; SystemExit and the like end this process
            reply = {"raised": type(e).__name__}
        replies.write(json.dumps(reply).encode() + b"\n")
        replies.flush()


class CandidateError(Exception):
    """The completion raised, sent something that is not a value, or is gone."""


def test(requests_fd: int, replies_fd: int, entry_point: str) -> str:
    """The tests' side: the verdict, `pass`, `fail` or `syntax` (see the module's docstring)."""
    try:
        with open("solution.py", encoding="utf-8") as f:
            compile(f.read(), "solution.py", "exec")
    except (SyntaxError, ValueError, UnicodeDecodeError, MemoryError, RecursionError):
        return "syntax"
    requests, replies = os.fdopen(requests_fd, "wb"), os.fdopen(replies_fd, "rb")

    def candidate(*args: Any, **kwargs: Any) -> Any:
        try:
            requests.write(json.dumps([encode(list(args)), encode(kwargs)]).encode() + b"\n")
            requests.flush()
        except OSError as e:
            raise CandidateError("the completion's process is gone") from e
        line = replies.readline(MAX_REPLY_BYTES)
        if not line.endswith(b"\n"):
            raise CandidateError("the completion's process is gone, or its reply is too long")
        reply = json.loads(line)
        if isinstance(reply, dict) and "value" in reply:
            return decode(reply["value"])
        raised = reply.get("raised") if isinstance(reply, dict) else reply
        raise CandidateError(f"the completion raised {str(raised)[:100]}")

    namespace: dict[str, Any] = {"__name__": "__main__"}
    for name in ("prompt.py", "test.py"):
        with open(name, encoding="utf-8") as f:
            exec(compile(f.read(), name, "exec"), namespace)
        namespace[entry_point] = candidate  # a test may call the function by its name (HumanEval/33)
    try:
        namespace["check"](candidate)
    except Exception as e:
        print(f"check failed: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        return "fail"
    return "pass"


def main(argv: list[str]) -> int:
    role, requests_fd, replies_fd, entry_point = argv[1], int(argv[2]), int(argv[3]), argv[4]
    if role == "serve":
        serve(requests_fd, replies_fd, entry_point)
        return 0
    verdict = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # the tests' own output goes to stderr: only this process writes the verdict
    sys.stdout = sys.stderr
    outcome = test(requests_fd, replies_fd, entry_point)
    verdict.write(json.dumps({"verdict": outcome}) + "\n")
    verdict.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
