"""paper/load.py and paper/claims.py on the fixture runs (tests/paper/fixtures) and on runs written here."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from common import stats
from paper.cards import load_cards, parse_card
from paper.claims import (
    DESIGN_NULL,
    HOLDS,
    INCONCLUSIVE,
    INVALID,
    NO_EFFECT,
    OPPOSITE,
    VOID,
    chain_verdict,
    claim_json,
    evaluate_card,
    holm,
    pair_verdict,
    paired_p_value,
    table_verdict,
)
from paper.load import load_results

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
assert _spec and _spec.loader
make_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(make_fixtures)  # its write_run, pointed at a tmp folder by the tests below
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    return load_results(FIXTURES / "results")


@pytest.fixture(scope="module")
def cards():
    cards, errors = load_cards([REPO / "replications", FIXTURES / "cards"])
    assert "toy" in cards and "grpo" in cards, errors
    return cards


def t_ci(x):
    """mean +- t_{0.975, n-1} s / sqrt(n), written out with SciPy's t quantile."""
    from scipy import stats as sps

    x = np.asarray(x, dtype=float)
    half = sps.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / np.sqrt(len(x))
    return x.mean(), x.mean() - half, x.mean() + half


def test_only_finished_valid_runs_count(results):
    assert [r.seed for r in results.of("grpo", "arith", "grpo")] == [0, 1, 2, 3]
    problems = {p.path.name: p for p in results.problems_of("grpo")}
    assert problems["seed-4"].kind == "unfinished"
    assert "no done marker (2 steps recorded)" in problems["seed-4"].reason
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
        (lambda p: (p / "eval.json").write_text(
            (p / "eval.json").read_text().replace('"mean@k": 0.45', '"mean@k": NaN')),
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
    cr = evaluate_card(cards["grpo"], results)[0]  # beats-warm-start; its controls have no runs here
    assert cr.seeds == {"grpo": {"arith": 4}, "online-rft": {"arith": 0}, "clean-sft": {"arith": 0}}
    [pair] = cr.pairs
    # per-seed final - initial of seeds 0-3 (seeds 4 and 5 are not counted)
    diffs = [0.45 - 0.30, 0.41 - 0.28, 0.50 - 0.33, 0.47 - 0.31]
    assert pair.n == 4 and pair.diff == pytest.approx(t_ci(diffs))
    assert pair.diff[0] == pytest.approx(0.1525)
    # 4 pairs, fewer than the 5 the power floor asks for: inconclusive, whatever the interval says
    assert pair.sd == pytest.approx(np.std(diffs, ddof=1)) and pair.needed == cr.needed == 5
    assert cr.verdict == INCONCLUSIVE and cr.interval_verdict == HOLDS
    assert cr.note == "fewer than 5 pairs (n=4); the interval alone says holds"
    assert cr.claim.kind == "sanity" and cr.claim.confounds


def test_toy_verdicts_are_inconclusive_under_5_pairs(results, cards):
    by_id = {cr.claim.id: cr for cr in evaluate_card(cards["toy"], results)}
    assert {k: v.verdict for k, v in by_id.items()} == {
        "better-beats-base": INCONCLUSIVE, "ordering": INCONCLUSIVE, "both-envs": INCONCLUSIVE,
        "entropy-collapses": INCONCLUSIVE, "few-seeds": INCONCLUSIVE, "reversed": INCONCLUSIVE,
        "warm-start": INCONCLUSIVE, "missing-metric": INVALID}
    assert by_id["better-beats-base"].note.startswith(
        "fewer than 5 pairs (n=3); the interval alone says holds")
    assert by_id["reversed"].interval_verdict == OPPOSITE
    assert by_id["few-seeds"].note.startswith("fewer than 5 pairs (n=2)")
    assert "nonexistent" in by_id["missing-metric"].note and by_id["missing-metric"].needed is None
    # paired by seed: better (0.50, 0.52, 0.55) - base (0.30, 0.32, 0.34), seed by seed
    [pair] = by_id["better-beats-base"].pairs
    assert pair.n == 3 and pair.diff == pytest.approx(t_ci([0.20, 0.20, 0.21]))
    # the ordering: each adjacent pair paired, the most seeds any pair needs
    assert [p.verdict for p in by_id["ordering"].pairs] == [INCONCLUSIVE, HOLDS]
    assert by_id["ordering"].needed == max(p.needed for p in by_id["ordering"].pairs)
    # stratified over two envs: the mean of per-env means, of values and of differences
    both = by_id["both-envs"]
    assert [v[0] for v in both.values.values()] == pytest.approx([(0.5233333 + 0.2566667) / 2,
                                                                  (0.32 + 0.1633333) / 2])
    assert both.pairs[0].diff == pytest.approx(
        stats.stratified_t_ci([[0.20, 0.20, 0.21], [0.10, 0.10, 0.08]]))
    # curve claim "better < base" on the mean of the last 2 entropy values, tested as base > better
    assert [t.arm for t in by_id["entropy-collapses"].claim.terms] == ["base", "better"]


def test_controls_and_confounds_travel_with_the_claim(results, cards):
    cr = next(c for c in evaluate_card(cards["toy"], results) if c.claim.id == "better-beats-base")
    [control] = cr.controls
    assert (control.better.arm, control.worse.arm, control.n) == ("better", "best", 3)
    # better (0.50, 0.52, 0.55) - best (0.51, 0.58, 0.53), paired by seed
    assert control.diff == pytest.approx(t_ci([-0.01, -0.06, 0.02]))
    assert control.value == pytest.approx(t_ci([0.51, 0.58, 0.53]))
    assert cr.verdict == INCONCLUSIVE  # a control never decides
    data = claim_json("toy", cr, cards["toy"])
    assert data["controls"][0]["arm"] == "best" and data["controls"][0]["pairs"] == 3
    assert data["confounds"] == ["better also trains twice as long (a made-up confound)"]
    assert (data["margin"], data["seeds_needed"], data["pairs"], data["margin_preregistered"]) == (
        0.05, 5, 3, False)
    assert data["seeds_per_arm"] == {"better": {"grid": 3}, "base": {"grid": 3}, "best": {"grid": 3}}
    assert data["estimate"] == pytest.approx(0.203333, abs=1e-6) and len(data["interval"]) == 2


def test_pair_and_chain_verdicts():
    nan = float("nan")
    margin = 0.05
    assert pair_verdict((0.1, 0.01, 0.2), margin) == HOLDS
    # rule v3: equivalence first: an interval inside the margin is no effect, above 0 or below it
    assert pair_verdict((0.01, 0.001, 0.02), margin) == NO_EFFECT
    assert pair_verdict((-0.01, -0.02, -0.001), margin) == NO_EFFECT
    assert pair_verdict((-0.1, -0.2, -0.01), margin) == OPPOSITE
    assert pair_verdict((0.0, -0.04, 0.04), margin) == NO_EFFECT
    assert pair_verdict((0.0, -0.06, 0.04), margin) == INCONCLUSIVE  # reaches past -margin
    assert pair_verdict((0.1, -0.01, 0.2), margin) == INCONCLUSIVE
    assert pair_verdict((0.1, nan, nan), margin) == INCONCLUSIVE  # one seed: no interval, no verdict
    assert chain_verdict([HOLDS, HOLDS]) == HOLDS
    assert chain_verdict([HOLDS, INCONCLUSIVE]) == INCONCLUSIVE
    assert chain_verdict([HOLDS, NO_EFFECT, INCONCLUSIVE]) == NO_EFFECT
    assert chain_verdict([NO_EFFECT, OPPOSITE, HOLDS]) == OPPOSITE


# ---- the four verdicts on runs with enough seeds -----------------------------------------------
CARD = """---
method: m
title: M
paper: "Someone 2026"
claims:
{claims}
---
"""


def claim_card(predicate: str, margin: float = 0.05, extra: str = ""):
    return parse_card(CARD.format(claims=f"  - {{id: c, text: C, predicate: '{predicate}', env: e, "
                                         f"margin: {margin}, margin_why: why{extra}}}"))


def write_arms(root: Path, monkeypatch, arms: dict[str, dict[int, float]]):
    """Finished runs of method m on env e: arm -> seed -> final mean@k (initial 0.1)."""
    monkeypatch.setattr(make_fixtures, "ROOT", root)
    for arm, finals in arms.items():
        for seed, final in finals.items():
            make_fixtures.write_run("m", "e", arm, seed, 0.1, final)
    return load_results(root)


SEED_SHIFT = [0.0, 0.08, -0.08, 0.04, -0.04, 0.02, -0.02, 0.06]  # what a seed does to every arm (warm start)
NOISE = [0.004, -0.003, 0.002, -0.004, 0.001, 0.003, -0.002, 0.0]


def arm(level: float, seeds: int, noise: float = 1.0) -> dict[int, float]:
    return {s: round(level + SEED_SHIFT[s] + noise * NOISE[s], 4) for s in range(seeds)}


@pytest.mark.parametrize(("b", "expected"), [(0.50, HOLDS), (0.70, OPPOSITE), (0.60, NO_EFFECT)])
def test_four_verdicts_with_enough_seeds(tmp_path, monkeypatch, b, expected):
    results = write_arms(tmp_path, monkeypatch, {"a": arm(0.60, 6), "b": arm(b, 6, noise=-1.0)})
    [cr] = evaluate_card(claim_card("a > b"), results)
    assert cr.n == 6 and cr.needed == 5 and cr.verdict == expected, cr.note
    # the seed shift (+-0.08) cancels in the pairs: unpaired, the interval is far wider
    x, y = [arm(0.60, 6)[s] for s in range(6)], [arm(b, 6, -1.0)[s] for s in range(6)]
    _, lo, hi = cr.pairs[0].diff
    _, lo_unpaired, hi_unpaired = stats.difference_ci(x, y)
    assert hi_unpaired - lo_unpaired > 5 * (hi - lo)
    if expected == NO_EFFECT:  # evidence of absence only with the pairing
        assert pair_verdict((0.0, lo_unpaired, hi_unpaired), 0.05) == INCONCLUSIVE


def test_wide_interval_is_inconclusive_and_seeds_needed_come_from_the_pilot(tmp_path, monkeypatch):
    a = {s: 0.6 + SEED_SHIFT[s] for s in range(6)}
    b = {s: 0.55 + SEED_SHIFT[s] - 3 * SEED_SHIFT[(s + 1) % 6] for s in range(6)}  # noisy differences
    results = write_arms(tmp_path, monkeypatch, {"a": a, "b": b})
    [cr] = evaluate_card(claim_card("a > b"), results)
    diffs = [round(a[s], 4) - round(b[s], 4) for s in range(6)]
    sd = np.std(diffs, ddof=1)
    assert cr.pairs[0].sd == pytest.approx(sd)
    assert cr.needed == stats.paired_seeds_needed(sd, 0.05) > 6
    assert cr.verdict == INCONCLUSIVE
    assert cr.note == f"the power calculation plans {cr.needed} pairs for the margin"


def test_the_power_calculation_plans_seeds_and_never_decides(tmp_path, monkeypatch):
    results = write_arms(tmp_path, monkeypatch, {"a": arm(0.61, 8), "b": arm(0.60, 8, noise=-1.0)})
    [cr] = evaluate_card(claim_card("a > b", margin=0.02), results)
    assert cr.needed == 10  # the power calculation plans 10 seeds under a small margin: it decides nothing
    assert cr.verdict == cr.interval_verdict != INCONCLUSIVE
    [cr] = evaluate_card(claim_card("a > b", margin=0.05, extra=", min_seeds: 7"), results)
    assert cr.needed == 7  # min_seeds raises the planning floor
    assert cr.verdict == NO_EFFECT  # a real but small effect, inside the margin: equivalence comes first


def test_only_seeds_present_in_both_arms_are_paired(tmp_path, monkeypatch):
    a = arm(0.6, 7)
    b = {s: v - 0.1 for s, v in arm(0.6, 8).items() if s >= 2}  # seeds 2-7
    results = write_arms(tmp_path, monkeypatch, {"a": a, "b": b})
    [cr] = evaluate_card(claim_card("a > b"), results)
    assert cr.seeds == {"a": {"e": 7}, "b": {"e": 6}} and cr.n == 5  # seeds 2-6
    assert cr.pairs[0].diff == pytest.approx(t_ci([round(a[s], 4) - round(b[s], 4) for s in range(2, 7)]))


def test_a_run_without_a_warm_start_evaluation_counts_but_cannot_pair(tmp_path, cards):
    for seed in range(3):
        shutil.copytree(FIXTURES / f"results/grpo/arith/grpo/seed-{seed}",
                        tmp_path / f"grpo/arith/grpo/seed-{seed}")
    evals = tmp_path / "grpo/arith/grpo/seed-1/eval.json"
    data = json.loads(evals.read_text())
    del data["initial"]  # eval.at_start=false
    evals.write_text(json.dumps(data))
    results = load_results(tmp_path)
    assert len(results.runs) == 3 and results.problems == []
    cr = evaluate_card(cards["grpo"], results)[0]
    assert cr.verdict == INVALID and "no 'initial' evaluation" in cr.note


def test_budget_differences_travel_with_the_verdict(tmp_path, monkeypatch):
    """Equal budget and tuning (#16): a claim whose arms differ in a budget setting or in generated
    tokens says so beside its verdict, and claims.json states the tuning."""
    import yaml

    results = write_arms(tmp_path, monkeypatch, {"a": arm(0.60, 6), "b": arm(0.50, 6)})
    card = claim_card("a > b")
    [cr] = evaluate_card(card, results)
    assert cr.budget_differs == [] and cr.budget["a"] == cr.budget["b"]
    assert claim_json("m", cr, card)["tuning"] == "one stated learning rate for every arm"
    for seed in range(6):  # arm b: another learning rate, and twice a's tokens in its last metrics row
        folder = tmp_path / "m" / "e" / "b" / f"seed-{seed}"
        config = yaml.safe_load((folder / "config.yaml").read_text())
        config["trainer"]["lr"] = 2 * config["trainer"]["lr"]
        (folder / "config.yaml").write_text(yaml.safe_dump(config))
        rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
        rows[-1]["generated_tokens_total"] = 2 * (rows[-1].get("generated_tokens_total") or 1000)
        (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    [cr] = evaluate_card(card, load_results(tmp_path))
    lr_a = cr.budget["a"]["trainer.lr"]
    assert cr.budget_differs[0] == f"trainer.lr: a {lr_a}, b {2 * lr_a}"
    assert any(d.startswith("generated tokens: a ") for d in cr.budget_differs), cr.budget_differs
    assert claim_json("m", cr, card)["tuning"] == "learning rates differ: see budget_differences"
    from paper.tables import context_text

    assert f"budget differs: trainer.lr: a {lr_a}, b {2 * lr_a}" in context_text(cr)


def test_a_training_free_method_draws_no_curves_and_keeps_its_tables(tmp_path, monkeypatch):
    """Runs with zero RL steps (empty metrics.jsonl) have nothing to draw over steps: no curves figure,
    and no build error that would drop the method's tables from the report."""
    from paper import figures

    monkeypatch.setattr(make_fixtures, "ROOT", tmp_path / "results")
    import yaml

    for seed in range(3):
        path = make_fixtures.write_run("m", "e", "a", seed, 0.5, 0.5, steps=0)
        config = yaml.safe_load((path / "config.yaml").read_text())
        config["trainer"]["steps"] = 0
        (path / "config.yaml").write_text(yaml.safe_dump(config))
    results = load_results(tmp_path / "results")
    assert [len(r.metrics) for r in results.of("m")] == [0, 0, 0]
    assert figures.curves_figure("m", "e", results, None, tmp_path / "figures") == []


# ---- rule v3 by hand: one function decides every verdict from an interval --------------------------
@pytest.mark.parametrize(("interval", "n", "margin", "expected"), [
    # InFlowOp's repair: decisive; the power calculation (18 seeds asked) no longer overrides it
    ((0.093, 0.078, 0.108), 18, 0.015, HOLDS),
    ((0.079, 0.065, 0.093), 5, 0.05, HOLDS),  # above 0 and past the margin
    ((-0.079, -0.093, -0.065), 5, 0.05, OPPOSITE),
    ((0.011, 0.007, 0.016), 10, 0.03, NO_EFFECT),  # COALESCE: above 0 but inside its margin: no effect
    ((0.027, 0.012, 0.043), 10, 0.05, NO_EFFECT),  # SHARP exact - loo on redundancy: inside the margin
    ((-0.007, -0.015, 0.000), 5, 0.05, NO_EFFECT),
    ((0.013, -0.046, 0.072), 5, 0.05, INCONCLUSIVE),  # wide
    ((0.2, 0.19, 0.21), 4, 0.05, INCONCLUSIVE),  # decisive but under the floor of 5 pairs
    ((0.0, float("nan"), float("nan")), 1, 0.05, INCONCLUSIVE),
])
def test_table_verdict_by_hand(interval, n, margin, expected):
    assert table_verdict(interval, n, sd=0.5, margin=margin) == expected


def test_holm_by_hand():
    # p = 0.01, 0.04, 0.03 (m = 3): sorted 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, 0.04 x 1 = 0.04 -> monotone 0.06
    assert holm([0.01, 0.04, 0.03]) == pytest.approx([0.03, 0.06, 0.06])
    assert holm([0.5, 0.6]) == pytest.approx([1.0, 1.0])


def test_paired_p_value_recovers_the_t_test():
    from scipy import stats as sps

    d = np.array([0.1, 0.3, 0.2, 0.25, 0.15])
    interval = stats.t_interval(d)
    assert paired_p_value(interval, 5) == pytest.approx(sps.ttest_1samp(d, 0.0).pvalue)


def test_a_gate_of_the_design_check_replaces_the_verdict(tmp_path, monkeypatch):
    results = write_arms(tmp_path, monkeypatch, {"a": arm(0.7, 6), "b": arm(0.5, 6)})
    card = claim_card("a > b")
    claim_id = card.claims[0].id
    [cr] = evaluate_card(card, results, {"claims": {claim_id: {"gate": "design null"}}})
    assert cr.verdict == DESIGN_NULL and cr.interval_verdict == HOLDS
    [cr] = evaluate_card(card, results, {"claims": {claim_id: {"gate": "void"}}})
    assert cr.verdict == VOID
    [cr] = evaluate_card(card, results, {"claims": {claim_id: {"gate": "pass"}}})
    assert cr.verdict == HOLDS
