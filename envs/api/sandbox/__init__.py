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

The parts: `box` (starting and ending a sandbox, its limits, `available`), `seccomp` (the filter),
`uids` (whom a run runs as, `UID_RANGE`, and killing what it left) and `shell` (`run_shell`).
"""

from envs.api.sandbox.box import Limits, Result, Sandbox, available, bwrap_version, run, started
from envs.api.sandbox.seccomp import DENIED_SYSCALLS, seccomp_filter
from envs.api.sandbox.shell import ShellResult, run_shell

__all__ = ["DENIED_SYSCALLS", "Limits", "Result", "Sandbox", "ShellResult", "available", "bwrap_version",
           "run", "run_shell", "seccomp_filter", "started"]
