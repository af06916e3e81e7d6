"""Decide each card claim from the finished runs, by intervals.

Per adjacent pair of the claimed order (A > B), the effect is mean(A) - mean(B) over seeds
(the mean over envs of per-env means when a claim spans several envs), with a 95% bootstrap
interval (common/stats.py):

- same arm at two stages (`grpo@final > grpo@initial`): the runs are paired, so the interval is
  the stratified bootstrap of per-seed differences;
- two arms: unpaired, each arm's runs resampled independently within each env.

Verdict of a pair: **holds** if the interval's lower bound is > 0; **does not hold** if the
point estimate is <= 0 (no effect or the wrong sign); **inconclusive** otherwise (right sign, but
the interval reaches 0). A chain (ordering) holds if every pair holds, does not hold if any pair
does not, and is inconclusive otherwise. Before any of this, every arm in the claim needs
`min_seeds` finished runs in every env of the claim, or the verdict is **not enough runs**. A
claim whose metric is missing from a run is an **invalid claim** (a card or logging bug).
P(improvement) (Agarwal et al. 2021) is reported beside it and does not decide.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from common import stats
from paper.cards import CURVE_PREFIX, Card, Claim, Term
from paper.load import Results, Run

HOLDS, INCONCLUSIVE, FAILS, TOO_FEW, INVALID = "holds", "inconclusive", "does not hold", "not enough runs", "invalid claim"
VERDICTS = (HOLDS, INCONCLUSIVE, FAILS, TOO_FEW, INVALID)
N_BOOT = 2000
SEED = 0


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
class Pair:
    better: Term
    worse: Term
    paired: bool
    diff: stats.Interval  # mean(better) - mean(worse)
    prob: stats.Interval  # P(better > worse)
    verdict: str


@dataclass
class ClaimResult:
    claim: Claim
    verdict: str
    note: str = ""
    values: dict[Term, stats.Interval] = field(default_factory=dict)
    seeds: dict[str, dict[str, int]] = field(default_factory=dict)  # arm -> env -> finished seeds
    pairs: list[Pair] = field(default_factory=list)


def pair_verdict(diff: stats.Interval) -> str:
    point, lo, _ = diff
    if point <= 0:
        return FAILS
    return HOLDS if lo > 0 else INCONCLUSIVE


def chain_verdict(verdicts: list[str]) -> str:
    if any(v == FAILS for v in verdicts):
        return FAILS
    return HOLDS if all(v == HOLDS for v in verdicts) else INCONCLUSIVE


def evaluate_claim(claim: Claim, results: Results, method: str, confidence: float = 0.95) -> ClaimResult:
    arms = list(dict.fromkeys(t.arm for t in claim.terms))
    runs = {(arm, env): results.of(method, env, arm) for arm in arms for env in claim.envs}
    out = ClaimResult(claim, TOO_FEW)
    out.seeds = {arm: {env: len(runs[arm, env]) for env in claim.envs} for arm in arms}
    short = [f"{arm} on {env}: {len(rs)} of {claim.min_seeds}" for (arm, env), rs in runs.items()
             if len(rs) < claim.min_seeds]
    if short:
        out.note = f"needs {claim.min_seeds} finished seeds per arm and env; has " + "; ".join(short)
        return out
    try:
        values = {t: [np.array([run_value(r, claim.metric, t.stage, claim.window) for r in runs[t.arm, env]])
                      for env in claim.envs] for t in claim.terms}
    except KeyError as e:
        out.verdict, out.note = INVALID, str(e.args[0])
        return out
    bad = [f"{t.label()} on {env}" for t, per_env in values.items() for env, v in zip(claim.envs, per_env, strict=True)
           if not np.isfinite(v).all()]
    if bad:
        out.verdict, out.note = INVALID, f"{claim.metric} is not a finite number in some runs of " + ", ".join(bad)
        return out
    ci: dict[str, Any] = {"confidence": confidence, "n_boot": N_BOOT, "seed": SEED}
    out.values = {t: stats.stratified_bootstrap_ci(v, "mean", **ci) for t, v in values.items()}
    for better, worse in zip(claim.terms, claim.terms[1:], strict=False):
        x, y = values[better], values[worse]
        paired = better.arm == worse.arm
        if paired:  # the same runs at two stages: bootstrap the per-seed differences
            diff = stats.stratified_bootstrap_ci([a - b for a, b in zip(x, y, strict=True)], "mean", **ci)
        else:
            diff = stats.difference_ci(x, y, "mean", **ci)
        prob = stats.probability_of_improvement(x, y, **ci)
        out.pairs.append(Pair(better, worse, paired, diff, prob, pair_verdict(diff)))
    out.verdict = chain_verdict([p.verdict for p in out.pairs])
    return out


def evaluate_card(card: Card, results: Results) -> list[ClaimResult]:
    return [evaluate_claim(c, results, card.method, card.confidence) for c in card.claims]
