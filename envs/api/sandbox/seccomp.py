"""The sandbox's seccomp filter: the system calls no sandboxed program needs, failed with EPERM.

`seccomp_filter()` is the classic BPF program `bwrap --seccomp FD` loads (`box.started`): it checks the
architecture (x86_64 or aarch64; any other ABI, i386 and x32 calls included, kills the process or
fails) and fails each of `DENIED_SYSCALLS`; the package's docstring says why each group is denied.
"""

from __future__ import annotations

import functools
import os
import struct

# System calls failed with EPERM inside the sandbox: (x86_64 number, aarch64 number). aarch64 uses the
# kernel's generic table (include/uapi/asm-generic/unistd.h); x86_64 its own (arch/x86/entry/syscalls).
DENIED_SYSCALLS: dict[str, tuple[int, int]] = {
    # reading or steering another process (the sandbox's init runs as the same uid)
    "ptrace": (101, 117), "process_vm_readv": (310, 270), "process_vm_writev": (311, 271), "kcmp": (312, 272),
    "pidfd_getfd": (438, 438),
    # memory held outside RLIMIT_AS (a SysV segment outlives its mapping; a memfd is only bounded per file)
    "shmget": (29, 194), "shmat": (30, 196), "shmctl": (31, 195), "shmdt": (67, 197), "semget": (64, 190),
    "semop": (65, 193), "semctl": (66, 191), "semtimedop": (220, 192), "msgget": (68, 186),
    "msgsnd": (69, 189),
    "msgrcv": (70, 188), "msgctl": (71, 187), "memfd_create": (319, 279),
    # large kernel interfaces no sandboxed program needs
    "keyctl": (250, 219), "add_key": (248, 217), "request_key": (249, 218), "bpf": (321, 280),
    "perf_event_open": (298, 241), "userfaultfd": (323, 282), "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426), "io_uring_register": (427, 427), "personality": (135, 92),
    "lookup_dcookie": (212, 18), "open_by_handle_at": (304, 265), "name_to_handle_at": (303, 264),
    "fanotify_init": (300, 262), "syslog": (103, 116),
    # namespaces and mounts (bwrap has set them up before the filter is loaded)
    "unshare": (272, 97), "setns": (308, 268), "mount": (165, 40), "umount2": (166, 39),
    "pivot_root": (155, 41),
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
        raise RuntimeError("the sandbox's seccomp filter knows the system call numbers of "
                           f"{sorted(_ARCHES)}, not {machine}: add its column to "
                           "envs.api.sandbox.seccomp.DENIED_SYSCALLS")
    arch, column = _ARCHES[machine]
    deny = _bpf(_RET_K, _RET_ERRNO | _EPERM)
    program = [_bpf(_LD_ABS_W, 4), _bpf(_JEQ_K, arch, jt=1), _bpf(_RET_K, _RET_KILL_PROCESS),
               _bpf(_LD_ABS_W, 0)]
    if machine == "x86_64":
        program += [_bpf(_JGE_K, _X32_BIT, jf=1), deny]
    for numbers in DENIED_SYSCALLS.values():
        program += [_bpf(_JEQ_K, numbers[column], jf=1), deny]
    program.append(_bpf(_RET_K, _RET_ALLOW))
    return b"".join(program)
