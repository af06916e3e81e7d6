"""The README's quick start against the committed results (#47): on a fresh clone every committed cell
of every method's cpu replication, and of `make compare`, counts as finished ("done"), and
`make replicate-grpo` skips them all and prints its tables in well under two minutes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.compare import plan as compare_plan
from experiments.plan import design_blocks
from experiments.replicate import plan
from replications import METHODS

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


def _not_done(cells):
    """Cells whose folder holds a finished committed run that the plan would not count as done."""
    return [f"{c.name}: {c.state()}" for c in cells
            if (c.run_dir / "done").exists() and c.state().state != "done"]


# Methods whose cpu replication is a new testbed whose arms have not run yet (declared in the CARD before
# its runs; its design check decides whether they run): `make replicate-<m>` runs its cells.
NOT_RUN_YET: dict[str, str] = {}


@pytest.mark.parametrize("method", list(METHODS))
def test_every_committed_cell_of_a_replication_is_done(method, monkeypatch):
    monkeypatch.chdir(ROOT)
    cells = plan(method, "cpu")
    finished = any((c.run_dir / "done").exists() for c in cells)
    assert finished or method in NOT_RUN_YET, f"{method}: no committed cpu-scale result"
    assert not (finished and method in NOT_RUN_YET), f"{method} has results now: take it off NOT_RUN_YET"
    assert _not_done(cells) == []


@pytest.mark.parametrize("method", list(METHODS))
def test_a_fresh_clone_has_no_cpu_cell_left_to_run(method, monkeypatch):
    """`make replicate-<m>` on a fresh clone runs nothing: every cell is done or kept from running by the
    committed design check (canopy's seeds 3-4 of three arms and SkillRise's oracle-ind would have run)."""
    monkeypatch.chdir(ROOT)
    cells = plan(method, "cpu")
    blocked = design_blocks(cells)
    left = [f"{c.name}: {c.state()}" for c in cells if c.state().state != "done" and c.name not in blocked]
    assert left == []


def test_every_committed_compare_cell_is_done(monkeypatch):
    monkeypatch.chdir(ROOT)
    cells = compare_plan("cpu").cells
    assert len([c for c in cells if (c.run_dir / "done").exists()]) > 100
    assert _not_done(cells) == []


def test_the_quick_start_skips_every_committed_cell(wall_budget):
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "experiments.replicate", "--method", "grpo"], cwd=ROOT,
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FAILED" not in done.stderr and "not done" not in done.stdout
    assert "## GRPO" in done.stdout and "[replicate] 21 cells" in done.stdout
    assert seconds < wall_budget(120)


def test_a_replication_at_a_named_scale_prints_its_committed_results(monkeypatch):
    """`--scale dyad` composes `scale: cpu`; the printed tables filtered the runs by "dyad" and showed
    every dyad claim with no pairs."""
    from experiments.replicate import collect_tables

    monkeypatch.chdir(ROOT)
    text = collect_tables("ccpo", "dyad", plan("ccpo", "dyad"))
    line = next(t for t in text.splitlines() if "(`dy-v1-best-beats-center`)" in t and t.startswith("- **"))
    assert "fewer than 5 pairs (n=0)" not in line and "5 pairs" in line
