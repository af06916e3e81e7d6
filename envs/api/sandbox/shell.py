"""Shell commands that carry a task directory from one sandbox to the next (`run_shell`): a multi-turn
episode's files, each command in a fresh sandbox of its own (the terminal testbed)."""

from __future__ import annotations

import dataclasses
import io
import tarfile
import time
from collections.abc import Mapping
from dataclasses import dataclass

from envs.api.sandbox.box import TASK_DIR, Limits, Result, prlimit_args, started

# ---- shell commands that carry a task directory ---------------------------------------------------
# run_shell's wrapper (trusted, outside the limits): it unpacks the task directory (a tar archive on
# stdin), runs the command under prlimit with its output in /io, then streams back, as a tar archive on
# stdout, /io and the top-level entries of /task, or only /io with a note in /io/files when /task holds
# more than $2 entries. $1 is the command, $2 the most entries, the rest prlimit's argv.
_SHELL_WRAPPER = (
    'cmd=$1; most=$2; shift 2; /usr/bin/tar -C /task -xf - || exit 97; '
    '"$@" /bin/sh -c "$cmd" </dev/null >/io/out 2>/io/err; echo $? >/io/rc; cd / || exit 98; '
    'n=$(/usr/bin/find task -mindepth 1 -maxdepth 1 -printf . | /usr/bin/head -c $((most + 1)) '
    '| /usr/bin/wc -c); '
    'if [ "$n" -gt "$most" ]; then echo "$most" >/io/files; set -- io; else set -- io task; fi; '
    '/usr/bin/find "$@" -mindepth 1 -maxdepth 1 -print0 | /usr/bin/tar --no-recursion --null -T - -cf -'
)


@dataclass
class ShellResult:
    """One shell command run by `run_shell`: how it ended, and the task directory it left."""

    result: Result  # the command's own exit status, output and limits (not the wrapper's)
    files: dict[str, bytes] | None  # the task directory's top-level regular files after it; None: unreadable
    files_exceeded: bool = False  # the command left more than `Limits.task_files` entries (`files` is None)


def run_shell(command: str, files: Mapping[str, str | bytes] | None = None,
              limits: Limits | None = None) -> ShellResult:
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
        raise ValueError(f"run_shell carries at most limits.task_files={limits.task_files} files; "
                         f"got {len(files)}")
    io_mb = max(1, (2 * limits.output_bytes >> 20) + 1)
    # contents + headers
    archive_bytes = ((limits.disk_mb + io_mb + 1) << 20) + (limits.task_files + 8) * 4096
    wrapper_limits = dataclasses.replace(limits, output_bytes=archive_bytes)
    argv = ["/bin/sh", "-c", _SHELL_WRAPPER, "sh", command, str(limits.task_files), *prlimit_args(limits)]
    with started(argv, None, wrapper_limits, stdin=_tar(files), limited=False, io_mb=io_mb) as box:
        wrapper, archive = box.finish()
    members = _untar(archive, max_size=max(limits.disk_mb << 20, limits.output_bytes))
    if members is None or "io/rc" not in members:
        failed = Result(wrapper.returncode if wrapper.returncode else 1, "", wrapper.stderr,
                        wrapper.timed_out, False, wrapper.wall_s)
        return ShellResult(failed, None)
    rc_text = members["io/rc"].decode(errors="replace").strip()
    returncode = int(rc_text) if rc_text.isdigit() else 1
    out, err = members.get("io/out", b""), members.get("io/err", b"")
    exceeded = len(out) >= limits.output_bytes or len(err) >= limits.output_bytes
    result = Result(returncode, out[: limits.output_bytes].decode(errors="replace"),
                    err[: limits.output_bytes].decode(errors="replace"), wrapper.timed_out, exceeded,
                    wrapper.wall_s)
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
