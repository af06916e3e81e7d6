"""The code sandbox contains hostile programs: each one is a failed run, and nothing outside its task
directory changes (a canary file and folder of the host, the host's process table)."""

from __future__ import annotations

import hashlib
import os
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from envs.api import sandbox
from envs.api.sandbox import Limits, uids

pytestmark = pytest.mark.skipif(sandbox.available() is not None,
                                reason=f"no sandbox here: {sandbox.available()}")

PY = ["/usr/bin/python3", "-I", "main.py"]
FAST = Limits(wall_s=5.0, cpu_s=2, memory_mb=256, processes=8, output_bytes=1 << 16, disk_mb=8)


def python(code: str, limits: Limits = FAST) -> sandbox.Result:
    return sandbox.run(PY, {"main.py": code}, limits)


def sandbox_processes() -> list[int]:
    """Live host processes whose real uid is one the sandbox runs as (none may outlive a run; zombies
    waiting for the host's init to reap them are not running)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            uid = int(status.split("Uid:")[1].split()[0])
            state = status.split("State:")[1].split()[0]
        except (OSError, ValueError, IndexError):
            continue
        if uids.UID_RANGE[0] <= uid < uids.UID_RANGE[1] and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture(autouse=True)
def _own_uids(own_sandbox_uids):
    """Every test here counts only its own sandboxes' processes (tests/conftest.py)."""


@pytest.fixture()
def canary(tmp_path):
    """A host folder and file the hostile programs target; yields a function telling whether they are
    intact."""
    folder = tmp_path / "canary"
    folder.mkdir()
    (folder / "secret.txt").write_text("do not touch")
    os.chmod(folder, 0o777)
    (folder / "secret.txt").chmod(0o666)
    repo_file = Path(__file__).resolve()

    def state() -> tuple[object, ...]:
        return (sorted(p.name for p in folder.iterdir()), (folder / "secret.txt").read_text(),
                hashlib.sha256(repo_file.read_bytes()).hexdigest(), Path("/etc/passwd").stat().st_mtime)

    before = state()
    yield folder, lambda: state() == before
    assert state() == before


def test_a_plain_program_runs_and_sees_its_files():
    r = sandbox.run(["/usr/bin/python3", "-I", "main.py"],
                    {"main.py": "print(open('data.txt').read())", "data.txt": "42"})
    assert r.ok and r.stdout.strip() == "42" and not r.timed_out


def test_exit_status_is_reported():
    r = python("import sys; sys.exit(3)")
    assert not r.ok and r.returncode == 3


def test_fork_bomb_is_contained(canary):
    before = time.monotonic()
    r = python("import os\nwhile True:\n    os.fork()\n")
    assert not r.ok and time.monotonic() - before < FAST.wall_s + 3
    assert sandbox_processes() == []  # every forked process died with the sandbox
    # the shell's classic: contained as quickly (the shell itself exits 0 after its forks failed)
    r = sandbox.run(["/bin/sh", "-c", "f() { f | f & }; f; wait"], limits=FAST)
    assert "Cannot fork" in r.stderr and not r.timed_out
    assert sandbox_processes() == []


def test_rm_rf_root_is_contained(canary):
    folder, intact = canary
    r = sandbox.run(["/bin/sh", "-c", f"rm -rf --no-preserve-root / {folder}"], limits=FAST)
    assert not r.ok and "Read-only file system" in r.stderr
    # a bounded walk: rmtree('/') visits every file of the host's read-only system folders, which
    # outlasts the 5 s wall limit on a CI image with Java and a full virtualenv
    r = python("import os, shutil\nshutil.rmtree('/usr/bin', ignore_errors=True)\n"
               f"print(os.path.exists('/usr/bin/python3'))\nshutil.rmtree({str(folder)!r})\n")
    assert not r.ok and r.stdout.strip() == "True" and "FileNotFoundError" in r.stderr and not r.timed_out
    assert intact()
    # still usable afterwards: nothing of the host was removed
    assert python("print('alive')").stdout.strip() == "alive"


@pytest.mark.parametrize("path", ["/etc/shadow", "/etc/passwd", "/root", "/home", "/work", "/tmp", "REPO",
                                  "CANARY"])
def test_files_outside_the_task_directory_are_unreadable(path, canary):
    folder, _ = canary
    path = {"REPO": str(Path(__file__).resolve()), "CANARY": str(folder / "secret.txt")}.get(path, path)
    code = ("import os, sys\np = sys.argv[1]\n"
            "print(os.listdir(p) if os.path.isdir(p) else open(p).read())\n")
    r = sandbox.run([*PY, path], {"main.py": code}, FAST)
    assert not r.ok and ("FileNotFoundError" in r.stderr or "PermissionError" in r.stderr)
    assert "do not touch" not in r.stdout and "root:" not in r.stdout


def test_writes_outside_the_task_directory_fail(canary):
    folder, _ = canary
    for target in ["/probe", "/usr/probe", "/dev/shm/probe", "/etc/probe", str(folder / "secret.txt")]:
        r = python(f"open({target!r}, 'w').write('owned')")
        assert not r.ok, target
    assert python("open('/task/mine', 'w').write('ok')").ok  # the task directory is writable


def test_sockets_cannot_reach_anything():
    for code in ["import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)",
                 "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=2)",
                 "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                 "s.sendto(b'x', ('8.8.8.8', 53))",
                 "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)"]:
        r = python(code)
        # no route, no name resolution; the sandbox has only its own loopback, the host's port 22 is not there
        refused = ("unreachable", "refused", "name resolution")
        assert not r.ok and not r.timed_out and any(why in r.stderr for why in refused), code
    # a server may listen in its own network namespace, where nobody can reach it: it waits out the clock
    r = python("import socket\ns = socket.socket()\ns.bind(('0.0.0.0', 8080))\ns.listen()\ns.accept()",
               Limits(wall_s=1.0))
    assert not r.ok and r.timed_out


def test_infinite_loops_hit_the_cpu_or_wall_clock_limit():
    before = time.monotonic()
    r = python("while True:\n    pass\n")
    assert not r.ok and r.returncode == 128 + 24  # SIGXCPU at cpu_s
    r = python("import time\ntime.sleep(1000)\n", Limits(wall_s=1.5, cpu_s=2))
    assert not r.ok and r.timed_out and r.returncode is None
    assert time.monotonic() - before < 12
    assert sandbox_processes() == []


def test_huge_output_is_cut_and_fails():
    r = python("import sys\nsys.stdout.write('x' * 100_000_000)\n")
    assert not r.ok and len(r.stdout) <= FAST.output_bytes
    # swallowing the error does not help: reaching the output limit is a failure by itself
    r = python("try:\n    print('x' * 100_000_000)\nexcept OSError:\n    pass\n")
    assert not r.ok and r.output_exceeded
    r = python("import sys\nfor _ in range(10**6):\n    sys.stderr.write('y' * 1000)\n")
    assert not r.ok and len(r.stderr) <= FAST.output_bytes


def test_memory_disk_and_open_files_are_bounded():
    assert not python("x = bytearray(2 * 1024**3)").ok  # RLIMIT_AS
    assert not python("open('big', 'wb').write(b'x' * 100_000_000)").ok  # RLIMIT_FSIZE
    # 12 MB in files of 60 kB each: under the file-size limit, over the task directory's 8 MB
    r = python("for i in range(200):\n    open(f'f{i}', 'wb').write(b'x' * 60_000)\n")
    assert not r.ok and "No space left" in r.stderr
    r = python("files = [open(f'f{i}', 'w') for i in range(200)]")  # RLIMIT_NOFILE
    assert not r.ok and "Too many open files" in r.stderr


# ---- the kernel's surface (seccomp), the memory bound, whose processes a run kills (#34) -------------
SHM_HOLD = """import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype, libc.shmat.argtypes = ctypes.c_void_p, [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
held = 0
for _ in range(4):  # 4 x 64 MB, each attached, written and detached: the segments outlive their mappings
    sid = libc.shmget(0, 64 << 20, 0o1000 | 0o600)
    if sid < 0:
        print("shmget:", os.strerror(ctypes.get_errno()))
        break
    addr = libc.shmat(sid, None, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        print("shmat:", os.strerror(ctypes.get_errno()))
        break
    ctypes.memset(addr, 1, 64 << 20)
    libc.shmdt(ctypes.c_void_p(addr))
    held += 64
print("held_mb", held)
"""


def test_sysv_shared_memory_cannot_hold_more_than_the_memory_cap():
    r = python(SHM_HOLD, Limits(wall_s=20.0, cpu_s=10, memory_mb=128, output_bytes=1 << 16, disk_mb=8))
    assert r.stdout.split()[-2:] == ["held_mb", "0"], r.stdout
    assert "shmget: Operation not permitted" in r.stdout, r.stdout


def test_each_denied_system_call_fails_with_eperm():
    column = {"x86_64": 0, "aarch64": 1}[os.uname().machine]
    calls = {name: numbers[column] for name, numbers in sandbox.DENIED_SYSCALLS.items()}
    code = ("import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            f"for name, nr in {calls!r}.items():\n"
            "    ctypes.set_errno(0)\n"
            # all-zero arguments: harmless wherever a call is allowed
            "    r = libc.syscall(nr, 0, 0, 0, 0, 0, 0)\n"
            "    print(name, r, ctypes.get_errno())\n")
    r = python(code)
    assert r.ok, r.stderr
    seen = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    assert seen == {name: ["-1", "1"] for name in calls}  # EPERM, from the filter, for every one


def test_the_sandbox_init_cannot_be_traced():
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
            # PTRACE_ATTACH to bwrap's init
            "print(libc.ptrace(16, 1, None, None), os.strerror(ctypes.get_errno()))\n")
    r = python(code, Limits(wall_s=3.0, cpu_s=2))
    assert r.ok and r.stdout.strip() == "-1 Operation not permitted", (r.stdout, r.timed_out)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="i386 and x32 system calls exist on x86_64 only")
def test_system_calls_of_another_abi_cannot_bypass_the_filter():
    i386 = ("import ctypes, mmap, os\n"
            "m = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
            # mov eax, 20 (i386 getpid); int 0x80; ret
            "m.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))\n"
            "f = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(m)))\n"
            "print(f())\n")
    r = python(i386)
    assert r.returncode == 128 + signal.SIGSYS and r.stdout == "", (r.returncode, r.stdout)
    x32 = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
           "print(libc.syscall(39 | 0x40000000), ctypes.get_errno())\n")  # x32 getpid
    assert python(x32).stdout.split() == ["-1", "1"]


def test_the_filter_checks_the_architecture_first():
    for machine, arch in (("x86_64", 0xC000003E), ("aarch64", 0xC00000B7)):
        program = sandbox.seccomp_filter(machine)
        first = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, 32, 8)]
        assert first == [(0x20, 0, 0, 4), (0x15, 1, 0, arch), (0x06, 0, 0, 0x80000000), (0x20, 0, 0, 0)]
        assert struct.unpack("=HBBI", program[-8:]) == (0x06, 0, 0, 0x7FFF0000)  # the last: allow
        x32 = 2 if machine == "x86_64" else 0
        assert len(program) == 8 * (4 + x32 + 2 * len(sandbox.DENIED_SYSCALLS) + 1)
    with pytest.raises(RuntimeError, match="DENIED_SYSCALLS"):
        sandbox.seccomp_filter("riscv64")


@pytest.fixture()
def host_process_of_a_sandbox_uid():
    """A host process whose uid is the first of UID_RANGE (a uid a sandbox run may draw)."""
    uid = uids.UID_RANGE[0]
    proc = subprocess.Popen(["sleep", "60"], user=uid, group=uid, extra_groups=[])
    yield uid, proc
    proc.kill()
    proc.wait()


class _Draws:
    """random.SystemRandom stand-in: randrange returns `drawn` in turn."""

    def __init__(self, drawn):
        self.drawn = iter(drawn)

    def randrange(self, start, stop):
        return next(self.drawn)


@pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes run as uids of UID_RANGE only when started by root")
def test_a_host_process_of_the_drawn_uid_survives_the_run(host_process_of_a_sandbox_uid, monkeypatch):
    uid, proc = host_process_of_a_sandbox_uid
    monkeypatch.setattr(uids.random, "SystemRandom", lambda: _Draws([uid, uid + 1]))
    r = sandbox.run(["/bin/sh", "-c", "sleep 30 & echo started"], limits=FAST)  # a daemon left behind
    assert r.ok and r.stdout.strip() == "started"
    assert proc.poll() is None  # the host's process of that uid is alive: the run drew another uid
    assert sandbox_processes() == [proc.pid]  # and the run's own daemon is gone


@pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes run as uids of UID_RANGE only when started by root")
def test_a_run_kills_only_its_own_pid_namespace(host_process_of_a_sandbox_uid, monkeypatch):
    uid, proc = host_process_of_a_sandbox_uid
    monkeypatch.setattr(uids, "reserve_uid", lambda stack: uid)  # even forced onto a uid in use
    r = sandbox.run(["/bin/sh", "-c", "sleep 30 & echo started"], limits=FAST)
    assert r.ok and proc.poll() is None
    assert sandbox_processes() == [proc.pid]


def test_several_sandboxes_at_once_talk_through_passed_pipes():
    reads, writes = os.pipe()
    try:
        say = ["/usr/bin/python3", "-I", "-c", f"import os; os.write({writes}, b'hello')"]
        hear = ["/usr/bin/python3", "-I", "-c",
                f"import os; print(os.read({reads}, 100), os.read({reads}, 100))"]
        with sandbox.started(say, limits=FAST, pass_fds=(writes,)) as a, \
                sandbox.started(hear, limits=FAST, pass_fds=(reads,)) as b:
            os.close(writes)
            writes = -1
            assert a.finish()[0].ok
            result, raw = b.finish()
        assert result.ok and raw == b"b'hello' b''\n"  # the message, then the end of the pipe
    finally:
        for fd in (reads, writes):
            if fd >= 0:
                os.close(fd)
