"""River's environment filter: an audit that keeps only environments it judges Clean, then an oracle
agent with two tries (pass@2) that drops the tasks it cannot solve.

The audit is simulated with the paper's own measured quality, since it is not perfect. The paper
re-judged the audit independently and reports three numbers: the two verdicts agree on 83.3% of
environments (accuracy a), 89.5% of the defect flags are confirmed (precision of a flag, p) and
40% of the Clean verdicts are confirmed (precision of Clean, n). With f the share flagged and
pi the share truly defective (the re-judge taken as truth):

    a  = p f + n (1 - f)              =>  f  = (a - n) / (p - n)
    pi = p f + (1 - n)(1 - f)
    sensitivity  P(flag | defective) = p f / pi
    specificity  P(Clean | clean)    = n (1 - f) / (1 - pi)

(a, p, n) = (0.833, 0.895, 0.40) give f = 0.875, pi = 0.858, sensitivity = 0.912 and specificity
= 0.353: the audit catches most defects and also flags most clean environments (a filter that
keeps about a quarter of the environments; the paper kept ~3.5K of 14.4K). The simulated audit
flags each task independently with these two rates, whatever its defect; its confusion matrix
against the generator's known labels is reported. `audit_rates` is tested against this
derivation by hand.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from envs.api.base import Observation

PAPER_AGREEMENT = 0.833  # [S] audit vs an independent re-judge
PAPER_FLAG_PRECISION = 0.895  # [S] defect flags confirmed
PAPER_CLEAN_PRECISION = 0.40  # [S] Clean verdicts confirmed


@dataclass(frozen=True)
class AuditRates:
    flagged: float  # share of environments the audit flags (f)
    prevalence: float  # share truly defective (pi)
    sensitivity: float  # P(flag | defective)
    specificity: float  # P(Clean verdict | clean)


def audit_rates(agreement: float = PAPER_AGREEMENT, flag_precision: float = PAPER_FLAG_PRECISION,
                clean_precision: float = PAPER_CLEAN_PRECISION) -> AuditRates:
    """The audit's sensitivity and specificity implied by its agreement with a re-judge and the
    precision of its two verdicts (the module docstring's derivation).

    >>> r = audit_rates()
    >>> round(r.flagged, 3), round(r.prevalence, 3), round(r.sensitivity, 3), round(r.specificity, 3)
    (0.875, 0.858, 0.912, 0.353)
    """
    if not flag_precision > clean_precision:
        raise ValueError("the flag precision must exceed the Clean precision for the rates to be identified")
    f = (agreement - clean_precision) / (flag_precision - clean_precision)
    if not 0 < f < 1:
        raise ValueError(f"agreement {agreement} is not between the two precisions: no consistent audit")
    prevalence = flag_precision * f + (1 - clean_precision) * (1 - f)
    return AuditRates(f, prevalence, flag_precision * f / prevalence,
                      clean_precision * (1 - f) / (1 - prevalence))


def simulate_audit(defects: list[str], rates: AuditRates, rng: random.Random) -> list[bool]:
    """Per task, whether the audit flags it (True) or calls it Clean (False)."""
    return [rng.random() < (rates.sensitivity if d != "clean" else 1 - rates.specificity) for d in defects]


@dataclass
class FilterReport:
    """What the filter kept, and how good each stage was against the generator's known labels."""

    kept: list[int]  # indices of the train split kept (audit Clean and oracle pass@2)
    audit: dict[str, dict[str, int]]  # true defect -> {"flagged": n, "clean": n}
    oracle: dict[str, dict[str, int]]  # true defect of the audit's Clean tasks -> {"solved": n, "failed": n}
    kept_by_defect: dict[str, int] = field(default_factory=dict)
    rates: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def confusion(defects: list[str], flags: list[bool]) -> dict[str, dict[str, int]]:
    """True defect -> counts of the audit's verdicts ("flagged", "clean")."""
    table: dict[str, dict[str, int]] = {}
    for d, flagged in zip(defects, flags, strict=True):
        row = table.setdefault(d, {"flagged": 0, "clean": 0})
        row["flagged" if flagged else "clean"] += 1
    return dict(sorted(table.items()))


def label(task: dict[str, Any]) -> str:
    """A task's audit label: its `defect` field; a task without one is clean."""
    return str(task.get("defect", "clean"))


def river_filter(tasks: list[dict[str, Any]], oracle_solves: Any, rates: AuditRates, seed: int,
                 tries: int = 2, defect_of: Callable[[dict[str, Any]], str] = label) -> FilterReport:
    """River's two stages over the train tasks (`tasks`: parsed task dicts; `defect_of(task)`: its audit
    label, the environment's `defect_of`, envs.api.protocols.AuditLabels).

    `oracle_solves(task, attempt) -> bool` plays the scripted oracle once (attempt 0, 1, ...);
    a task is kept when the audit calls it Clean and one of `tries` attempts passes its verifier.
    """
    rng = random.Random(seed)
    defects = [defect_of(t) for t in tasks]
    flags = simulate_audit(defects, rates, rng)
    kept: list[int] = []
    oracle_table: dict[str, dict[str, int]] = {}
    for i, (task, flagged) in enumerate(zip(tasks, flags, strict=True)):
        if flagged:
            continue
        solved = any(oracle_solves(task, attempt) for attempt in range(tries))
        row = oracle_table.setdefault(defects[i], {"solved": 0, "failed": 0})
        row["solved" if solved else "failed"] += 1
        if solved:
            kept.append(i)
    return FilterReport(kept, confusion(defects, flags), dict(sorted(oracle_table.items())),
                        dict(sorted(Counter(defects[i] for i in kept).items())),
                        {k: float(v) for k, v in dataclasses.asdict(rates).items()})


def scripted_oracle(env: Any, filter_seed: int) -> Callable[[dict[str, Any], int], bool]:
    """The scripted oracle: the environment's demonstrator without its injected errors (its `oracle_settings`,
    which also set its defect shares to 0: the given tasks play by their own verifiers), in the same sandbox.
    `filter_seed` seeds its tries."""
    oracle_cfg = dataclasses.replace(env.cfg, **env.oracle_settings)
    oracle_env = type(env)(oracle_cfg)

    def solves(task: dict[str, Any], attempt: int) -> bool:
        # each task's tries draw their own choices (an ambiguous task's guess), independent of other
        # tasks'
        seed = f"oracle/{filter_seed}/{attempt}/{json.dumps(task, sort_keys=True)}"
        state = oracle_env.new_episode(task, random.Random(hashlib.sha256(seed.encode()).hexdigest()))
        obs: Observation | None = state.start()
        result = None
        while obs is not None:
            result = state.step(state.expert_action())
            obs = result.next
        return bool(result is not None and result.reward > 0)

    return solves


def random_subset(n_pool: int, size: int, seed: int) -> list[int]:
    """The control: `size` train indices drawn uniformly without replacement (sorted)."""
    return sorted(random.Random(seed).sample(range(n_pool), size))


def cached_filter(env: Any, audit: tuple[float, float, float], tries: int, seed: int,
                  work_dir: str) -> FilterReport:
    """`river_filter` over `env`'s train split with the audit's (agreement, flag precision, Clean
    precision), computed once and cached under `work_dir` (it plays the oracle: tens of seconds in the
    sandbox), keyed by everything it depends on."""
    from common.episode import tasks_of
    from common.util import atomic_write_text

    key = json.dumps([dataclasses.asdict(env.cfg), *audit, tries, seed], sort_keys=True, default=str)
    path = Path(work_dir) / "river" / f"filter-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"
    if path.exists():
        return FilterReport(**json.loads(path.read_text()))
    tasks = [t.data for t in tasks_of(env.task_set()["train"])]
    report = river_filter(tasks, scripted_oracle(env, seed), audit_rates(*audit), seed, tries, env.defect_of)
    atomic_write_text(path, json.dumps(report.to_json(), sort_keys=True))
    return report
