"""Run untrusted code (a model's completion and its tests) under bubblewrap, with hard limits.

`run(argv, files)` starts `argv` in a fresh sandbox built by `bwrap` (Debian package `bubblewrap`):

- **namespaces**: new user, mount, pid, network, ipc, uts and cgroup namespaces (`--unshare-all`):
  no network (only the sandbox's own, empty loopback device), its own process tree (when the
  sandbox's first process dies, the kernel kills every process left in it), uid/gid 65534 inside,
  no capabilities, no further user namespaces (`--disable-userns`).
- **file system**: `/usr` (and the `/bin`, `/lib*`, `/sbin` links or folders of the host) and
  `/etc/ld.so.cache` read-only; a fresh `/proc` and a minimal, read-only `/dev` (`null`, `zero`,
  `urandom`, ...); the sandbox's root is read-only too; nothing else of the host
  (no `/etc/shadow`, no `/root`, no `/home`, no repository, no `/tmp`). The only writable place is
  the task directory `/task`: a fresh, private tmpfs of `limits.disk_mb` that disappears with the
  sandbox, into which `files` are copied before the command starts (it is also `HOME` and `TMPDIR`).
- **limits** (`Limits`), set with `prlimit` inside the sandbox, after its user namespace exists, so
  that the process count is the sandbox's own: CPU seconds, address space, processes (threads
  included), open files, the size of any file written (stdout and stderr included: they go to files
  of at most `output_bytes`), no core dumps; and a wall-clock limit enforced from outside (the whole
  sandbox is killed).
- **who runs it**: as root, bwrap itself runs as a fresh unprivileged uid (a random one in
  `UID_RANGE`, different per run): the kernel never enforces `RLIMIT_NPROC` on processes whose real
  uid is root, even inside a user namespace, so a fork bomb is only contained when the real uid is
  not 0. Run by another user, bwrap runs as that user (it needs unprivileged user namespaces).

A run is a success (`Result.ok`) only when the command exits 0 within every limit; anything else
(a signal, a timeout, too much output, a limit hit) is a failed run. `available()` says whether
bwrap works on this machine, and why not. There is no weaker fallback: without bwrap, code is not run.

What this does not bound: the memory of all processes together is at most `processes` x
`memory_mb` (no cgroup is used; the machines we run on do not let us create one portably), and CPU
time is per process. A run costs about 20 ms (bwrap) + the command's own start (Python: ~15 ms).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
import random
import shutil
import signal
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO

SANDBOX_UID = 65534  # `nobody` inside the sandbox
UID_RANGE = (1_000_000, 2_000_000)  # real uids bwrap runs as when we are root (no account needs to exist)
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

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "processes", "open_files", "output_bytes", "disk_mb"):
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


def _prlimit_args(limits: Limits) -> list[str]:
    prlimit = shutil.which("prlimit", path="/usr/bin:/bin")
    if prlimit is None or not prlimit.startswith("/usr/"):
        raise RuntimeError("the sandbox needs prlimit in /usr/bin (Debian package util-linux)")
    mb = 1 << 20
    return [prlimit, f"--cpu={limits.cpu_s}:{limits.cpu_s + 1}", f"--as={limits.memory_mb * mb}",
            f"--nproc={limits.processes}", f"--nofile={limits.open_files}", f"--fsize={limits.output_bytes}",
            "--core=0", "--"]


def run(argv: list[str], files: Mapping[str, str | bytes] | None = None, limits: Limits | None = None) -> Result:
    """Run `argv` (paths as seen inside: `/usr/bin/python3`, `/task/x.py`) in a fresh sandbox whose
    working directory `/task` holds `files` (name -> content; names are plain file names).

    Raises RuntimeError when bwrap is missing or the sandbox cannot start (see `available()`); a
    command that fails or breaks a limit is a `Result` with `ok == False`, never an exception.
    """
    return _run(argv, files, limits or Limits(), limited=True)[0]


def _run(argv: list[str], files: Mapping[str, str | bytes] | None, limits: Limits, limited: bool,
         io_mb: int = 0) -> tuple[Result, bytes]:
    """`run`; `limited=False` leaves `argv` itself outside `prlimit` (a trusted wrapper that applies the
    limits to what it starts), `io_mb` > 0 adds a second writable tmpfs `/io` of that size."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise RuntimeError(f"the code sandbox needs bwrap: {INSTALL_HINT}")
    files = files or {}
    for name in files:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"sandbox file names are plain names inside {TASK_DIR}; got {name!r}")
    env = {"PATH": "/usr/bin:/bin", "HOME": TASK_DIR, "TMPDIR": TASK_DIR, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    as_user: dict[str, object] = {}
    uid = None
    if os.geteuid() == 0:
        uid = random.SystemRandom().randrange(*UID_RANGE)
        as_user = {"user": uid, "group": uid, "extra_groups": []}
    with contextlib.ExitStack() as stack:
        out, err, status = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(3))
        # bwrap writes {"child-pid": ...} to `status` once the sandbox is set up: without it, bwrap itself
        # failed (a command that prints "bwrap: ..." cannot pass for that)
        command = [bwrap, "--json-status-fd", str(status.fileno()), "--unshare-all", "--unshare-user",
                   "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--die-with-parent",
                   "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox", *_host_binds(),
                   "--proc", "/proc", "--dev", "/dev", "--size", str(limits.disk_mb << 20), "--perms", "0755",
                   "--tmpfs", TASK_DIR]
        if io_mb:
            command += ["--size", str(io_mb << 20), "--perms", "0755", "--tmpfs", IO_DIR]
        fds = [status.fileno()]
        for name, content in files.items():  # each file reaches bwrap as an inherited descriptor (`--file FD DEST`)
            f = stack.enter_context(tempfile.TemporaryFile())
            # text is written as given: a lone surrogate a model wrote is the reader's problem, not a crash here
            f.write(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
            f.flush()
            f.seek(0)
            fds.append(f.fileno())
            command += ["--perms", "0644", "--file", str(f.fileno()), f"{TASK_DIR}/{name}"]
        command += ["--remount-ro", "/", "--remount-ro", "/dev", "--chdir", TASK_DIR, *(_prlimit_args(limits) if limited else []), *argv]
        start = time.monotonic()
        proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env, pass_fds=fds,
                                start_new_session=True, **as_user)  # type: ignore[call-overload]
        timed_out = False
        try:
            returncode: int | None = proc.wait(timeout=limits.wall_s)
        except subprocess.TimeoutExpired:
            timed_out, returncode = True, None
            _kill(proc)
        if uid is not None:
            _kill_uid(uid)
        wall = time.monotonic() - start
        stdout, out_full = _read(out, limits.output_bytes)
        out.seek(0)
        raw_stdout = out.read(limits.output_bytes)
        stderr, err_full = _read(err, limits.output_bytes)
        status.seek(0)
        started = b'"child-pid"' in status.read(4096)
    if returncode is not None and returncode < 0:  # bwrap itself killed by a signal
        returncode = 128 - returncode
    if not started and not timed_out:
        raise RuntimeError(f"the code sandbox could not start: {stderr.strip()[:300]} (see common.sandbox.available())")
    return Result(returncode, stdout, stderr, timed_out, out_full or err_full, wall), raw_stdout


# run_shell's wrapper (trusted, outside the limits): the command under prlimit with its output in /io,
# then the task directory and /io as a tar stream on stdout. $1 is the command, the rest prlimit's argv.
_SHELL_WRAPPER = (
    'cmd=$1; shift; "$@" /bin/sh -c "$cmd" </dev/null >/io/out 2>/io/err; echo $? >/io/rc; '
    "exec /usr/bin/tar -C / -cf - task io"
)


@dataclass
class ShellResult:
    """One shell command run by `run_shell`: how it ended, and the task directory it left."""

    result: Result  # the command's own exit status, output and limits (not the wrapper's)
    files: dict[str, bytes] | None  # the task directory's top-level regular files after it; None: unreadable


def run_shell(command: str, files: Mapping[str, str | bytes] | None = None, limits: Limits | None = None) -> ShellResult:
    """Run one shell command (`/bin/sh -c command`) in a fresh sandbox whose `/task` holds `files`,
    and read back what `/task` holds afterwards: a multi-turn episode carries the files from one
    command to the next, each command in a sandbox of its own.

    The limits apply to the command and everything it starts; its stdout and stderr go to a second
    tmpfs (`/io`, `output_bytes` each); a trusted wrapper outside the limits then streams `/task`
    and `/io` back as a tar archive. Only top-level regular files of `/task` are kept (folders,
    links and special files a command makes do not persist). `files` is None when the archive
    cannot be read (the command killed the wrapper): treat the command as failed, the task
    directory as unchanged. Raises as `run` does; bad commands are results, never exceptions.
    """
    limits = limits or Limits()
    if "\x00" in command:
        raise ValueError("a shell command cannot contain NUL characters")
    io_mb = max(1, (2 * limits.output_bytes >> 20) + 1)
    wrapper, archive = _run(["/bin/sh", "-c", _SHELL_WRAPPER, "sh", command, *_prlimit_args(limits)], files,
                   dataclasses.replace(limits, output_bytes=(limits.disk_mb + io_mb + 1) << 20), limited=False, io_mb=io_mb)
    members = _untar(archive, max_size=max(limits.disk_mb << 20, limits.output_bytes))
    if members is None or "io/rc" not in members:
        failed = Result(wrapper.returncode if wrapper.returncode else 1, "", wrapper.stderr, wrapper.timed_out, False, wrapper.wall_s)
        return ShellResult(failed, None)
    rc_text = members["io/rc"].decode(errors="replace").strip()
    returncode = int(rc_text) if rc_text.isdigit() else 1
    out, err = members.get("io/out", b""), members.get("io/err", b"")
    exceeded = len(out) >= limits.output_bytes or len(err) >= limits.output_bytes
    result = Result(returncode, out[: limits.output_bytes].decode(errors="replace"),
                    err[: limits.output_bytes].decode(errors="replace"), wrapper.timed_out, exceeded, wrapper.wall_s)
    task = {name[len("task/"):]: data for name, data in members.items()
            if name.startswith("task/") and "/" not in name[len("task/"):]}
    return ShellResult(result, task)


def _untar(data: bytes, max_size: int) -> dict[str, bytes] | None:
    """The regular files of a tar archive (name -> bytes), or None when it is not a complete, sane archive."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if member.isreg() and member.size <= max_size:
                    content = archive.extractfile(member)
                    if content is not None:
                        found[member.name.removeprefix("./")] = content.read()
    except (tarfile.TarError, OSError, EOFError):
        return None
    return found


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Kill bwrap's process group; `--die-with-parent` and the pid namespace take every sandboxed process with it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _kill_uid(uid: int, deadline_s: float = 2.0) -> None:
    """Kill every live process whose real uid is `uid` (this run's own, when we are root), until none is left.

    bwrap's processes can outlive the bwrap we waited for by a few milliseconds (its pid-1 reaper
    reports the exit status, then tears the pid namespace down); this makes "the run is over" mean
    that no process of the sandbox is running (zombies waiting for the host's init to reap them hold
    no resources).
    """
    end = time.monotonic() + deadline_s
    while True:
        live = [pid for pid, state in _processes_of(uid) if state != "Z"]
        if not live or time.monotonic() > end:
            return
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _processes_of(uid: int) -> list[tuple[int, str]]:
    """(pid, state letter) of the host's processes whose real uid is `uid`."""
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
            found.append((int(entry.name), fields.get("State", "?").split()[0]))
    return found


def _read(f: IO[bytes], limit: int) -> tuple[str, bool]:
    """At most `limit` bytes of a captured stream, and whether it reached the limit."""
    f.seek(0)
    data = f.read(limit)
    return data.decode(errors="replace"), len(data) >= limit


@functools.cache
def available() -> str | None:
    """None when bwrap can start a sandbox here; else what fails and how to fix it (cached per process)."""
    if shutil.which("bwrap") is None:
        return f"bwrap is not installed: {INSTALL_HINT}"
    try:
        result = run(["/bin/true"], limits=Limits(wall_s=20.0))
    except RuntimeError as e:
        return f"{e}; bwrap needs user namespaces (as a non-root user: kernel.unprivileged_userns_clone=1 and no AppArmor restriction)"
    if not result.ok:
        return f"a trivial command failed in the sandbox (exit {result.returncode}): {result.stderr.strip()[:300]}"
    return None


@functools.cache
def bwrap_version() -> str:
    """bwrap's version (`0.8.0`), or "missing"."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "missing"
    out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    return out.split()[-1] if out.split() else "unknown"
