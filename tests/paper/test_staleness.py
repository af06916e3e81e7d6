"""REPORT's stale-results check (#47): a run is current when it ran at a clean commit and no file that
affects its results changed since; otherwise it is listed with the reason."""

from __future__ import annotations

import subprocess
from pathlib import Path

from paper.load import Run
from paper.staleness import stale_lines, staleness


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True)
    return done.stdout.strip()


def _commit(root: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    _git(root, "add", "-A")
    _git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "x")
    return _git(root, "rev-parse", "HEAD")


def _run(sha: str, dirty: bool = False, method: str = "grpo") -> Run:
    return Run(method, "arith", "grpo", 0, Path("results/x"), {}, {"git_sha": sha, "git_dirty": dirty}, [],
               {})


def test_runs_are_stale_exactly_when_result_affecting_files_changed(tmp_path):
    _git(tmp_path, "init", "-q")
    first = _commit(tmp_path, {"common/trainer.py": "a", "paper/report.py": "a",
                               "replications/sharp/method.py": "a"})
    methods = frozenset({"grpo", "sharp"})
    assert staleness(_run(first), tmp_path, methods).reason is None
    assert stale_lines([_run(first)], tmp_path)[0].startswith(
        "**Code version**: all 1 finished runs are current")
    # presentation, another method
    _commit(tmp_path, {"paper/report.py": "b", "replications/sharp/method.py": "b"})
    assert staleness(_run(first), tmp_path, methods).reason is None
    sharp = staleness(_run(first, method="sharp"), tmp_path, methods)
    assert "replications/sharp/method.py" in str(sharp.reason)
    (tmp_path / "common" / "loss.py").write_text("new, not yet committed")  # the checkout's code, not HEAD's
    assert "common/loss.py" in str(staleness(_run(first), tmp_path, methods).reason)
    (tmp_path / "common" / "loss.py").unlink()
    _commit(tmp_path, {"common/trainer.py": "b"})
    reason = staleness(_run(first), tmp_path, methods).reason
    assert reason == f"1 result-affecting file(s) changed since `{first[:10]}` (common/trainer.py)"
    assert staleness(_run(first, dirty=True), tmp_path, methods).reason == "made from an uncommitted tree"
    assert "not in this clone's history" in str(staleness(_run("f" * 40), tmp_path, methods).reason)
    lines = stale_lines([_run(first), _run(first, dirty=True)], tmp_path)
    assert lines[0].startswith("**Stale results**: 2 of 2 finished runs")
    assert "- grpo, 1 run(s): made from an uncommitted tree" in lines
