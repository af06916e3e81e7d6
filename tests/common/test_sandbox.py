"""The code sandbox contains hostile programs: each one is a failed run, and nothing outside its task
directory changes (a canary file and folder of the host, the host's process table)."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from common import sandbox
from common.sandbox import Limits

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")

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
        if sandbox.UID_RANGE[0] <= uid < sandbox.UID_RANGE[1] and state != "Z":
            pids.append(int(entry.name))
    return pids


@pytest.fixture(autouse=True)
def _own_uids(own_sandbox_uids):
    """Every test here counts only its own sandboxes' processes (tests/conftest.py)."""


@pytest.fixture()
def canary(tmp_path):
    """A host folder and file the hostile programs target; yields a function telling whether they are intact."""
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
    r = sandbox.run(["/usr/bin/python3", "-I", "main.py"], {"main.py": "print(open('data.txt').read())", "data.txt": "42"})
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


@pytest.mark.parametrize("path", ["/etc/shadow", "/etc/passwd", "/root", "/home", "/work", "/tmp", "REPO", "CANARY"])
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
                 "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(b'x', ('8.8.8.8', 53))",
                 "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)"]:
        r = python(code)
        # no route, no name resolution; the sandbox has only its own loopback, the host's port 22 is not there
        assert not r.ok and not r.timed_out and any(why in r.stderr for why in ("unreachable", "refused", "name resolution")), code
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
