"""Where the terminal's commands run: `SandboxShell` (each command in a fresh bubblewrap sandbox,
`envs.api.sandbox.run_shell`, results optionally memoized) or `SimShell` (an in-process interpreter
of the task vocabulary, for fast unit and fuzz tests and River's second setting, whose claims are about
the reward, not the sandbox). Both give an `Outcome`: the output, whether
the command failed and why, and the task directory after it."""

from __future__ import annotations

import hashlib
import json
import re
import sys
from collections import OrderedDict
from dataclasses import dataclass

from envs.api import sandbox


@dataclass
class Outcome:
    """One command's result: its output, whether it failed and why, and the task directory after it."""

    output: str
    failed: str | None  # None: it worked; else a short reason ("exit 1", "time limit", ...)
    files: dict[str, str]


def _why_failed(r: sandbox.Result) -> str | None:
    if r.timed_out:
        return "time limit"
    if r.output_exceeded or r.returncode == 128 + 25:
        return "output limit"
    if r.returncode == 128 + 24:
        return "cpu limit"
    if "Cannot fork" in r.stderr or "Resource temporarily unavailable" in r.stderr:
        return "process limit"  # a fork bomb: the shell itself may still exit 0
    if "Cannot allocate memory" in r.stderr or "MemoryError" in r.stderr:
        return "memory limit"
    if r.returncode != 0:
        return f"exit {r.returncode}"
    return None


def outcome_bytes(outcome: Outcome) -> int:
    """The memory an outcome holds: its text and its files' names and contents (`sys.getsizeof`, O(1) per
    string), counted as if no other outcome shared them (the cache's bound is an upper bound)."""
    sizes = sum(sys.getsizeof(k) + sys.getsizeof(v) for k, v in outcome.files.items())
    return 256 + sys.getsizeof(outcome.output) + sizes


class SandboxShell:
    """Commands in the real sandbox (`envs.api.sandbox.run_shell`), results optionally memoized (at most
    `cache_bytes` of them, least recently used dropped first: an entry holds a whole task directory)."""

    def __init__(self, limits: sandbox.Limits, cache: bool, cache_bytes: int = 256 << 20):
        self.limits, self.use_cache, self.cache_bytes = limits, cache, cache_bytes
        self.cache: OrderedDict[str, tuple[Outcome, float, int]] = OrderedDict()
        self.cached_bytes = 0

    def run(self, command: str, files: dict[str, str]) -> tuple[Outcome, float]:
        """The outcome and the sandbox seconds it cost (0 when replayed from the cache)."""
        key = hashlib.sha256(json.dumps([command, sorted(files.items())]).encode()).hexdigest()
        if self.use_cache and key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key][0], 0.0
        shell = sandbox.run_shell(command, files, self.limits)
        r = shell.result
        if shell.files_exceeded:
            failed: str | None = f"file limit (at most {self.limits.task_files} files)"
        else:
            failed = "sandbox wrapper killed" if shell.files is None and not r.timed_out else _why_failed(r)
        after = (files if shell.files is None
                 else {k: v.decode(errors="replace") for k, v in shell.files.items()})
        output = r.stdout + (r.stderr if failed else "")
        outcome = Outcome(output, failed, after)
        if self.use_cache:
            self._remember(key, outcome, r.wall_s)
        return outcome, r.wall_s

    def _remember(self, key: str, outcome: Outcome, seconds: float) -> None:
        size = outcome_bytes(outcome)
        if size > self.cache_bytes:
            return
        self.cache[key] = (outcome, seconds, size)
        self.cached_bytes += size
        while self.cached_bytes > self.cache_bytes:
            _, (_, _, dropped) = self.cache.popitem(last=False)
            self.cached_bytes -= dropped


class SimShell:
    """An in-process interpreter of the task vocabulary (the same outputs as `sh` on it; anything else is
    a failed action, `exit 127`): unit tests and River's second setting (`terminal-planted`)."""

    def run(self, command: str, files: dict[str, str]) -> tuple[Outcome, float]:
        files = dict(files)
        m = re.fullmatch(r"\s*(.*?)\s*(?:(>>|>)\s*(\S+))?\s*", command)
        assert m is not None
        body, redirect, target = m.group(1), m.group(2), m.group(3)
        words = body.split()
        out, failed = "", None
        verb, args = (words[0], words[1:]) if words else ("", [])
        if verb == "cat" and args:
            missing = [f for f in args if f not in files]
            out = "".join(files.get(f, "") for f in args)
            failed = "exit 1" if missing else None
            out += "".join(f"cat: {f}: No such file or directory\n" for f in missing) if missing else ""
        elif verb == "ls" and not args:
            out = "".join(f"{f}\n" for f in sorted(files))
        elif verb == "grep" and len(args) == 2:
            if args[1] not in files:
                out, failed = f"grep: {args[1]}: No such file or directory\n", "exit 2"
            else:
                out = "".join(line + "\n" for line in files[args[1]].splitlines() if args[0] in line)
                failed = None if out else "exit 1"
        elif verb == "wc" and len(args) == 2 and args[0] == "-l":
            if args[1] not in files:
                out, failed = f"wc: {args[1]}: No such file or directory\n", "exit 1"
            else:
                out = f"{files[args[1]].count(chr(10))} {args[1]}\n"
        elif verb == "echo":
            out = " ".join(args) + "\n"
        elif verb == "cp" and len(args) == 2:
            if args[0] not in files:
                out, failed = f"cp: cannot stat '{args[0]}': No such file or directory\n", "exit 1"
            else:
                files[args[1]] = files[args[0]]
        elif verb == "rm" and args:
            for f in args:
                files.pop(f, None)
        else:
            return Outcome(f"sim: unsupported command {command[:40]!r}", "exit 127", files), 0.0
        if redirect and not failed:
            files[target] = (files.get(target, "") if redirect == ">>" else "") + out
            out = ""
        return Outcome(out, failed, files), 0.0
