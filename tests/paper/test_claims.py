"""paper/load.py and paper/claims.py on the fixture runs (tests/paper/fixtures)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from paper.cards import load_cards
from paper.claims import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    INVALID,
    TOO_FEW,
    chain_verdict,
    evaluate_card,
    pair_verdict,
)
from paper.load import load_results

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    return load_results(FIXTURES / "results")


@pytest.fixture(scope="module")
def cards():
    cards, errors = load_cards([REPO / "replications", FIXTURES / "cards"])
    assert "toy" in cards and "grpo" in cards, errors
    return cards


def reference_mean_ci(x, n_boot=2000, seed=0):
    x = np.asarray(x, dtype=float)
    rng = np.random.default_rng(seed)
    means = [x[row].mean() for row in rng.integers(0, len(x), size=(n_boot, len(x)))]
    return x.mean(), np.quantile(means, 0.025), np.quantile(means, 0.975)


def test_only_finished_valid_runs_count(results):
    assert [r.seed for r in results.of("grpo", "arith", "grpo")] == [0, 1, 2, 3]
    problems = {p.path.name: p for p in results.problems_of("grpo")}
    assert problems["seed-4"].kind == "unfinished" and "no done marker (2 steps recorded)" in problems["seed-4"].reason
    assert problems["seed-5"].kind == "invalid" and "eval.json is not valid JSON" in problems["seed-5"].reason


def test_missing_root_is_empty(tmp_path):
    r = load_results(tmp_path / "nothing")
    assert r.runs == [] and r.problems == []


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda p: (p / "config.yaml").unlink(), "missing config.yaml"),
        (lambda p: (p / "metrics.jsonl").write_text('{"step": 0}\n'), "lacks"),
        (lambda p: (p / "eval.json").write_text('{"initial": {}}'), "lacks"),
        (lambda p: (p / "manifest.json").write_text(json.dumps({"arm": "other"})), "manifest.json says arm"),
        (lambda p: (p / "eval.json").write_text((p / "eval.json").read_text().replace('"mean@k": 0.45', '"mean@k": NaN')),
         "mean@k is not a finite number"),
    ],
)
def test_invalid_runs_say_why(tmp_path, damage, reason):
    run = tmp_path / "m/e/a/seed-0"
    shutil.copytree(FIXTURES / "results/grpo/arith/grpo/seed-0", run)
    damage(run)
    r = load_results(tmp_path)
    assert r.runs == [] and len(r.problems) == 1
    assert r.problems[0].kind == "invalid" and reason in r.problems[0].reason


def test_grpo_claim_is_paired_and_matches_a_hand_computation(results, cards):
    [cr] = evaluate_card(cards["grpo"], results)
    assert cr.verdict == HOLDS and cr.seeds == {"grpo": {"arith": 4}}
    [pair] = cr.pairs
    # per-seed final - initial of seeds 0-3 (seeds 4 and 5 are not counted)
    diffs = [0.45 - 0.30, 0.41 - 0.28, 0.50 - 0.33, 0.47 - 0.31]
    assert pair.paired and pair.diff == pytest.approx(reference_mean_ci(diffs))
    assert pair.diff[0] == pytest.approx(0.1525)
    assert pair.prob[0] == 1.0  # every final beats every initial


def test_toy_verdicts(results, cards):
    by_id = {cr.claim.id: cr for cr in evaluate_card(cards["toy"], results)}
    assert {k: v.verdict for k, v in by_id.items()} == {
        "better-beats-base": HOLDS, "ordering": INCONCLUSIVE, "both-envs": HOLDS, "entropy-collapses": HOLDS,
        "few-seeds": TOO_FEW, "reversed": FAILS, "warm-start": HOLDS, "missing-metric": INVALID}
    assert "few on grid: 2 of 3" in by_id["few-seeds"].note
    assert "nonexistent" in by_id["missing-metric"].note
    # an unpaired difference of means: better (0.50, 0.52, 0.55) - base (0.30, 0.32, 0.34)
    [pair] = by_id["better-beats-base"].pairs
    assert not pair.paired and pair.diff[0] == pytest.approx(0.5233333 - 0.32)
    # the ordering fails to be shown on its first pair only
    assert [p.verdict for p in by_id["ordering"].pairs] == [INCONCLUSIVE, HOLDS]
    # stratified over two envs: the mean of per-env means
    both = by_id["both-envs"].values
    assert [v[0] for v in both.values()] == pytest.approx([(0.5233333 + 0.2566667) / 2, (0.32 + 0.1633333) / 2])
    # curve claim "better < base" on the mean of the last 2 entropy values, tested as base > better
    entropy = by_id["entropy-collapses"]
    assert [t.arm for t in entropy.claim.terms] == ["base", "better"]


def test_pair_and_chain_verdicts():
    nan = float("nan")
    assert pair_verdict((0.1, 0.01, 0.2)) == HOLDS
    assert pair_verdict((0.1, -0.01, 0.2)) == INCONCLUSIVE
    assert pair_verdict((0.1, nan, nan)) == INCONCLUSIVE  # one seed: no interval, no verdict
    assert pair_verdict((0.0, -0.1, 0.1)) == FAILS
    assert pair_verdict((-0.05, -0.1, 0.01)) == FAILS
    assert chain_verdict([HOLDS, HOLDS]) == HOLDS
    assert chain_verdict([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert chain_verdict([INCONCLUSIVE, FAILS]) == FAILS


def test_a_run_without_a_warm_start_evaluation_counts_but_cannot_pair(tmp_path, cards):
    for seed in range(3):
        shutil.copytree(FIXTURES / f"results/grpo/arith/grpo/seed-{seed}", tmp_path / f"grpo/arith/grpo/seed-{seed}")
    evals = tmp_path / "grpo/arith/grpo/seed-1/eval.json"
    data = json.loads(evals.read_text())
    del data["initial"]  # eval.at_start=false
    evals.write_text(json.dumps(data))
    results = load_results(tmp_path)
    assert len(results.runs) == 3 and results.problems == []
    [cr] = evaluate_card(cards["grpo"], results)
    assert cr.verdict == INVALID and "no 'initial' evaluation" in cr.note
