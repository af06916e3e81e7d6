"""Decide each card claim from the finished runs: paired by seed, t intervals, margins, power.

**The effect.** Per adjacent pair of the claimed order (A > B) and per env, the runs of A and B are
paired by seed over the seeds present in both (arms that share a seed share the warm start and the
task order; `a@final > a@initial` pairs each run with itself). The effect is the mean of the
per-seed differences A - B (over several envs: the mean of the per-env means) with a Student-t
interval (`common.stats.stratified_t_ci`); `n` is the number of pairs (the fewest over envs).

**Seeds needed** (a power calculation, which plans seeds and never decides a verdict): the n at which
a two-sided paired t-test at alpha 0.05 has 80% power to detect a difference equal to the claim's
margin, given the standard deviation of the per-seed differences in the runs at hand (the pilot;
`common.stats.paired_seeds_needed`), never below the floor. An ordering needs the most any pair needs.

**Verdicts** (rule v3, `table_verdict`), from the interval [lo, hi] of the difference, its pairs n and
the claim's margin m > 0, in this order:

- **inconclusive** when n < `SEEDS_FLOOR` (5): too few pairs for any interval to mean much;
- **no effect**: -m < lo and hi < m, the interval lies inside +-margin, whatever its sign (equivalence
  comes first: a difference smaller than what matters is not evidence for the claim, even when it is
  above 0);
- **holds**: lo > 0, the interval lies above 0 (and reaches past the margin, or it would be no effect);
- **opposite**: hi < 0;
- **inconclusive**: anything else.

Two more states come from the design check (`results/<method>/design.json`, `experiments/design.py`),
decided before the runs and never evidence: **void** (the testbed cannot train the control, or an
oracle arm does not beat it: nothing can be concluded here) and **design null** (the arms' credit or
updates do not differ on the same episodes: the result is a prediction of the design). Such a claim
keeps its interval verdict in `interval_verdict`.

**Pre-registration, per claim**: the commit that first wrote the claim with its current margin
(`git log` of its card) against the earliest start of its runs; **Holm**: over a method's primary
(`replication`) claims, the two-sided paired t-test p values adjusted by Holm's step-down method,
reported beside the raw verdict (`holm_p`).

An ordering is *opposite* if any pair is, else *no effect* if any pair is (the order fails at that
link), else *holds* if every pair holds, else *inconclusive*. A claim whose metric is missing from a
run is an **invalid claim**, a card or logging bug and not a verdict (`--strict` fails on it).

**Budget** (#16's equal budget and tuning): per arm of the claim, the settings that set its budget
(`BUDGET_KEYS`: learning rate, steps, episodes per step, updates, warm start) and its generated
tokens. Arms of the claimed order that differ in a setting, or in generated tokens by more than
`TOKEN_TOLERANCE`, get the difference printed beside the verdict as an automatic confound; where
the learning rate is the same for every arm the tuning is "one stated learning rate for every arm".

**Controls** (arms a claim names beside it) are compared with the claim's first term the same way,
paired by seed, and shown next to the verdict; they do not change it. Nor do the **confounds**.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common import stats
from paper.cards import CURVE_PREFIX, Card, Claim, Term
from paper.load import Results, Run
from paper.verdicts import (  # noqa: F401  (the verdict rule: importable from here as well)
    ALPHA,
    DESIGN_NULL,
    HOLDS,
    INCONCLUSIVE,
    INVALID,
    NO_EFFECT,
    OPPOSITE,
    OUTCOMES,
    POWER,
    RULE,
    SEEDS_FLOOR,
    SEEDS_FLOOR_SMALL_MARGIN,
    SMALL_MARGIN,
    VERDICTS,
    VOID,
    chain_verdict,
    holm,
    pair_verdict,
    paired_difference,
    paired_p_value,
    seeds_floor,
    seeds_for_margin,
    seeds_needed,
    table_verdict,
    verdict_note,
)

Values = dict[str, dict[int, float]]  # env -> seed -> the metric of that run

# the settings that set an arm's training budget and tuning (dotted keys of the run's config)
BUDGET_KEYS = ("trainer.lr", "trainer.steps", "trainer.tasks_per_step", "trainer.group_size",
               "trainer.ppo_epochs", "trainer.minibatches", "sft.enabled", "sft.steps", "sft.lr")
TOKEN_TOLERANCE = 0.10  # generated tokens differing by more than this fraction are a budget difference


def _setting(config: dict[str, Any], key: str) -> Any:
    node: Any = config
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return node


def budget_of(runs: list[Run]) -> dict[str, Any]:
    """An arm's budget: each BUDGET_KEYS setting (a list when its runs differ) and its mean generated
    tokens over the run (`generated_tokens_total` of the last metrics row; None without metrics)."""
    out: dict[str, Any] = {}
    for key in BUDGET_KEYS:
        values = list(dict.fromkeys(json_value(_setting(r.config, key)) for r in runs))
        out[key] = values[0] if len(values) == 1 else values
    tokens = [r.metrics[-1]["generated_tokens_total"] for r in runs
              if r.metrics and "generated_tokens_total" in r.metrics[-1]]
    out["generated_tokens"] = round(float(np.mean(tokens))) if tokens else None
    return out


def json_value(x: Any) -> Any:
    return x if isinstance(x, (int, float, str, bool)) or x is None else str(x)


def budget_differences(budgets: dict[str, dict[str, Any]]) -> list[str]:
    """What differs between the arms' budgets, one line per setting ('trainer.lr: a 0.001, b 0.002')."""
    if len(budgets) < 2:
        return []
    out = []
    for key in BUDGET_KEYS:
        values = {arm: b[key] for arm, b in budgets.items()}
        if len({json.dumps(v, sort_keys=True) for v in values.values()}) > 1:
            out.append(f"{key}: " + ", ".join(f"{arm} {v}" for arm, v in values.items()))
    tokens = {arm: b["generated_tokens"] for arm, b in budgets.items() if b["generated_tokens"]}
    if len(tokens) > 1 and max(tokens.values()) > (1 + TOKEN_TOLERANCE) * min(tokens.values()):
        out.append("generated tokens: " + ", ".join(f"{arm} {v:,}" for arm, v in tokens.items()))
    return out


def eval_value(result: dict[str, Any], metric: str) -> float:
    """A number in one EvalResult; `per_tier/3/mean@k` walks nested keys."""
    node: Any = result
    for part in metric.split("/"):
        if not isinstance(node, dict) or part not in node:
            have = sorted(node) if isinstance(node, dict) else []
            raise KeyError(f"no {part!r} (of {metric!r}); available: {have}")
        node = node[part]
    return float(node)


def curve_value(run: Run, key: str, window: int | None) -> float:
    """Mean of a metrics.jsonl key over the last `window` steps (None: every step)."""
    rows = [r for r in run.metrics if key in r and r[key] is not None]
    if not rows:
        have = sorted(run.metrics[0]) if run.metrics else []
        raise KeyError(f"metrics.jsonl has no {key!r}; available: {have}")
    rows = rows if window is None else rows[-window:]
    return float(np.mean([r[key] for r in rows]))


def run_value(run: Run, metric: str, stage: str | None, window: int | None = None) -> float:
    try:
        if metric.startswith(CURVE_PREFIX):
            return curve_value(run, metric[len(CURVE_PREFIX):], window)
        stage = stage or "final"
        if stage not in run.evals:
            raise KeyError(f"eval.json has no {stage!r} evaluation (run with eval.at_start=true)")
        return eval_value(run.evals[stage], metric)
    except KeyError as e:
        raise KeyError(f"{run.path}: {e.args[0]}") from None


@dataclass
class Paired:
    """better - worse over the seeds present in both, per env."""

    better: Term
    worse: Term
    n: int  # pairs: seeds present in both, the fewest over envs
    diff: stats.Interval  # mean of per-seed differences (mean over envs of per-env means), t interval
    sd: float  # pilot SD of the per-seed differences (per-env SDs combined as the estimate's); NaN if n < 2


@dataclass
class Pair(Paired):
    needed: int = SEEDS_FLOOR  # seeds (pairs) for 80% power at the margin
    verdict: str = INCONCLUSIVE  # what the interval says against the margin, before the power check


@dataclass
class Control(Paired):
    """The claim's first term against a control arm the card names (context, not deciding)."""

    value: stats.Interval = (float("nan"),) * 3  # the control arm's own mean, t interval


@dataclass
class ClaimResult:
    claim: Claim
    verdict: str
    note: str = ""
    values: dict[Term, stats.Interval] = field(default_factory=dict)  # each term's mean over seeds, t CI
    seeds: dict[str, dict[str, int]] = field(default_factory=dict)  # arm -> env -> finished seeds
    pairs: list[Pair] = field(default_factory=list)
    controls: list[Control] = field(default_factory=list)
    needed: int | None = None  # seeds needed (the most over pairs); None for an invalid claim
    n: int = 0  # pairs run (the fewest over pairs and envs)
    interval_verdict: str | None = None  # what the intervals alone say, whatever the power
    budget: dict[str, dict[str, Any]] = field(default_factory=dict)  # arm -> budget_of its runs (claimed)
    budget_differs: list[str] = field(default_factory=list)  # budget_differences of the claimed arms
    p_value: float = float("nan")  # two-sided paired t-test (an ordering: its least significant pair)
    holm_p: float = float("nan")  # p adjusted over the method's primary claims (Holm)
    design: dict[str, Any] | None = None  # the claim's entry of results/<method>/design.json
    preregistered: bool | None = None  # the margin's commit predates the claim's runs (None: unknown)


def paired(better: Term, worse: Term, x: Values, y: Values, envs: list[str], confidence: float) -> Paired:
    diffs = [np.array([x[env][s] - y[env][s] for s in sorted(set(x[env]) & set(y[env]))]) for env in envs]
    n = min(d.size for d in diffs)
    # the estimate's variance is sum_e sd_e^2 / (n E^2): one SD that gives it with n pairs
    sd = float(np.sqrt(sum(d.var(ddof=1) for d in diffs)) / len(diffs)) if n >= 2 else float("nan")
    return Paired(better, worse, n, stats.stratified_t_ci(diffs, confidence), sd)


def evaluate_claim(claim: Claim, results: Results, method: str, confidence: float = 0.95) -> ClaimResult:
    arms = list(dict.fromkeys([t.arm for t in claim.terms] + claim.controls))
    runs = {(arm, env): results.of(method, env, arm) for arm in arms for env in claim.envs}
    out = ClaimResult(claim, INCONCLUSIVE)
    out.seeds = {arm: {env: len(runs[arm, env]) for env in claim.envs} for arm in arms}
    claimed = list(dict.fromkeys(t.arm for t in claim.terms))
    out.budget = {arm: budget_of([r for env in claim.envs for r in runs[arm, env]]) for arm in claimed}
    out.budget_differs = budget_differences(out.budget)
    control_terms = [Term(c, claim.terms[0].stage) for c in claim.controls]
    try:
        values: dict[Term, Values] = {
            t: {env: {r.seed: run_value(r, claim.metric, t.stage, claim.window) for r in runs[t.arm, env]}
                for env in claim.envs} for t in [*claim.terms, *control_terms]}
    except KeyError as e:
        out.verdict, out.note = INVALID, str(e.args[0])
        return out
    bad = [f"{t.label()} on {env}" for t, per_env in values.items() for env, v in per_env.items()
           if not np.isfinite(list(v.values())).all()]
    if bad:
        out.verdict = INVALID
        out.note = f"{claim.metric} is not a finite number in some runs of " + ", ".join(bad)
        return out

    def mean(t: Term) -> stats.Interval:
        per_env = [list(values[t][env].values()) for env in claim.envs]
        return stats.stratified_t_ci(per_env, confidence) if all(per_env) else (float("nan"),) * 3

    out.values = {t: mean(t) for t in claim.terms}
    for better, worse in zip(claim.terms, claim.terms[1:], strict=False):
        p = paired(better, worse, values[better], values[worse], claim.envs, confidence)
        out.pairs.append(Pair(**vars(p), needed=seeds_needed(claim, p.sd),
                              verdict=pair_verdict(p.diff, claim.margin)))
    first = claim.terms[0]
    out.controls = [Control(**vars(paired(first, c, values[first], values[c], claim.envs, confidence)),
                            value=mean(c)) for c in control_terms]
    out.needed = max(p.needed for p in out.pairs)
    out.n = min(p.n for p in out.pairs)
    out.interval_verdict = chain_verdict([p.verdict for p in out.pairs])
    out.p_value = max(paired_p_value(p.diff, p.n, confidence) for p in out.pairs)
    out.verdict = out.interval_verdict if out.n >= SEEDS_FLOOR else INCONCLUSIVE
    out.note = verdict_note(out.n, out.needed, out.interval_verdict)
    return out


def evaluate_card(card: Card, results: Results, design: dict[str, Any] | None = None,
                  margin_commits: dict[str, float] | None = None) -> list[ClaimResult]:
    """Every claim of the card: its interval verdict, then the design check's gate where the design says
    it cannot be tested (void, design null), Holm over the primary claims, and pre-registration."""
    out = [evaluate_claim(c, results, card.method, card.confidence) for c in card.claims]
    gates = (design or {}).get("claims", {})
    for cr in out:
        cr.design = gates.get(cr.claim.id)
        gate = (cr.design or {}).get("gate")
        if gate in (VOID, DESIGN_NULL) and cr.verdict != INVALID:
            cr.verdict = gate
        committed = (margin_commits or {}).get(cr.claim.id)
        started = first_start(cr.claim, results, card.method)
        cr.preregistered = None if committed is None or started is None else committed < started
    primary = [cr for cr in out if cr.claim.kind == "replication" and cr.verdict in VERDICTS]
    for cr, adjusted in zip(primary, holm([cr.p_value for cr in primary]), strict=True):
        cr.holm_p = adjusted
    return out


def first_start(claim: Claim, results: Results, method: str) -> float | None:
    """The earliest `started` time (a POSIX timestamp) of the claim's runs; None without one."""
    from datetime import datetime

    times = []
    for arm in {t.arm for t in claim.terms}:
        for env in claim.envs:
            for run in results.of(method, env, arm):
                try:
                    started = datetime.strptime(str(run.manifest["started"]), "%Y-%m-%dT%H:%M:%S%z")
                    times.append(started.timestamp())
                except (KeyError, ValueError):
                    continue
    return min(times) if times else None


def _num(x: float) -> float | None:
    return None if x is None or np.isnan(x) else round(float(x), 6)


def _paired_json(p: Paired) -> dict[str, Any]:
    return {"better": p.better.label(), "worse": p.worse.label(), "pairs": p.n, "estimate": _num(p.diff[0]),
            "interval": [_num(p.diff[1]), _num(p.diff[2])], "pilot_sd": _num(p.sd)}


def claim_json(method: str, cr: ClaimResult, card: Card) -> dict[str, Any]:
    """One claim as `paper/claims.json` holds it: plain JSON, NaN as null, rounded to 6 digits."""
    c = cr.claim
    one = cr.pairs[0] if len(cr.pairs) == 1 else None
    return {
        "method": method, "id": c.id, "text": c.text, "kind": c.kind, "predicate": c.predicate,
        "envs": c.envs,
        "metric": c.metric, "window": c.window, "verdict": cr.verdict, "note": cr.note,
        "interval_verdict": cr.interval_verdict, "confidence": card.confidence,
        "seeds_per_arm": cr.seeds, "pairs": cr.n if cr.pairs else None,
        "estimate": _num(one.diff[0]) if one else None,
        "interval": [_num(one.diff[1]), _num(one.diff[2])] if one else None,
        "comparisons": [{**_paired_json(p), "seeds_needed": p.needed, "interval_verdict": p.verdict}
                        for p in cr.pairs],
        "margin": c.margin, "margin_why": c.margin_why,
        "margin_preregistered": (cr.preregistered if cr.preregistered is not None
                                 else card.margins_preregistered),
        "p_value": _num(cr.p_value), "holm_p": _num(cr.holm_p),
        "design": cr.design,
        "seeds_needed": cr.needed,
        "controls": [{"arm": k.worse.arm, **_paired_json(k), "control_mean": _num(k.value[0])}
                     for k in cr.controls],
        "confounds": c.confounds,
        "budget": cr.budget, "budget_differences": cr.budget_differs,
        "tuning": ("one stated learning rate for every arm" if cr.budget and not any(
            d.startswith("trainer.lr:") for d in cr.budget_differs)
            else "learning rates differ: see budget_differences"),
    }
