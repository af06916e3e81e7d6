"""The plan of the head to head, read: which methods and environments `make compare` compares at one scale,
where each method applies and how many seeds each environment runs, as `make compare` leaves it in
`<results>/compare/plan-<scale>.json` (experiments/compare.py: `write_plan`; the cpu scale's is committed).
paper/head_to_head.py draws its matrix from it; this module reads JSON and imports neither the runner nor
the methods. A file that is not a plan is a problem `--strict` fails on (`read_plan`).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BASELINE = "grpo"


@dataclass(frozen=True)
class ComparePlan:
    """What `make compare` plans at one scale, as it left it in `<results>/compare/plan-<scale>.json`
    (experiments/compare.py, `write_plan`): the matrix's rows and columns, where each method applies and
    each env's seeds (the home replication's at the scale)."""

    methods: list[str]  # GRPO first, then alphabetically
    envs: list[str]  # env tags, in experiments/compare.yaml's order
    applies: dict[tuple[str, str], bool]  # (method, env tag) -> whether the method runs there
    seeds: dict[str, int]  # env tag -> how many seeds the comparison runs there


def plan_path(root: Path, scale: str) -> Path:
    return root / "compare" / f"plan-{scale}.json"


def _names(value: object, what: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise ValueError(f"{what} is not a list of names")
    return value


def read_scale_json(path: Path, scale: str) -> dict[str, Any] | None:
    """A file `make compare` leaves for one scale (its plan, its design check) as a JSON object; None when
    there is none; ValueError (one line) when it is not readable JSON, not an object or of another scale."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"not readable JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("scale") != scale:
        raise ValueError(f"its scale is {data.get('scale')!r}, not {scale!r}")
    return data


def load_plan(root: Path, scale: str) -> ComparePlan | None:
    """The plan at `scale`, None when there is none; ValueError (one line) when the file is not one."""
    data = read_scale_json(plan_path(root, scale), scale)
    if data is None:
        return None
    methods, envs = _names(data.get("methods"), "methods"), _names(data.get("envs"), "envs")
    applies, seeds = data.get("applies"), data.get("seeds")
    if not isinstance(applies, dict) or not all(
            isinstance(applies.get(m), dict) and all(isinstance(applies[m].get(e), bool) for e in envs)
            for m in methods):
        raise ValueError("applies does not say for every method and env whether the method applies")
    if not isinstance(seeds, dict) or not all(
            isinstance(seeds.get(e), list) and all(type(s) is int for s in seeds[e]) for e in envs):
        raise ValueError("seeds does not list the seeds of every env")
    return ComparePlan(sorted(methods, key=lambda m: (m != BASELINE, m)), envs,
                {(m, e): applies[m][e] for m in methods for e in envs}, {e: len(seeds[e]) for e in envs})


def only(plan: ComparePlan, methods: Collection[str] | None, envs: Collection[str] | None) -> ComparePlan:
    """The plan's rows and columns that `methods` and `envs` name (None: all); GRPO's row always."""
    keep_m = [m for m in plan.methods if methods is None or m in methods or m == BASELINE]
    keep_e = [e for e in plan.envs if envs is None or e in envs]
    applies = {(m, e): plan.applies[m, e] for m in keep_m for e in keep_e}
    return ComparePlan(keep_m, keep_e, applies, {e: plan.seeds[e] for e in keep_e})


def read_plan(root: Path, scale: str) -> tuple[ComparePlan | None, str | None]:
    """`load_plan`, and why a file there is not a plan (`--strict` fails on it)."""
    try:
        return load_plan(root, scale), None
    except ValueError as e:
        return None, f"not a plan of the comparison ({e})"
