"""The benchmark's time cap (`--max-minutes`): each part runs only if its estimated time fits in
what is left; a part that would not fit is skipped with a note in bench.json and bench.md, never
silently. A cell may first shrink to fewer series (its options, tried in order) before it is skipped.

Estimates, before anything of a model has run: start-up of the cell's worker processes plus
(warm-up + measured steps) x the sum of its series' step times, a step being a fixed overhead plus
the step's analytic FLOPs (generation and update, `bench.work`) at `PRIOR_EFFICIENCY` of the
precision's measured matmul rate (about the worst efficiency of the committed runs, so the prior
errs long). Once a model's first cell has run, its measured step times and start-up replace the prior.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PRIOR_EFFICIENCY = 0.2  # fraction of the matmul rate a whole step reaches (committed runs: 0.07-0.44)
STEP_OVERHEAD_S = 0.3  # per step, whatever the model (the tiny model's step is mostly overhead)
STARTUP_S = 20.0  # a cell's worker processes: imports, trainer construction
STARTUP_S_PER_SERIES_PER_100M = 8.0  # loading and wrapping the model, per worker, per 100M parameters
KL_FACTOR = 1.15  # a cell with KL on, from a measured KL-off cell (the reference forward)


def prior_step_s(flops: float, rate: float) -> float:
    """A step's time before anything of its model was measured."""
    return STEP_OVERHEAD_S + flops / (PRIOR_EFFICIENCY * rate)


def startup_s(series: int, params: float) -> float:
    return STARTUP_S + series * STARTUP_S_PER_SERIES_PER_100M * params / 1e8


def cell_s(step_s: dict[str, float], warmup: int, steps: int, start_s: float) -> float:
    """A cell's time: its series alternate step by step, so their step times add up."""
    return start_s + (warmup + steps) * sum(step_s.values())


@dataclass
class Budget:
    """Seconds left of the cap, and the note of every part skipped for want of them."""

    total_s: float
    clock: Callable[[], float] = time.perf_counter
    skipped: list[dict[str, Any]] = field(default_factory=list)
    start: float = -1.0

    def __post_init__(self) -> None:
        if self.start < 0:
            self.start = self.clock()

    def left(self) -> float:
        return self.total_s - (self.clock() - self.start)

    def admit(self, part: str, estimate_s: float) -> bool:
        """True if `part` fits in what is left; else records why it is skipped."""
        left = self.left()
        if estimate_s <= left:
            return True
        self.skipped.append({"part": part, "estimate_s": round(estimate_s, 1),
                             "left_s": round(max(left, 0.0), 1),
                             "note": f"skipped: estimated {estimate_s:.0f} s, {max(left, 0.0):.0f} s left "
                                     f"of the {self.total_s / 60:g}-minute cap (--max-minutes)"})
        return False

    def choose(self, part: str, options: list[tuple[str, Any, float]]) -> Any | None:
        """The first option (label, value, estimate) that fits; a note for each larger one left out.
        None (and a note) when none fits."""
        left = self.left()
        for i, (label, value, estimate) in enumerate(options):
            if estimate <= left:
                for big_label, _, big_estimate in options[:i]:
                    self.skipped.append({"part": f"{part}: {big_label}",
                                         "estimate_s": round(big_estimate, 1), "left_s": round(left, 1),
                                         "note": f"reduced to {label}: {big_label} estimated "
                                                 f"{big_estimate:.0f} s, {left:.0f} s left of the "
                                                 f"{self.total_s / 60:g}-minute cap"})
                return value
        smallest = options[-1]
        self.admit(f"{part} ({smallest[0]})", smallest[2])
        return None


@dataclass
class Timeline:
    """Where the benchmark's minutes went: seconds of each part, in the order they ran."""

    clock: Callable[[], float] = time.perf_counter
    parts: list[dict[str, Any]] = field(default_factory=list)
    last: float = field(init=False)  # the clock at the previous mark (or the start)

    def __post_init__(self) -> None:
        self.last = self.clock()

    def mark(self, part: str) -> None:
        """Record the seconds since the previous mark (or the start) as `part`."""
        now = self.clock()
        self.parts.append({"part": part, "s": round(now - self.last, 1)})
        self.last = now
