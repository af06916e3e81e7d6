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
- **system calls** (`seccomp_filter`, loaded by `bwrap --seccomp`): a filter checks the architecture
  (x86_64 or aarch64; any other ABI, i386 and x32 calls included, kills the process or fails) and
  fails, with EPERM, the calls no sandboxed program needs and that widen what it can reach:
  `ptrace` and its relatives (`process_vm_*`, `kcmp`, `pidfd_getfd`: the sandbox's init is a
  process of the same uid), SysV IPC (`shmget`, `semget`, `msgget`, ...: a shared memory segment
  outlives its mapping, so a process capped at 512 MB could hold 1.5 GB), `memfd_create`, keys
  (`keyctl`, `add_key`, ...), `bpf`, `perf_event_open`, `userfaultfd`, `io_uring_*`, mounts,
  `unshare`, `setns`, `chroot`, `personality`, modules, `kexec`, `reboot`, swap, `acct`, ...
  (`DENIED_SYSCALLS`).
- **limits** (`Limits`), set with `prlimit` inside the sandbox, after its user namespace exists, so
  that the process count is the sandbox's own: CPU seconds, address space, processes (threads
  included), open files, the size of any file written (stdout and stderr included: they go to files
  of at most `output_bytes`), no core dumps; and a wall-clock limit enforced from outside (the whole
  sandbox is killed).
- **who runs it**: as root, bwrap itself runs as a fresh unprivileged uid (one in `UID_RANGE`,
  different per run): the kernel never enforces `RLIMIT_NPROC` on processes whose real uid is root,
  even inside a user namespace, so a fork bomb is only contained when the real uid is not 0. The uid
  is reserved (an abstract unix socket named after it, which two runs cannot both bind, held for the
  run) and used only when no process of the host runs as it. Run by another user, bwrap runs as
  that user (it needs unprivileged user namespaces).
- **the end of a run**: bwrap can exit a few milliseconds before the processes it leaves (its
  pid-1 reaper reports the exit status, then tears the pid namespace down), so a run ends by
  killing what is left of the sandbox: the processes whose pid namespace is the sandbox's own
  (bwrap reports it on `--json-status-fd`) and whose uid is the run's. Nothing is killed by uid
  alone: a process of the host that happens to run as that uid lives in another pid namespace.

A run is a success (`Result.ok`) only when the command exits 0 within every limit; anything else
(a signal, a timeout, too much output, a limit hit) is a failed run. `available()` says whether
bwrap works on this machine, and why not. There is no weaker fallback: without bwrap, code is not run.
`started(...)` runs several sandboxes at once (humaneval's tests and completion, connected by pipes
passed with `pass_fds`).

What this does not bound: the memory of all processes together is at most `processes` x
(`memory_mb` + what the kernel buffers for their open pipes and sockets, at most `open_files` x
~1 MB) plus the task directory's `disk_mb` (no cgroup is used; the machines we run on do not let
us create one portably), and CPU time is per process. A run costs about 20 ms (bwrap) + the
command's own start (Python: ~15 ms).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
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
    task_files: int = 256  # run_shell: entries the task directory may hold after a command (more: `files_exceeded`)

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "memory_mb", "processes", "open_files", "output_bytes", "disk_mb", "task_files"):
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


# ---- the seccomp filter ---------------------------------------------------------------------------
# System calls failed with EPERM inside the sandbox: (x86_64 number, aarch64 number). aarch64 uses the
# kernel's generic table (include/uapi/asm-generic/unistd.h); x86_64 its own (arch/x86/entry/syscalls).
DENIED_SYSCALLS: dict[str, tuple[int, int]] = {
    # reading or steering another process (the sandbox's init runs as the same uid)
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    # memory held outside RLIMIT_AS (a SysV segment outlives its mapping; a memfd is only bounded per file)
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197), "semget": (64, 190),
    "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192), "msgget": (68, 186), "msgsnd": (69, 189),
    "msgrcv": (70, 188), "msgctl": (71, 187), "memfd_create": (319, 279),
    # large kernel interfaces no sandboxed program needs
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "personality": (135, 92),
    "lookup_dcookie": (212, 18), "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "fanotify_init": (300, 262), "syslog": (103, 116),
    # namespaces and mounts (bwrap has set them up before the filter is loaded)
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39), "pivot_root": (155, 41),
    "chroot": (161, 51), "open_tree": (428, 428), "move_mount": (429, 429), "fsopen": (430, 430),
    "fsconfig": (431, 431), "fsmount": (432, 432), "fspick": (433, 433), "mount_setattr": (442, 442),
    # the machine itself
    "kexec_load": (246, 104), "kexec_file_load": (320, 294), "init_module": (175, 105),
    "finit_module": (313, 273), "delete_module": (176, 106), "reboot": (169, 142), "swapon": (167, 224),
    "swapoff": (168, 225), "acct": (163, 89), "quotactl": (179, 60), "quotactl_fd": (443, 443),
}
_ARCHES = {"x86_64": (0xC000003E, 0), "aarch64": (0xC00000B7, 1)}  # machine -> (AUDIT_ARCH_*, column above)
_X32_BIT = 0x40000000  # x86_64: system calls of the x32 ABI carry this bit (and would bypass the table)
_RET_KILL_PROCESS, _RET_ERRNO, _RET_ALLOW = 0x80000000, 0x00050000, 0x7FFF0000
_EPERM = 1
_LD_ABS_W, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06  # classic BPF opcodes (linux/bpf_common.h)


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One `struct sock_filter` (u16 code, u8 jt, u8 jf, u32 k), in the machine's byte order."""
    return struct.pack("=HBBI", code, jt, jf, k)


@functools.cache
def seccomp_filter(machine: str | None = None) -> bytes:
    """The sandbox's seccomp program (classic BPF, as `bwrap --seccomp FD` reads it) for `machine`
    (default: this kernel's, `os.uname().machine`).

    Reads `struct seccomp_data` (nr at offset 0, arch at 4): another architecture's call kills the
    process (its numbers mean other calls); on x86_64 an x32 call fails; each of `DENIED_SYSCALLS`
    fails with EPERM; everything else is allowed (the namespaces, capabilities and limits bound it).
    """
    machine = machine or os.uname().machine
    if machine not in _ARCHES:
        raise RuntimeError(f"the sandbox's seccomp filter knows the system call numbers of {sorted(_ARCHES)}, not "
                           f"{machine}: add its column to envs.api.sandbox.DENIED_SYSCALLS")
    arch, column = _ARCHES[machine]
    deny = _bpf(_RET_K, _RET_ERRNO | _EPERM)
    program = [_bpf(_LD_ABS_W, 4), _bpf(_JEQ_K, arch, jt=1), _bpf(_RET_K, _RET_KILL_PROCESS), _bpf(_LD_ABS_W, 0)]
    if machine == "x86_64":
        program += [_bpf(_JGE_K, _X32_BIT, jf=1), deny]
    for numbers in DENIED_SYSCALLS.values():
        program += [_bpf(_JEQ_K, numbers[column], jf=1), deny]
    program.append(_bpf(_RET_K, _RET_ALLOW))
    return b"".join(program)


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
        deadline = self.start + self.limits.wall_s if deadline is None else min(deadline, self.start + self.limits.wall_s)
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
            raise RuntimeError(f"the code sandbox could not start: {stderr.strip()[:300]} (see envs.api.sandbox.available())")
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
            _kill_sandbox(self.uid, namespace)
        elif namespace is not None:  # run as our own uid: only the sandbox's namespace tells its processes apart
            _kill_sandbox(os.getuid(), namespace)

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
    env = {"PATH": "/usr/bin:/bin", "HOME": TASK_DIR, "TMPDIR": TASK_DIR, "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    with contextlib.ExitStack() as stack:
        as_user: dict[str, object] = {}
        uid = None
        if os.geteuid() == 0:
            uid = _reserve_uid(stack)
            as_user = {"user": uid, "group": uid, "extra_groups": []}
        out, err, status, seccomp = (stack.enter_context(tempfile.TemporaryFile()) for _ in range(4))
        seccomp.write(seccomp_filter())
        seccomp.flush()
        seccomp.seek(0)
        command = [bwrap, "--json-status-fd", str(status.fileno()), "--unshare-all", "--unshare-user",
                   "--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID), "--disable-userns", "--die-with-parent",
                   "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox", *_host_binds(),
                   "--proc", "/proc", "--dev", "/dev", "--size", str(limits.disk_mb << 20), "--perms", "0755",
                   "--tmpfs", TASK_DIR]
        if io_mb:
            command += ["--size", str(io_mb << 20), "--perms", "0755", "--tmpfs", IO_DIR]
        fds = [status.fileno(), seccomp.fileno(), *pass_fds]
        for name, content in files.items():  # each file reaches bwrap as an inherited descriptor (`--file FD DEST`)
            f = stack.enter_context(tempfile.TemporaryFile())
            # text is written as given: a lone surrogate a model wrote is the reader's problem, not a crash here
            f.write(content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content)
            f.flush()
            f.seek(0)
            fds.append(f.fileno())
            command += ["--perms", "0644", "--file", str(f.fileno()), f"{TASK_DIR}/{name}"]
        command += ["--seccomp", str(seccomp.fileno()), "--remount-ro", "/", "--remount-ro", "/dev",
                    "--chdir", TASK_DIR, *(_prlimit_args(limits) if limited else []), *argv]
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
    """Kill bwrap's process group; `--die-with-parent` and the pid namespace take every sandboxed process with it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _reserve_uid(stack: contextlib.ExitStack, attempts: int = 64) -> int:
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
        if _processes_of(uid):  # a process of the host runs as it: neither ours to share nor to kill
            holder.close()
            continue
        stack.callback(holder.close)
        return uid
    raise RuntimeError(f"no free sandbox uid in {attempts} draws from UID_RANGE {UID_RANGE}: every one drawn is held "
                       "by another run or used by a process; widen envs.api.sandbox.UID_RANGE")


def _kill_sandbox(uid: int, namespace: int | None, deadline_s: float = 2.0) -> None:
    """Kill every live process of the sandbox whose pid namespace is `namespace`, until none is left.
    Only processes of `uid` are candidates; without `namespace` (bwrap never reported it), those in
    another pid namespace than ours: only for a uid reserved by `_reserve_uid`, unused when the run started.

    bwrap's processes can outlive the bwrap we waited for by a few milliseconds (its pid-1 reaper
    reports the exit status, then tears the pid namespace down); this makes "the run is over" mean
    that no process of the sandbox is running (zombies waiting for the host's init to reap them hold
    no resources).
    """
    own = _pid_namespace("self")
    end = time.monotonic() + deadline_s
    while True:
        live = [pid for pid, state, ns in _processes_of(uid) if state != "Z" and ns is not None
                and (ns == namespace if namespace is not None else ns != own)]
        if not live or time.monotonic() > end:
            return
        for pid in live:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.01)


def _pid_namespace(pid: int | str) -> int | None:
    """The inode number of a process's pid namespace (`/proc/<pid>/ns/pid`), or None when unreadable."""
    try:
        link = os.readlink(f"/proc/{pid}/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    return int(link[link.index("[") + 1: -1]) if "[" in link else None


def _processes_of(uid: int) -> list[tuple[int, str, int | None]]:
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
            found.append((int(entry.name), fields.get("State", "?").split()[0], _pid_namespace(entry.name)))
    return found


def _read(f: IO[bytes], limit: int) -> tuple[str, bool]:
    """At most `limit` bytes of a captured stream, and whether it reached the limit."""
    f.seek(0)
    data = f.read(limit)
    return data.decode(errors="replace"), len(data) >= limit


# ---- shell commands that carry a task directory ---------------------------------------------------
# run_shell's wrapper (trusted, outside the limits): it unpacks the task directory (a tar archive on
# stdin), runs the command under prlimit with its output in /io, then streams back, as a tar archive on
# stdout, /io and the top-level entries of /task, or only /io with a note in /io/files when /task holds
# more than $2 entries. $1 is the command, $2 the most entries, the rest prlimit's argv.
_SHELL_WRAPPER = (
    'cmd=$1; most=$2; shift 2; /usr/bin/tar -C /task -xf - || exit 97; '
    '"$@" /bin/sh -c "$cmd" </dev/null >/io/out 2>/io/err; echo $? >/io/rc; cd / || exit 98; '
    'n=$(/usr/bin/find task -mindepth 1 -maxdepth 1 -printf . | /usr/bin/head -c $((most + 1)) | /usr/bin/wc -c); '
    'if [ "$n" -gt "$most" ]; then echo "$most" >/io/files; set -- io; else set -- io task; fi; '
    '/usr/bin/find "$@" -mindepth 1 -maxdepth 1 -print0 | /usr/bin/tar --no-recursion --null -T - -cf -'
)


@dataclass
class ShellResult:
    """One shell command run by `run_shell`: how it ended, and the task directory it left."""

    result: Result  # the command's own exit status, output and limits (not the wrapper's)
    files: dict[str, bytes] | None  # the task directory's top-level regular files after it; None: unreadable
    files_exceeded: bool = False  # the command left more than `Limits.task_files` entries (`files` is None)


def run_shell(command: str, files: Mapping[str, str | bytes] | None = None, limits: Limits | None = None) -> ShellResult:
    """Run one shell command (`/bin/sh -c command`) in a fresh sandbox whose `/task` holds `files`,
    and read back what `/task` holds afterwards: a multi-turn episode carries the files from one
    command to the next, each command in a sandbox of its own.

    The limits apply to the command and everything it starts; its stdout and stderr go to a second
    tmpfs (`/io`, `output_bytes` each); a trusted wrapper outside the limits unpacks `files` (one tar
    archive on its stdin: any number of files costs one descriptor) and then streams `/task` and
    `/io` back as a tar archive. Only top-level regular files of `/task` are kept (folders, symbolic
    links and special files a command makes do not persist; a hard link is kept as a file of its
    own). A command that leaves more than `limits.task_files` entries in `/task` is a failed command
    (`files_exceeded`, `files` None). `files` is None too when the archive cannot be read (the command
    killed the wrapper): treat the command as failed, the task directory as unchanged. Raises as
    `run` does, and ValueError when `files` already holds more than `task_files`; bad commands are
    results, never exceptions.
    """
    limits = limits or Limits()
    files = files or {}
    if "\x00" in command:
        raise ValueError("a shell command cannot contain NUL characters")
    if len(files) > limits.task_files:
        raise ValueError(f"run_shell carries at most limits.task_files={limits.task_files} files; got {len(files)}")
    io_mb = max(1, (2 * limits.output_bytes >> 20) + 1)
    archive_bytes = ((limits.disk_mb + io_mb + 1) << 20) + (limits.task_files + 8) * 4096  # contents + headers
    wrapper_limits = dataclasses.replace(limits, output_bytes=archive_bytes)
    argv = ["/bin/sh", "-c", _SHELL_WRAPPER, "sh", command, str(limits.task_files), *_prlimit_args(limits)]
    with started(argv, None, wrapper_limits, stdin=_tar(files), limited=False, io_mb=io_mb) as box:
        wrapper, archive = box.finish()
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
    if "io/files" in members:
        return ShellResult(result, None, files_exceeded=True)
    task = {name[len("task/"):]: data for name, data in members.items()
            if name.startswith("task/") and "/" not in name[len("task/"):]}
    return ShellResult(result, task)


def _tar(files: Mapping[str, str | bytes]) -> bytes:
    """`files` (plain names) as a tar archive of regular files, mode 0644, dated now."""
    for name in files:
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"sandbox file names are plain names inside {TASK_DIR}; got {name!r}")
    buffer = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in files.items():
            data = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else content
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, now
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _untar(data: bytes, max_size: int) -> dict[str, bytes] | None:
    """The regular files of a tar archive (name -> bytes), a hard link as a file of its own, or None
    when it is not a complete, sane archive."""
    found: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if (member.isreg() or member.islnk()) and member.size <= max_size:
                    content = archive.extractfile(member)  # a hard link reads its target's data
                    if content is not None:
                        found[member.name.removeprefix("./")] = content.read()
    except (tarfile.TarError, OSError, EOFError, KeyError):
        return None
    return found


# ---- is it there --------------------------------------------------------------------------------------
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
