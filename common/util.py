"""Small utilities the suite shares, in one home: atomic file writes, dotted keys of nested settings and
a list's chunks.

Writes are whole or not at all (a temp file in the same folder, fsync, rename) and get the mode a plain
`open` would give (mkstemp's is 0600). Dotted keys (`trainer.kl.coef`) address nested dicts the way Hydra
overrides do.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def umask() -> int:
    """This process's umask, read without changing it where Linux allows (os.umask would, for a moment,
    for every thread)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_text(path: Path, text: str) -> None:
    """Write `path` whole or not at all, with the mode a plain `open` would give."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_json(path: Path, obj: Any) -> None:
    """`obj` as indented JSON with sorted keys (values JSON does not know written as strings), atomically."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def flatten(d: dict[str, Any], prefix: str = "", keep_empty: bool = False) -> dict[str, Any]:
    """Nested dicts as {dotted key: leaf}. An empty dict has no leaf, unless `keep_empty` makes it one
    (where it must be written back, as a Hydra override).

    >>> flatten({"a": {"b": 1, "c": {}}, "d": [2]}), flatten({"a": {"c": {}}}, keep_empty=True)
    ({'a.b': 1, 'd': [2]}, {'a.c': {}})
    """
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and (v or not keep_empty):
            out.update(flatten(v, f"{prefix}{k}.", keep_empty))
        else:
            out[f"{prefix}{k}"] = v
    return out


def dotted_get(d: Any, key: str) -> Any:
    """`d["a"]["b"]` for key "a.b" (attributes where `d` is an object, e.g. a dataclass)."""
    for part in key.split("."):
        d = d[part] if isinstance(d, dict) else getattr(d, part)
    return d


def dotted_set(d: dict[str, Any], key: str, value: Any) -> None:
    """`d["a"]["b"] = value` for key "a.b" (the parents must exist)."""
    *parents, last = key.split(".")
    for part in parents:
        d = d[part]
    d[last] = value


def chunks(items: list[Any], size: int) -> Iterator[list[Any]]:
    size = size or len(items) or 1
    for i in range(0, len(items), size):
        yield items[i : i + size]
