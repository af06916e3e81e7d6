"""Which committed runs the current code would no longer make: REPORT's "stale results" check.

A run records the commit it ran at (`git_sha`) and whether the tree had uncommitted changes
(`git_dirty`). It is *current* when it ran at a clean commit and no file that affects its results
differs between that commit and this checkout (its working tree, untracked files included, so a
report built just before a commit describes the code being committed); otherwise *stale*, with the
reason:

- `uncommitted tree`: the code that made it is not in the history at all;
- `N result-affecting files changed since <sha>`: the files, first few by name;
- `commit <sha> is not in this clone's history` (a shallow clone), or `no git here`.

Files that affect a run's results (`affects`): every source and configuration file of the suite
(`*.py`, `*.yaml`, `*.json`, `*.txt`, `*.toml`) except the ones that only read or present results
(`paper/`, `bench/`, `tests/`, `docs/`, `results/`, `scripts/`, `slurm/`, `.ci/`) and a method's own
tables (`tables.py`), and except the folders of *other* methods (`replications/<m>/` of another `m`).
This over-flags (a refactor that changes no number still marks every run stale: `make verify` tells
those apart) rather than under-flags.
"""

from __future__ import annotations

import functools
import subprocess
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from paper.load import Run

SOURCE_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".txt", ".toml")
PRESENTATION = ("paper/", "bench/", "tests/", "docs/", "results/", "scripts/", "slurm/", ".ci/")
METHODS_DIR = "replications/"
SHOWN = 4  # files named per stale code version


@dataclass(frozen=True)
class Staleness:
    sha: str
    reason: str | None  # None: current


def affects(path: str, method: str, methods: frozenset[str]) -> bool:
    """Whether a change to `path` (repository-relative) can change the results of `method`'s runs."""
    p = PurePosixPath(path)
    if p.suffix not in SOURCE_SUFFIXES or path.startswith(PRESENTATION) or p.name == "tables.py":
        return False
    if path.startswith(METHODS_DIR) and len(p.parts) > 2 and (
            p.parts[1] in methods or p.parts[1].startswith("_")):
        return p.parts[1] == method  # another method's folder, or the scaffold's template
    return True


def tree_state(root: Path) -> str | None:
    """What the checkout holds now (HEAD and its uncommitted changes), or None outside a git checkout; a
    cache key for `changed_since`."""
    head = _git(root, "rev-parse", "HEAD")
    status = _git(root, "status", "--porcelain")
    return None if head is None or status is None else f"{head.strip()}\n{status}"


@functools.cache
def changed_since(root: Path, sha: str, state: str) -> tuple[str, ...] | None:
    """Files that differ between commit `sha` and the checkout as it is (`state`): changed, added, deleted
    (renames as both names) and untracked ones; None if `sha` is not in the history."""
    if _git(root, "cat-file", "-e", f"{sha}^{{commit}}") is None:
        return None
    diff = _git(root, "diff", "--name-status", "--no-renames", sha)
    untracked = _git(root, "ls-files", "--others", "--exclude-standard")
    if diff is None or untracked is None:
        return None
    names = {line.split("\t", 1)[1] for line in diff.splitlines() if "\t" in line} | set(untracked.split())
    return tuple(sorted(names))


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def staleness(run: Run, root: Path, methods: frozenset[str], state: str | None = None) -> Staleness:
    """Is `run` what this checkout's code makes? (see the module docstring)"""
    if run.git_dirty:
        return Staleness(run.git_sha, "made from an uncommitted tree")
    state = state or tree_state(root)
    if state is None:
        return Staleness(run.git_sha, "no git history here to compare with")
    changed = changed_since(root, run.git_sha, state)
    if changed is None:
        return Staleness(run.git_sha, f"commit {run.git_sha[:10]} is not in this clone's history")
    relevant = [f for f in changed if affects(f, run.method, methods)]
    if not relevant:
        return Staleness(run.git_sha, None)
    more = f" and {len(relevant) - SHOWN} more" if len(relevant) > SHOWN else ""
    return Staleness(run.git_sha, f"{len(relevant)} result-affecting file(s) changed since "
                                  f"`{run.git_sha[:10]}` ({', '.join(relevant[:SHOWN])}{more})")


def repository_root(results_root: Path) -> Path:
    """The checkout that holds the results (the code the report compares them with)."""
    where = results_root.resolve() if results_root.exists() else Path.cwd()
    out = _git(where, "rev-parse", "--show-toplevel")
    return Path(out.strip()) if out else Path.cwd()


def stale_lines(runs: list[Run], root: Path) -> list[str]:
    """REPORT's lines: the one code version of every run, or each stale group of runs with its reason."""
    if not runs:
        return []
    methods = frozenset(r.method for r in runs) | _method_folders(root)
    groups: dict[tuple[str, str], list[Run]] = defaultdict(list)
    current: Counter[str] = Counter()
    state = tree_state(root)
    for run in runs:
        s = staleness(run, root, methods, state)
        if s.reason is None:
            current[s.sha] += 1
        else:
            groups[(run.method, s.reason)].append(run)
    if not groups:
        versions = ", ".join(f"`{s[:10]}`" for s in sorted(current))
        return [f"**Code version**: all {len(runs)} finished runs are current: made at {versions}, whose "
                "result-affecting files equal this checkout's.", ""]
    n_stale = sum(len(g) for g in groups.values())
    out = [f"**Stale results**: {n_stale} of {len(runs)} finished runs were not made by this checkout's "
           "code; `make verify` reruns a sample of them. By method and reason:", ""]
    for (method, reason), group in sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]))):
        out.append(f"- {method}, {len(group)} run(s): {reason}")
    return [*out, ""]


def _method_folders(root: Path) -> frozenset[str]:
    folder = root / METHODS_DIR
    return frozenset(p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("_")) \
        if folder.is_dir() else frozenset()
