"""Read run directories (written by common/records.py) and sort them into counted and not counted.

    <results>/<method>/<env>/<arm>/seed-<k>/{config.yaml, manifest.json, metrics.jsonl, eval.json, done}

A run counts only if it has its `done` marker, every file parses with the shape and keys the
tables need (config and manifest are objects, eval.json holds an object per stage, every metrics
line is an object with an integer step), and metrics.jsonl has one row for every step
0..trainer.steps-1 of its config.yaml. Anything else under `results/` is kept as a `Problem`
(unfinished or invalid, with the reason) so the report can list it and `--strict` can fail on
it: nothing is silently dropped or averaged in.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

STAGES = ("initial", "final")
EVAL_KEYS = ("step", "k", "mean@k", "pass@k")
METRIC_KEYS = ("step", "generated_tokens_total", "model_calls_total")
_SEED_DIR = re.compile(r"^seed-(\d+)$")
# results/compare/ holds `make compare`'s runs, a results tree of its own (paper/head_to_head.py reads it)
COMPARE_DIR = "compare"


@dataclass
class Run:
    """One finished, valid run."""

    method: str
    env: str
    arm: str
    seed: int
    path: Path
    config: dict[str, Any]
    manifest: dict[str, Any]
    metrics: list[dict[str, Any]]  # sorted by step
    # {"initial": EvalResult (absent if eval.at_start=false), "final": ..., "history": [...]}
    evals: dict[str, Any]

    @property
    def git_sha(self) -> str:
        return str(self.manifest.get("git_sha", "unknown"))

    @property
    def git_dirty(self) -> bool:
        return bool(self.manifest.get("git_dirty", False))

    def eval_points(self) -> list[dict[str, Any]]:
        """initial, history and final evaluations, one per step, in step order."""
        by_step: dict[int, dict[str, Any]] = {}
        for result in [self.evals.get("initial"), *self.evals.get("history", []), self.evals["final"]]:
            if result is None:
                continue
            by_step[int(result["step"])] = result
        return [by_step[s] for s in sorted(by_step)]


@dataclass
class Problem:
    """A directory under results/ that is not counted, and why."""

    path: Path
    kind: str  # "unfinished" | "invalid"
    reason: str
    method: str = "?"
    env: str = "?"
    arm: str = "?"


@dataclass
class Results:
    runs: list[Run] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    root: Path | None = None  # the folder read (its <method>/design.json: the design checks)

    def methods(self) -> list[str]:
        return sorted({r.method for r in self.runs} | {p.method for p in self.problems if p.method != "?"})

    def of(self, method: str, env: str | None = None, arm: str | None = None) -> list[Run]:
        return [r for r in self.runs if r.method == method and (env is None or r.env == env)
                and (arm is None or r.arm == arm)]

    def problems_of(self, method: str) -> list[Problem]:
        return [p for p in self.problems if p.method == method]

    def at_scale(self, scale: str) -> Results:
        """The runs whose config.yaml says `scale`, and the problems that do (or cannot say)."""
        return Results([r for r in self.runs if r.config.get("scale") == scale],
                       [p for p in self.problems if _scale_of(p.path) in (scale, None)], self.root)


class InvalidRun(ValueError):
    pass


def _read_json(path: Path) -> Any:
    if not path.exists():
        raise InvalidRun(f"missing {path.name}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise InvalidRun(f"{path.name} is not valid JSON ({e.msg}, line {e.lineno})") from e


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _kind(x: Any) -> str:
    """What a JSON value is, for messages: 'a string', 'a number', 'a list' ..."""
    return {str: "a string", int: "a number", float: "a number", bool: "a boolean", list: "a list",
            dict: "an object", type(None): "null"}.get(type(x), type(x).__name__)


def _read_metrics(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        raise InvalidRun("missing metrics.jsonl")
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidRun(f"metrics.jsonl line {n} is not valid JSON ({e.msg})") from e
        if not isinstance(row, dict):
            raise InvalidRun(f"metrics.jsonl line {n} is {_kind(row)}, not an object")
        missing = [k for k in METRIC_KEYS if k not in row]
        if missing:
            raise InvalidRun(f"metrics.jsonl line {n} lacks {missing}")
        if not _is_int(row["step"]) or row["step"] < 0:
            raise InvalidRun(f"metrics.jsonl line {n}: step is {row['step']!r}, not an integer >= 0")
        rows.append(row)
    steps = [r["step"] for r in rows]
    if len(set(steps)) != len(steps):
        raise InvalidRun("metrics.jsonl has repeated steps")
    return sorted(rows, key=lambda r: r["step"])


def _check_steps(rows: list[dict[str, Any]], config: dict[str, Any]) -> None:
    """A finished run has one metrics row for each of its trainer.steps RL steps, no more, no fewer."""
    trainer = config.get("trainer")
    steps = trainer.get("steps") if isinstance(trainer, dict) else None
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise InvalidRun(f"config.yaml has no integer trainer.steps (got {steps!r})")
    have = {r["step"] for r in rows}
    missing = [s for s in range(steps) if s not in have]
    if missing:
        shown = ", ".join(map(str, missing[:5])) + (", ..." if len(missing) > 5 else "")
        raise InvalidRun(f"done, but metrics.jsonl has {len(have)} of trainer.steps={steps} rows "
                         f"({len(missing)} missing: step {shown})")
    extra = sorted(s for s in have if s >= steps)
    if extra:
        raise InvalidRun(f"metrics.jsonl has step {extra[0]}, beyond trainer.steps={steps} of config.yaml")


def _check_result(result: Any, where: str) -> None:
    """One EvalResult: an object with an integer step, k, and finite mean@k and pass@k."""
    if not isinstance(result, dict):
        raise InvalidRun(f"eval.json {where} is {_kind(result)}, not an object")
    missing = [k for k in EVAL_KEYS if k not in result]
    if missing:
        raise InvalidRun(f"eval.json {where} lacks {missing}")
    for key in ("step", "k"):
        if not _is_int(result[key]):
            raise InvalidRun(f"eval.json {where} {key} is {result[key]!r}, not an integer")
    for key in ("mean@k", "pass@k"):
        value = result[key]
        if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
            raise InvalidRun(f"eval.json {where} {key} is not a finite number: {result[key]!r}")


def _check_eval(evals: Any) -> None:
    if not isinstance(evals, dict):
        raise InvalidRun(f"eval.json is {_kind(evals)}, not an object")
    for stage in STAGES:
        if stage not in evals and stage == "initial":  # eval.at_start=false: no warm-start evaluation
            continue
        if evals.get(stage) is None:
            raise InvalidRun(f"eval.json has no {stage!r} result")
        _check_result(evals[stage], repr(stage))
    history = evals.get("history", [])
    if not isinstance(history, list):
        raise InvalidRun(f"eval.json history is {_kind(history)}, not a list")
    for n, result in enumerate(history):
        _check_result(result, f"history[{n}]")


def _read_mapping(path: Path) -> dict[str, Any]:
    """config.yaml or manifest.json: must hold an object (a mapping), not a string or a list."""
    if path.suffix == ".json":
        data = _read_json(path)
    else:
        if not path.exists():
            raise InvalidRun(f"missing {path.name}")
        try:
            data = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as e:
            raise InvalidRun(f"{path.name} does not parse ({e.__class__.__name__})") from e
    if not isinstance(data, dict):
        raise InvalidRun(f"{path.name} holds {_kind(data)}, not an object")
    return data


def load_run(path: Path, method: str, env: str, arm: str, seed: int) -> Run:
    """Parse one finished run directory; raises InvalidRun with the reason."""
    config = _read_mapping(path / "config.yaml")
    manifest = _read_mapping(path / "manifest.json")
    evals = _read_json(path / "eval.json")
    _check_eval(evals)
    metrics = _read_metrics(path / "metrics.jsonl")
    _check_steps(metrics, config)
    # a reused run (`make compare` links a method's own run under its compare arm's name) ran as the
    # arm its own folder names: that is the arm its manifest must say
    ran_as = path.resolve().parent.name if path.is_symlink() else arm
    for key, expected in (("method", method), ("env", env), ("arm", ran_as), ("seed", seed)):
        if key in manifest and manifest[key] != expected:
            raise InvalidRun(f"manifest.json says {key}={manifest[key]!r} "
                             f"but the directory says {expected!r}")
    return Run(method, env, arm, seed, path, config, manifest, metrics, evals)


def _scale_of(run_dir: Path) -> str | None:
    try:
        config = yaml.safe_load((run_dir / "config.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return None
    return str(config["scale"]) if isinstance(config, dict) and "scale" in config else None


def _count_lines(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except OSError:
        return 0


def load_results(root: Path) -> Results:
    """Every run directory under `root`; a missing root is an empty result set."""
    root = Path(root)
    results = Results(root=root)
    if not root.is_dir():
        return results
    for method_dir in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")
                             and p.name != COMPARE_DIR):
        for env_dir in sorted(p for p in method_dir.iterdir() if p.is_dir()):
            for arm_dir in sorted(p for p in env_dir.iterdir() if p.is_dir()):
                where = {"method": method_dir.name, "env": env_dir.name, "arm": arm_dir.name}
                for run_dir in sorted(p for p in arm_dir.iterdir() if p.is_dir()):
                    m = _SEED_DIR.match(run_dir.name)
                    if m is None:
                        results.problems.append(Problem(run_dir, "invalid", "not a seed-<k> directory",
                                                        **where))
                        continue
                    if not (run_dir / "done").exists():
                        steps = _count_lines(run_dir / "metrics.jsonl")
                        results.problems.append(Problem(run_dir, "unfinished",
                                                        f"no done marker ({steps} steps recorded)", **where))
                        continue
                    try:
                        results.runs.append(load_run(run_dir, seed=int(m.group(1)), **where))
                    except InvalidRun as e:
                        results.problems.append(Problem(run_dir, "invalid", str(e), **where))
    results.runs.sort(key=lambda r: (r.method, r.env, r.arm, r.seed))
    return results


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}; lists are kept as values."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out
