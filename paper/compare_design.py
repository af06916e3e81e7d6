"""Can each cell of the head to head tell? The design check of `make compare` (#46), read from
`<results>/compare/design-<scale>.json` (experiments/compare_design.py writes it; this module reads JSON
and imports neither the runner nor the methods).

Each cell (method, env tag) has a gate: `pass`, `partial` (a figure unmeasured), `void` (GRPO does not
learn on the column's dev split, or the method's own design check voids its home claim) or `design null`
(every mechanism by which the method differs from GRPO is indistinguishable on one shared batch), with a
one-line reason. GRPO's own cells carry only the column's learnable gate; a cell the file does not name
takes GRPO's when that is void (the column learns nothing, so no cell there can tell).

A **void** or **design null** cell is *greyed*: the report writes its estimate with the gate and the
reason, the figure gives it its own grey category ("testbed cannot tell"), and its verdict is not counted
(`summary`), as paper/claims.py does for a card's claims. Without the file every cell is counted as before
and one line says the check was not run; a file that is not a design check is a problem `--strict` fails on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from paper.compare_plan import BASELINE, ComparePlan, read_scale_json
from paper.verdicts import DESIGN_NULL, VERDICTS, VOID

if TYPE_CHECKING:
    from paper.head_to_head import EnvComparison

GATES = ("pass", "partial", VOID, DESIGN_NULL)
GREYED = (VOID, DESIGN_NULL)  # the testbed cannot tell: greyed, not counted
CANNOT_TELL = "testbed cannot tell"  # the matrix figure's category of a greyed cell (paper/figures.py)
NOT_RUN = "design check not run"


@dataclass(frozen=True)
class Gate:
    """One cell's design check: its gate and why."""

    gate: str
    reason: str

    @property
    def greyed(self) -> bool:
        return self.gate in GREYED


@dataclass(frozen=True)
class CompareDesign:
    """`design-<scale>.json`: each cell's gate, and where and on what it was measured."""

    path: Path
    split: str
    margin: float | None
    commit: str | None
    dirty: bool
    cells: dict[tuple[str, str], Gate]  # (method, env tag) -> gate

    def gate(self, method: str, env: str) -> Gate | None:
        """The cell's gate; a cell the file does not name is void where GRPO's column is (None: not run)."""
        own = self.cells.get((method, env))
        column = self.cells.get((BASELINE, env))
        if own is None and column is not None and column.gate == VOID:
            return Gate(VOID, f"the column: {column.reason}")
        return own

    def greyed(self, method: str, env: str) -> Gate | None:
        g = self.gate(method, env)
        return g if g is not None and g.greyed else None


def design_path(root: Path, scale: str) -> Path:
    return root / "compare" / f"design-{scale}.json"


def load_design(root: Path, scale: str) -> CompareDesign | None:
    """The design check at `scale`, None when there is none; ValueError (one line) when the file is not
    one (its gates are checked; the rest is read as far as it is there)."""
    path = design_path(root, scale)
    data = read_scale_json(path, scale)
    if data is None:
        return None
    cells = data.get("cells")
    if not isinstance(cells, dict) or not all(isinstance(v, dict) for v in cells.values()):
        raise ValueError("cells is not a map of method -> env tag -> entry")
    out: dict[tuple[str, str], Gate] = {}
    for method, by_env in cells.items():
        for env, entry in by_env.items():
            gate = entry.get("gate") if isinstance(entry, dict) else None
            reason = entry.get("reason") if isinstance(entry, dict) else None
            if gate not in GATES or not isinstance(reason, str):
                raise ValueError(f"cells.{method}.{env} has no gate of {', '.join(GATES)} with a reason")
            out[method, env] = Gate(gate, " ".join(reason.split()))
    code = data["code"] if isinstance(data.get("code"), dict) else {}
    margin = data.get("margin") if isinstance(data.get("margin"), int | float) else None
    # experiments.compare_design writes common.provenance.git_state(): git_sha, git_dirty
    sha = code.get("git_sha", code.get("commit"))
    commit = sha if isinstance(sha, str) else None
    dirty = code.get("git_dirty", code.get("dirty")) is True
    return CompareDesign(path, str(data.get("split", "?")), margin, commit, dirty, out)


def read_design(root: Path, scale: str) -> tuple[CompareDesign | None, str | None]:
    """`load_design`, and why a file there is not a design check (`--strict` fails on it)."""
    try:
        return load_design(root, scale), None
    except ValueError as e:
        return None, f"not a design check of the comparison ({e})"


# ---- rendering ----------------------------------------------------------------------------------------
def cell_text(text: str, bare: str, design: CompareDesign | None, method: str, env: str) -> str:
    """A matrix cell: `text` (the estimate and verdict) and its design gate; a greyed cell is `bare` (the
    estimate alone; GRPO's baseline cell, with no verdict to count, has `bare` == `text`) after its gate
    and reason. Without a design file: `text`, as before."""
    if design is None:
        return text
    gate = design.gate(method, env)
    if gate is None:
        return f"{text}; {NOT_RUN}"
    if gate.greyed:
        return f"(greyed: {gate.gate} — {gate.reason}) {bare}" + (", not counted" if bare != text else "")
    return f"{text}; design: {gate.gate}"


def figure_cell(estimate: str, verdict: str, design: CompareDesign | None, method: str,
                env: str) -> tuple[str, str]:
    """A matrix figure cell's category and text: its verdict, and the gate beside it; a greyed cell is
    CANNOT_TELL and names its gate instead of a verdict. Without a design file: the verdict alone."""
    gate = design.gate(method, env) if design is not None else None
    if gate is not None and gate.greyed:
        return CANNOT_TELL, f"{estimate}: greyed,\n{gate.gate}"
    checked = "" if design is None else f"\ndesign: {gate.gate if gate else 'not run'}"
    return verdict, f"{estimate}: {verdict}{checked}"


def gate_text(gate: Gate | None) -> str:
    """The design column of the per-environment tables: the gate and its reason."""
    if gate is None:
        return NOT_RUN
    return f"{'greyed, ' if gate.greyed else ''}{gate.gate}: {gate.reason}"


def columns(design: CompareDesign | None) -> tuple[list[str], Callable[[str, str], list[str]],
                                                   Callable[[str, str, str], list[str]]]:
    """The per-environment tables' design column (none without a design file): its header, a method's
    cell (method, env) and a pair's (a, b, env: the greyed cells of the pair, '—' when none)."""
    if design is None:
        return [], lambda m, e: [], lambda a, b, e: []

    def pair(a: str, b: str, env: str) -> list[str]:
        grey = [f"{m} ({g.gate})" for m in (a, b) if (g := design.greyed(m, env)) is not None]
        return ["greyed: " + ", ".join(grey) if grey else "—"]

    return ["design check"], lambda m, e: [gate_text(design.gate(m, e))], pair


def summary(comparisons: list[EnvComparison], plan: ComparePlan | None, design: CompareDesign | None,
            root: Path, scale: str, why: str | None) -> list[str]:
    """The lines under the matrix: what the design check is (or why there is none), the counted verdicts
    of the matrix's cells against GRPO (greyed cells left out) and the greyed cells with their reasons."""
    path = design_path(root, scale)
    if design is not None:
        commit = f", commit {design.commit[:10]}{' (dirty)' if design.dirty else ''}" if design.commit else ""
        margin = f", margin {design.margin:g}" if design.margin is not None else ""
        head = (f"Design check (`{path}`, {design.split} split{margin}{commit}): a cell is greyed and not "
                "counted where its testbed cannot tell (void: GRPO does not learn there, or the method's own "
                "check voids its claim; design null: the method's update does not differ from GRPO's on the "
                "same episodes).")
    elif why:
        head = f"Design check: `{path}` is {why}; no cell is greyed, every verdict is counted."
    else:
        head = (f"Design check not run: there is no `{path}` (`make compare-design SCALE={scale}` writes "
                "it); no cell is greyed, every verdict is counted.")
    if plan is None:
        return [head, ""]
    by_env = {c.env: c for c in comparisons}
    counted: list[str] = []
    greyed: list[str] = []  # every greyed cell with a result, GRPO's own included
    left_out = unchecked = 0  # greyed verdicts; counted verdicts without a gate
    for m in plan.methods:
        for e in plan.envs:
            c = by_env.get(e)
            if not plan.applies[m, e] or c is None or m not in c.scores:
                continue
            g = design.gate(m, e) if design is not None else None
            verdict = c.vs_grpo_steps[m].verdict if m in c.vs_grpo_steps else None
            if g is not None and g.greyed:
                greyed.append(f"{m} on {e} ({g.gate}: {g.reason})")
                left_out += verdict is not None
            elif verdict is not None:
                counted.append(verdict)
                unchecked += design is not None and g is None
    tally = ", ".join(f"{counted.count(v)} {v}" for v in VERDICTS)
    notes = [f"{left_out} greyed left out"] if design is not None else []
    notes += [f"{unchecked} without a design check"] if unchecked else []
    cells = f"{len(counted)} cell{'' if len(counted) == 1 else 's'}"
    out = [head, "", f"Counted verdicts, method − GRPO at equal steps ({cells}"
           + "".join(f"; {x}" for x in notes) + f"): {tally}.", ""]
    if greyed:
        out += ["Greyed, not counted: " + "; ".join(greyed) + ".", ""]
    return out
