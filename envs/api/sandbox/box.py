"""Starting a sandbox and ending it (`started`, `run`), its limits (`Limits`), how a run ended (`Result`)
and whether bwrap works here (`available`): the package's docstring says what a sandbox guarantees."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from envs.api.sandbox import uids
from envs.api.sandbox.seccomp import seccomp_filter

SANDBOX_UID = 65534  # `nobody` inside the sandbox
TASK_DIR = "/task"
IO_DIR = "/io"  # run_shell: the command's captured output and exit status, read back with the task directory
INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: apt-get install -y bubblewrap)"


@dataclass(frozen=True)
class Limits:
    """What one sandboxed command may use."""

    wall_s: float = 10.0  # wall-clock seconds, enforced from outside (the whole sandbox is killed)
    cpu_s: int = 5  # CPU seconds per process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later)
    memory_mb: int = 512  # address space per process (RLIMIT_AS)
    processes: int = 8  # processes and threads of the sandbox's user, its init included (RLIMIT_NPROC)
    open_files: int = 64  # open file descriptors per process (RLIMIT_NOFILE)
    output_bytes: int = 1 << 20  # stdout, stderr and any file written, each (RLIMIT_FSIZE)
    disk_mb: int = 64  # size of the writable task directory (a tmpfs)
    # run_shell: entries the task directory may hold after a command (more: `files_exceeded`)
    task_files: int = 256

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "processes", "open_files", "output_bytes", "disk_mb",
                     "task_files"):
            if not getattr(self, name) > 0:
                raise ValueError(f"sandbox limit {name} must be > 0; got {getattr(self, name)}")


@dataclass
class Result:
    """How a sandboxed command ended."""

    returncode: int | None  # the command's exit status (128 + n: killed by signal n); None: killed on timeout
    stdout: str  # at most `Limits.output_bytes` of it, decoded with replacement
    stderr: str
    timed_out: bool  # the wall-clock limit was reached
    output_exceeded: bool  # stdout or stderr reached `Limits.output_bytes`
    wall_s: float

    @property
    def ok(self) -> bool:
        """Exited 0 within every limit."""
        return self.returncode == 0 and not self.timed_out and not self.output_exceeded


# ---- starting and ending a sandbox ----------------------------------------------------------------
def _host_binds() -> list[str]:
    """bwrap arguments for the read-only system directories of this host (merged-/usr or not)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    if Path("/etc/ld.so.cache").is_file():
        args += ["--ro-bind", "/etc/ld.so.cache", "/etc/ld.so.cache"]
    return args


def prlimit_args(limits: Limits) -> list[str]:
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
    if prlimit is None or not prlimit.startswith("/usr/"):
        raise RuntimeError("the sandbox needs prlimit in /usr/bin (Debian package util-linux)")
    mb = 1 << 20
    return [prlimit, f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_mb * mb}",
            f"--nproc={limits.processes}", f"--nofile={limits.open_files}", f"--fsize={limits.output_bytes}",
            "--core=0", "--"]


def run(argv: list[str], files: Mapping[str, str | bytes] | None = None,
        limits: Limits | None = None) -> Result:
    """Run `argv` (paths as seen inside: `/usr/bin/python3`, `/task/x.py`) in a fresh sandbox whose
    working directory `/task` holds `files` (name -> content; names are plain file names).

    Raises RuntimeError when bwrap is missing or the sandbox cannot start (see `available()`); a
    command that fails or breaks a limit is a `Result` with `ok == False`, never an exception.
    """
    limits = limits or Limits()
    with started(argv, files, limits) as box:
        return box.finish()[0]


class Sandbox:
    """A started sandbox (`started`): `finish` waits for it, within its wall-clock limit or an earlier
    deadline, and collects what it wrote."""

    def __init__(self, proc: subprocess.Popen[bytes], out: IO[bytes], err: IO[bytes], status: IO[bytes],
                 limits: Limits, uid: int | None, start: float):
        self.proc, self.out, self.err, self.status = proc, out, err, status
        self.limits, self.uid, self.start = limits, uid, start
        self.timed_out = False
        self.returncode: int | None = None
        self.ended = False

    def finish(self, deadline: float | None = None) -> tuple[Result, bytes]:
        """Wait until the command ends or `deadline` (time.monotonic(); default: the start + `wall_s`),
        then kill what is left of the sandbox; the Result and stdout's raw bytes (at most `output_bytes`)."""
        latest = self.start + self.limits.wall_s
        deadline = latest if deadline is None else min(deadline, latest)
        try:
            self.returncode = self.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.timed_out = True
        self.end()
        wall = time.monotonic() - self.start
        stdout, out_full = _read(self.out, self.limits.output_bytes)
        self.out.seek(0)
        raw_stdout = self.out.read(self.limits.output_bytes)
        stderr, err_full = _read(self.err, self.limits.output_bytes)
        returncode = None if self.timed_out else self.returncode
        if returncode is not None and returncode < 0:  # bwrap itself killed by a signal
            returncode = 128 - returncode
        if self._status().get("child-pid") is None and not self.timed_out:
            # bwrap writes {"child-pid": ...} once the sandbox is set up: without it, bwrap itself failed
            # (a command that prints "bwrap: ..." cannot pass for that)
            raise RuntimeError(f"the code sandbox could not start: {stderr.strip()[:300]} "
                               "(see envs.api.sandbox.available())")
        return Result(returncode, stdout, stderr, self.timed_out, out_full or err_full, wall), raw_stdout

    def end(self) -> None:
        """Kill the sandbox if it still runs, and every process left in it (idempotent)."""
        if self.ended:
            return
        self.ended = True
        if self.proc.poll() is None:
            _kill(self.proc)
        found = self._status().get("pid-namespace")
        namespace = found if isinstance(found, int) else None
        if self.uid is not None:
            uids.kill_sandbox(self.uid, namespace)
        elif namespace is not None:
            # run as our own uid: only the sandbox's namespace tells its processes apart
            uids.kill_sandbox(os.getuid(), namespace)

    def _status(self) -> dict[str, object]:
        """bwrap's first status line (child pid, namespaces), or {} when it wrote none."""
        self.status.seek(0)
        first = self.status.read(4096).split(b"\n", 1)[0]
        try:
            found = json.loads(first)
        except ValueError:
            return {}
        return found if isinstance(found, dict) else {}


@contextlib.contextmanager
def started(argv: list[str], files: Mapping[str, str | bytes] | None = None, limits: Limits | None = None, *,
            pass_fds: Sequence[int] = (), stdin: bytes | None = None, limited: bool = True,
            io_mb: int = 0) -> Iterator[Sandbox]:
    """A sandbox running `argv` (as `run`), while the `with` block lasts; leaving it kills whatever
    is left of the sandbox. `pass_fds`: descriptors of this process the command inherits under the
    same numbers (pipes to another sandbox); `stdin`: the command's standard input (default: empty).
    `limited=False` leaves `argv` itself outside `prlimit` (a trusted wrapper that applies the limits
    to what it starts), `io_mb` > 0 adds a second writable tmpfs `/io` of that size."""
    limits = limits or Limits()
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError(f"the code sandbox needs bwrap: {INSTALL_HINT}")
    files = files or {}
    for name in files:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"sandbox file names are plain names inside {TASK_DIR}; got {name!r}")
    env = {"PATH": "/usr/bin:/bin", "HOME": TASK_DIR, "TMPDIR": TASK_DIR, "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1"}
    with contextlib.ExitStack() as stack:
        as_user: dict[str, object] = {}
        uid = None
        if os.geteuid() == 0:
            uid = uids.reserve_uid(stack)
            as_user = {"user": uid, "group": uid, "extra_groups": []}
        out, err, status, seccomp = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(4))
        seccomp.write(seccomp_filter())
        seccomp.flush()
        seccomp.seek(0)
        command = [bwrap, "--json-status-fd", str(status.fileno()), "--unshare-all", "--unshare-user",
                   "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns",
                   "--die-with-parent",
                   "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox", *_host_binds(),
                   "--proc", "/proc", "--dev", "/dev", "--size", str(limits.disk_mb << 20), "--perms", "0755",
                   "--tmpfs", TASK_DIR]
        if io_mb:
            command += ["--size", str(io_mb << 20), "--perms", "0755", "--tmpfs", IO_DIR]
        fds = [status.fileno(), seccomp.fileno(), *pass_fds]
        # each file reaches bwrap as an inherited descriptor (`--file FD DEST`)
        for name, content in files.items():
            f = stack.enter_context(tempfile.TemporaryFile())
            # text is written as given: a lone surrogate a model wrote is the reader's problem, not a
            # crash here
            f.write(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
            f.flush()
            f.seek(0)
            fds.append(f.fileno())
            command += ["--perms", "0644", "--file", str(f.fileno()), f"{TASK_DIR}/{name}"]
        command += ["--seccomp", str(seccomp.fileno()), "--remount-ro", "/", "--remount-ro", "/dev",
                    "--chdir", TASK_DIR, *(prlimit_args(limits) if limited else []), *argv]
        source: int | IO[bytes] = subprocess.DEVNULL
        if stdin is not None:
            source = stack.enter_context(tempfile.TemporaryFile())
            source.write(stdin)
            source.flush()
            source.seek(0)
        start = time.monotonic()
        proc = subprocess.Popen(command, stdin=source, stdout=out, stderr=err, env=env, pass_fds=fds,
                                start_new_session=True, **as_user)  # type: ignore[call-overload]
        box = Sandbox(proc, out, err, status, limits, uid, start)
        try:
            yield box
        finally:
            box.end()  # also when the caller is interrupted (an exception, a step's time limit)


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill bwrap's process group; `--die-with-parent` and the pid namespace take every sandboxed
    process with it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _read(f: IO[bytes], limit: int) -> tuple[str, bool]:
    """At most `limit` bytes of a captured stream, and whether it reached the limit."""
    f.seek(0)
    data = f.read(limit)
    return data.decode(errors="replace"), len(data) >= limit


# ---- is it there --------------------------------------------------------------------------------------
@functools.cache
def available() -> str | None:
    """None when bwrap can start a sandbox here; else what fails and how to fix it (cached per process)."""
    if shutil.which("bwrap") is None:
        return f"bwrap is not installed: {INSTALL_HINT}"
    try:
        result = run(["/bin/true"], limits=Limits(wall_s=20.0))
    except RuntimeError as e:
        return (f"{e}; bwrap needs user namespaces (as a non-root user: kernel.unprivileged_userns_clone=1 "
                "and no AppArmor restriction)")
    if not result.ok:
        return (f"a trivial command failed in the sandbox (exit {result.returncode}): "
                f"{result.stderr.strip()[:300]}")
    return None


@functools.cache
def bwrap_version() -> str:
    """bwrap's version (`0.8.0`), or "missing"."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "missing"
    out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    return out.split()[-1] if out.split() else "unknown"
