"""Whom a sandbox runs as, and ending every process it left.

As root, bwrap itself runs as a fresh unprivileged uid (one in `UID_RANGE`, different per run): the
kernel never enforces `RLIMIT_NPROC` on processes whose real uid is root, even inside a user
namespace, so a fork bomb is only contained when the real uid is not 0. `reserve_uid` holds a uid for
one run; `kill_sandbox` ends a run by killing the processes left in the sandbox's pid namespace.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import time

UID_RANGE = (1_000_000, 2_000_000)  # real uids bwrap runs as when we are root (no account needs to exist)


def reserve_uid(stack: contextlib.ExitStack, attempts: int = 64) -> int:
    """A uid of `UID_RANGE` for this run alone, held until `stack` closes: bound as an abstract unix
    socket name (two runs in one network namespace, a machine's as a rule, cannot bind one name; the
    kernel frees it when its holder dies) and run by no process of the host (checked after the bind)."""
    rng = random.SystemRandom()
    for _ in range(attempts):
        uid = rng.randrange(*UID_RANGE)
        holder = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            holder.bind(f"\0llm-agent-rl-suite/sandbox-uid/{uid}")
        except OSError:  # another run holds it
            holder.close()
            continue
        if processes_of(uid):  # a process of the host runs as it: neither ours to share nor to kill
            holder.close()
            continue
        stack.callback(holder.close)
        return uid
    raise RuntimeError(f"no free sandbox uid in {attempts} draws from UID_RANGE {UID_RANGE}: every one drawn "
                       "is held by another run or used by a process; widen envs.api.sandbox.uids.UID_RANGE")


def kill_sandbox(uid: int, namespace: int | None, deadline_s: float = 2.0) -> None:
    """Kill every live process of the sandbox whose pid namespace is `namespace`, until none is left.
    Only processes of `uid` are candidates; without `namespace` (bwrap never reported it), those in
    another pid namespace than ours: only for a uid reserved by `reserve_uid`, unused when the run started.

    bwrap's processes can outlive the bwrap we waited for by a few milliseconds (its pid-1 reaper
    reports the exit status, then tears the pid namespace down); this makes "the run is over" mean
    that no process of the sandbox is running (zombies waiting for the host's init to reap them hold
    no resources).
    """
    own = pid_namespace("self")
    end = time.monotonic() + deadline_s
    while True:
        live = [pid for pid, state, ns in processes_of(uid) if state != "Z" and ns is not None
                and (ns == namespace if namespace is not None else ns != own)]
        if not live or time.monotonic() > end:
            return
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def pid_namespace(pid: int | str) -> int | None:
    """The inode number of a process's pid namespace (`/proc/<pid>/ns/pid`), or None when unreadable."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return int(link[link.index("[") + 1: -1]) if "[" in link else None


def processes_of(uid: int) -> list[tuple[int, str, int | None]]:
    """(pid, state letter, pid namespace) of the host's processes whose real uid is `uid`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/status") as f:
                status = f.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        if int(fields.get("Uid", "-1 ").split()[0]) == uid:
            found.append((int(entry.name), fields.get("State", "?").split()[0], pid_namespace(entry.name)))
    return found
