"""A replication's cells before they run: each cell (one arm x seed run of a method at a scale) and
what running it would do, decided from its run folder alone (`Cell.state`: done, to run, to resume,
forced rerun, or refused when a run of other settings holds the folder); how long the ones that run
will take, from the recorded runs' own timings (`estimate_seconds`); and the plan as text
(`plan_text`, `refusal`). `experiments.replicate` plans the cells, checks and launches them.
"""

from __future__ import annotations

import functools
import json
import statistics
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from common.config import RunConfig
from common.records import STAGING
from common.run_identity import YAML_LOADER, recorded_changes
from experiments.run import compose, conf_dir


# ---- the replication file: replications/<method>/conf/replication.yaml -------------------------------
@dataclass
class Replication:
    arms: dict[str, list[str]]
    seeds: dict[str, list[int]]
    parallel: dict[str, int] = field(default_factory=dict)
    # arm -> the only scales it runs at (default: all)
    arm_scales: dict[str, list[str]] = field(default_factory=dict)
    # `make verify`'s cells, `arm` or `arm@seed` (default: first arm)
    verify: list[str] = field(default_factory=list)
    # arm -> scale -> its own seeds there (default: the scale's); an arm whose power rule asked other seeds
    arm_seeds: dict[str, dict[str, list[int]]] = field(default_factory=dict)

    def arms_at(self, scale: str) -> list[str]:
        """The arms that run at `scale`, in the file's order."""
        return [a for a in self.arms if scale in self.arm_scales.get(a, [scale])]

    def seeds_of(self, arm: str, scale: str) -> list[int]:
        """The seeds `arm` runs at `scale`: its own where `arm_seeds` names them, else the scale's."""
        return list(self.arm_seeds.get(arm, {}).get(scale, self.seeds[scale]))


def load_replication(method: str) -> Replication:
    path = conf_dir(method) / "replication.yaml"
    data = yaml.safe_load(path.read_text())
    # tune: experiments/tune.py
    unknown = set(data) - {"arms", "seeds", "parallel", "tune", "arm_scales", "verify", "arm_seeds"}
    if unknown:
        raise ValueError(f"{path}: unknown keys {sorted(unknown)}")
    arm_scales = {k: list(v) for k, v in (data.get("arm_scales") or {}).items()}
    arm_seeds = {a: {sc: [int(x) for x in v] for sc, v in by_scale.items()}
                 for a, by_scale in (data.get("arm_seeds") or {}).items()}
    verify = [str(v) for v in data.get("verify") or []]
    for key, named in (("arm_scales", set(arm_scales)), ("arm_seeds", set(arm_seeds)),
                       ("verify", {v.partition("@")[0] for v in verify})):
        if stray := sorted(named - set(data["arms"])):
            raise ValueError(f"{path}: {key} names arm(s) {stray} that are not in arms")
    return Replication({k: list(v or []) for k, v in data["arms"].items()}, data["seeds"],
                       data.get("parallel", {}), arm_scales, verify, arm_seeds)


# ---- cells ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One (arm, seed) training run of a replication."""

    method: str
    env: str
    arm: str
    seed: int
    scale: str
    overrides: tuple[str, ...]
    out_dir: str
    work_dir: str
    steps: int = 0

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.method / self.env / self.arm / f"seed-{self.seed}"

    def recorded_changes(self) -> list[str] | None:
        """How this cell's settings differ from the ones recorded in its run folder (None: nothing
        recorded)."""
        return recorded_changes(self.run_dir, _plain_config(self.method, self.overrides))

    @property
    def done(self) -> bool:
        """Finished with this cell's own config: a finished run of other settings (another
        trainer.lr, say) is not this cell's result, and `run_cell` refuses it with the difference."""
        return (self.run_dir / "done").exists() and not self.recorded_changes()

    @property
    def forced(self) -> bool:
        return "force=true" in self.overrides

    def state(self) -> CellState:
        """What running this cell would do, decided from its run folder alone (as `RunDir.prepare` will)."""
        changes = self.recorded_changes()
        finished = (self.run_dir / "done").exists()
        if self.forced:
            return CellState("forced rerun" if finished else "to run")
        if finished and not changes:
            return CellState("done")
        if changes:
            kind = "a finished run" if finished else "an unfinished run"
            return CellState("refused", f"{kind} with other settings ({'; '.join(changes)})")
        steps = _steps_recorded(self.run_dir)
        return CellState(f"to resume (from step {steps})" if steps else "to run")

    @property
    def name(self) -> str:
        return f"{self.method}/{self.env}/{self.arm}/seed-{self.seed}"


@dataclass(frozen=True)
class CellState:
    """A cell before it runs: `done` (skipped), `to run`, `to resume (...)`, `forced rerun`, or `refused`
    (a run of other settings holds its folder: `why` says which settings differ)."""

    state: str
    why: str = ""

    @property
    def runs(self) -> bool:
        return self.state not in ("done", "refused")

    def __str__(self) -> str:
        return f"{self.state}: {self.why}" if self.why else self.state


def _steps_recorded(run_dir: Path) -> int:
    path = run_dir / "metrics.jsonl"
    return sum(1 for line in path.read_text().splitlines() if line.strip()) if path.exists() else 0


# ---- how long a cell takes: the committed runs' own timings --------------------------------------
def run_seconds(run_dir: Path, scale: str | tuple[str, ...] | None = None) -> tuple[float, int] | None:
    """(wall-clock seconds, RL steps) of a finished run done in one attempt (started -> finished in its
    manifest); None for runs that were resumed (their span includes the pause), lack the times, or were
    run at another scale than `scale` (when given, one or several: a tiny model's step says nothing of
    SmolLM2's)."""
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        if manifest.get("attempts", 1) != 1 or not (run_dir / "done").exists():
            return None
        fmt = "%Y-%m-%dT%H:%M:%S%z"
        seconds = (datetime.strptime(manifest["finished"], fmt) - datetime.strptime(manifest["started"], fmt))
        config = yaml.load((run_dir / "config.yaml").read_text(), Loader=YAML_LOADER)
        steps = config["trainer"]["steps"]
        if scale is not None and config.get("scale") not in ((scale,) if isinstance(scale, str) else scale):
            return None
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError):
        return None
    return (seconds.total_seconds(), int(steps)) if seconds.total_seconds() > 0 else None


@functools.lru_cache(maxsize=64)
def _rate_table(root: Path, scales: tuple[str, ...]) -> dict[tuple[str, str], list[float]]:
    """(method, env) -> seconds per RL step (plus one) of every finished one-attempt run under
    root/<method>/<env>/<arm>/seed-* at `scales` (read once per process: ~900 runs take a second)."""
    table: dict[tuple[str, str], list[float]] = {}
    for run in root.glob("*/*/*/seed-*"):
        timed = run_seconds(run, scales)
        if timed is not None:
            table.setdefault((run.parts[-4], run.parts[-3]), []).append(timed[0] / (timed[1] + 1))
    return table


def _scaled_by_neighbours(method: str, env: str, table: dict[tuple[str, str], list[float]]) -> float | None:
    """The method's seconds per step on `env` where it never ran there: the other methods' median rate on
    `env` times how much slower than them the method is (the median, over the environments where both
    ran, of its median rate over theirs); without such an environment, the others' rate on `env` alone."""
    here = [r for (m, e), rates in table.items() if e == env and m != method for r in rates]
    if not here:
        return None
    ratios = []
    for (m, e), rates in table.items():
        others = [r for (m2, e2), rs in table.items() if e2 == e and m2 != method for r in rs]
        if m == method and others:
            ratios.append(statistics.median(rates) / statistics.median(others))
    return statistics.median(here) * (statistics.median(ratios) if ratios else 1.0)


def estimate_seconds(cell: Cell, committed: str | Path = RunConfig.out_dir) -> float | None:
    """How long `cell` will take, from the recorded runs nearest to it: the same arm's other seeds, else
    any arm of its method on its environment, else the other methods on its environment scaled by the
    method's speed against them elsewhere (`_scaled_by_neighbours`: a new column's cost, which the
    method's runs on other columns miss), else its method on any environment, always at the cell's
    scale (the one it is launched at or the one its config records: CCPO's `--scale dyad` composes
    `scale: cpu`); first under the cell's own out_dir, then under the committed results. The median
    seconds per RL step (plus one step: the evaluations) times the cell's steps; None when no recorded
    run is found."""
    roots = dict.fromkeys([Path(cell.out_dir), Path(cell.out_dir.split("/compare/")[0]), Path(committed)])
    recorded = _plain_config(cell.method, cell.overrides).get("scale", cell.scale)
    scales = tuple(dict.fromkeys([cell.scale, recorded]))
    for pattern in (f"{cell.method}/{cell.env}/{cell.arm}/seed-*", f"{cell.method}/{cell.env}/*/seed-*",
                    None, f"{cell.method}/*/*/seed-*"):
        for root in roots:
            if pattern is None:
                rate = _scaled_by_neighbours(cell.method, cell.env, _rate_table(root, scales))
                if rate is not None:
                    return rate * (cell.steps + 1)
                continue
            timed = filter(None, (run_seconds(r, scales) for r in root.glob(pattern)))
            rates = [t / (steps + 1) for t, steps in timed]
            if rates:
                return statistics.median(rates) * (cell.steps + 1)
    return None


def minutes(seconds: float | None) -> str:
    return ("time unknown" if seconds is None
            else f"~{seconds / 60:.0f} min" if seconds >= 90 else f"~{seconds:.0f} s")


def plan_text(cells: Sequence[Cell], parallel: int, overrides: bool = True,
              blocked: dict[str, str] | None = None) -> str:
    """Every cell's state and, for the ones that would run, the time its recorded neighbours took
    (`estimate_seconds`); then the totals (cells run `parallel` at a time). `blocked` ({cell name: why},
    `design_blocks`): cells the design check keeps from running, shown as such and not timed."""
    lines, total, running, unknown = [], 0.0, 0, 0
    counts: dict[str, int] = {}
    for c in cells:
        st = c.state()
        key = st.state.split(" (")[0]
        if st.runs and blocked and c.name in blocked:
            counts["skipped by the design check"] = counts.get("skipped by the design check", 0) + 1
            lines.append(f"{c.name}: skipped by the design check ({blocked[c.name]})")
            continue
        counts[key] = counts.get(key, 0) + 1
        if not st.runs:
            lines.append(f"{c.name}: {st}")
            continue
        est = estimate_seconds(c)
        total, running, unknown = total + (est or 0.0), running + 1, unknown + (est is None)
        lines.append(f"{c.name}: {st} ({minutes(est)})" + (f"  {' '.join(c.overrides)}" if overrides else ""))
    at_once = max(1, min(parallel, running))
    timing = "" if not running else (
        f", {minutes(total / at_once) if total else 'time unknown'}"
        + (f" ({at_once} at a time)" if at_once > 1 else "")
        + (f"; {unknown} of them with no recorded run to time by" if unknown and total else ""))
    summary = ", ".join(f"{n} {s}" for s, n in counts.items())
    lines.append(f"[plan] {len(cells)} cell(s): {summary}{timing}")
    return "\n".join(lines)


def refusal(cells: Sequence[Cell]) -> str | None:
    """One line per cell a run would refuse (a run of other settings holds its folder), or None."""
    refused = [(c, st) for c in cells if (st := c.state()).state == "refused"]
    if not refused:
        return None
    head = (f"{len(refused)} cell(s) hold runs of other settings; FORCE=1 reruns them (the finished records "
            "stay until each rerun is done), OUT=<folder> runs into another folder, or restore the settings:")
    return "\n".join([head, *(f"  {c.name}: {st.why}" for c, st in refused)])


@functools.lru_cache(maxsize=256)
def _plain_config(method: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    """A cell's resolved config as plain data, composed once (`Cell.done` is asked often)."""
    return asdict(compose(method, overrides))


# ---- the design check's gate (#36) ----------------------------------------------------------------
UNTESTABLE = ("void", "design null")


@functools.cache
def card_claims(method: str) -> frozenset[str] | None:
    """The ids of the claims the method's CARD makes now (None: no CARD to read)."""
    from paper.cards import parse_card

    try:
        path = conf_dir(method).parent / "CARD.md"
    except ValueError:
        return None
    return frozenset(c.id for c in parse_card(path.read_text()).claims) if path.exists() else None


def design_blocks(cells: Sequence[Cell], results: str | Path = "results") -> dict[str, str]:
    """{cell name: why} for the cells that would run although every claim naming their arm is void or a
    design null in the committed design check (`<results>/<method>/design.json`, checked at the cells'
    scale): their runs could not be evidence. An oracle arm counts the claims it is the positive control
    of (an oracle of void claims only would run for nothing). Arms no claim names, scales the check did
    not run at, and claims the CARD no longer makes (a design file older than the CARD's testbed) do not
    block."""
    blocks: dict[str, str] = {}
    files: dict[str, dict[str, Any] | None] = {}
    for c in cells:
        if c.method not in files:
            path = Path(results) / c.method / "design.json"
            files[c.method] = json.loads(path.read_text()) if path.exists() else None
        design = files[c.method]
        if not design or not c.state().runs:
            continue
        current = card_claims(c.method)
        claims = {cid: e for cid, e in design.get("claims", {}).items()
                  if (c.arm in e.get("arms", []) or (e.get("positive_control") or {}).get("arm") == c.arm)
                  and (current is None or cid in current)
                  and (e.get("checked_at") or {}).get("scale", design.get("scale")) == c.scale}
        if claims and all(e.get("gate") in UNTESTABLE for e in claims.values()):
            blocks[c.name] = "; ".join(f"{cid}: {e['gate']}" for cid, e in sorted(claims.items()))
    return blocks


def design_text(blocks: dict[str, str], forced: bool) -> str:
    """What the design check's gate does to the cells it blocks (`experiments.plan.design_blocks`)."""
    if not blocks:
        return ""
    head = (f"[replicate] FORCE_DESIGN: {len(blocks)} cell(s) run although the design check says none of "
            "their arm's claims can tell (recorded: force_design=true in their config)" if forced else
            f"[replicate] {len(blocks)} cell(s) not run: the design check (results/<method>/design.json) "
            "says none of their arm's claims can tell (void or design null); FORCE_DESIGN=1 runs them")
    return "\n".join([head, *(f"  {name}: {why}" for name, why in blocks.items())])


def progress_line(cells: list[Cell], queued: Collection[str] = (), running: Collection[str] = ()) -> str:
    """One status per cell: queued (waiting in this launch), steps (running: a forced rerun's old
    `done` does not count), or done."""
    parts = []
    for c in cells:
        forcing = Path(c.out_dir) / STAGING / c.method / c.env / c.arm / f"seed-{c.seed}" / "metrics.jsonl"
        # a FORCE rerun builds there
        p = forcing if c.name in running and forcing.exists() else c.run_dir / "metrics.jsonl"
        steps = len(p.read_text().splitlines()) if p.exists() else 0
        parts.append("queued" if c.name in queued
                     else "done" if c.done and c.name not in running else f"{steps}/{c.steps}")
    return " | ".join(f"{c.arm}/s{c.seed}: {s}" for c, s in zip(cells, parts, strict=True))
