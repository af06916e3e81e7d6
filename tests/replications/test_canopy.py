"""CANOPY: the signal formulas, group sizing, quarantine before group statistics, the hooks."""

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from common.batch import build_rows
from common.credit import grpo
from common.episode import Episode, Group, Turn, tasks_of
from common.fit import resolve
from experiments.run import compose
from replications import METHODS
from replications.canopy.method import group_size, signal_check, signal_metrics, signal_probability
from tests.helpers import credit_advantages

ROOT = Path(__file__).resolve().parents[2]


# ---- the formulas ------------------------------------------------------------------------------
def test_the_papers_numbers():
    """P_sig(0.05, 8) = 34% and P_sig(0.05, 32) = 81%; the sizing rule gives n = 32 at p = 0.05, tau = 0.8."""
    assert round(signal_probability(0.05, 8), 2) == 0.34
    assert round(signal_probability(0.05, 32), 2) == 0.81
    assert group_size(0.05, 0.8) == 32
    assert group_size(0.05, 0.34) == 9 and 1 - 0.95**8 < 0.34 <= 1 - 0.95**9  # 34% at n = 8 is 33.7%


def test_signal_probability_by_hand():
    assert signal_probability(0.5, 2) == 0.5  # HH, TT carry nothing; HT, TH do
    assert signal_probability(0.3, 1) == 0.0  # a group of one never has signal
    assert signal_probability(0.0, 16) == 0.0 and signal_probability(1.0, 16) == 0.0
    assert signal_probability(0.2, 5) == pytest.approx(signal_probability(0.8, 5))  # symmetric in p <-> 1 - p
    assert signal_probability(0.1, 3) == pytest.approx(1 - 0.1**3 - 0.9**3)
    with pytest.raises(ValueError):
        signal_probability(1.2, 4)


def test_group_size_is_the_smallest_n_that_reaches_the_coverage():
    for p in (0.01, 0.05, 0.1, 0.37):
        for n in (1, 2, 8, 32):
            exact = 1 - (1 - p) ** n  # P(at least one success in n)
            assert group_size(p, exact) == n
            if exact + 1e-6 < 1:
                assert group_size(p, exact + 1e-6) == n + 1
    assert group_size(0.02, 0.8) > group_size(0.05, 0.8) > group_size(0.05, 0.5)
    assert group_size(0.1, 0.8) == math.ceil(math.log(0.2) / math.log(0.9)) == 16
    for bad in ((0.0, 0.8), (1.0, 0.8), (0.1, 1.0), (0.1, 0.0)):
        with pytest.raises(ValueError):
            group_size(*bad)


def test_signal_share_of_bernoulli_groups_matches_the_formula():
    rng = np.random.default_rng(0)
    for p, n in ((0.05, 8), (0.05, 32), (0.3, 4)):
        outcomes_G_n = rng.random((20000, n)) < p
        share = float(np.mean(outcomes_G_n.any(1) & ~outcomes_G_n.all(1)))
        se = math.sqrt(share * (1 - share) / 20000)
        assert abs(share - signal_probability(p, n)) < 4 * se + 1e-9


# ---- quarantine --------------------------------------------------------------------------------
def episode(reward: float, faulted: bool = False, tier: int = 3) -> Episode:
    turn = Turn("agent", "policy", [1, 2], [3, 4], [-0.5, -0.5], "add tea 2")
    return Episode("t", tier, [turn], reward=reward, success=reward == 1.0, faulted=faulted)


def canopy(*overrides: str):
    return resolve(compose("canopy", ["scale=smoke", *overrides]), METHODS).method


def test_quarantined_episodes_never_enter_group_statistics():
    ok = [episode(1.0), episode(0.0), episode(0.0), episode(1.0), episode(0.0)]
    faulted = [episode(0.0, faulted=True), episode(0.0, faulted=True)]  # a fault reads as a failure
    group = Group("t", 3, ok[:2] + faulted[:1] + ok[2:] + faulted[1:])
    m = canopy()
    adv, metrics = credit_advantages(m, [group])
    expected = grpo(np.array([e.reward for e in ok]))
    assert [adv.scalar(e.turns[0]) for e in ok] == pytest.approx(list(expected))
    assert all(adv.scalar(e.turns[0]) == 0.0 for e in faulted)
    assert metrics["quarantined"] == 2.0
    assert (metrics["episodes/tier3"], metrics["successes/tier3"]) == (5.0, 2.0)  # the 5 kept episodes, not 7
    trained = [group.episodes[r.episode] for r in build_rows(group.episodes, None, m.excluded)]
    assert {id(e) for e in trained} == {id(e) for e in ok}  # the quarantined are never trained on
    # without quarantine the faults are failures in the statistics (plain GRPO) *and* they train
    m = canopy("method.quarantine=false")
    adv, metrics = credit_advantages(m, [group])
    assert metrics["quarantined"] == 0.0
    assert adv.scalar(ok[0].turns[0]) == pytest.approx(float(grpo(np.array([1, 0, 0, 0, 1, 0, 0.0]))[0]))
    assert adv.scalar(faulted[0].turns[0]) < 0
    assert ({r.episode for r in build_rows(group.episodes, None, m.excluded)}
            == set(range(len(group.episodes))))


def test_a_group_that_is_all_faults_or_all_equal_has_no_signal():
    all_faulted = Group("a", 2, [episode(0.0, faulted=True) for _ in range(4)])
    all_fail = Group("b", 2, [episode(0.0) for _ in range(4)])
    mixed = Group("c", 2, [episode(1.0), episode(0.0), episode(0.0, faulted=True)])
    adv, metrics = credit_advantages(canopy(), [all_faulted, all_fail, mixed])
    # all_fail: none; mixed: yes; all_faulted: no group left
    assert metrics["signal_measured"] == pytest.approx(0.5)
    assert (metrics["groups/tier2"], metrics["signal_groups/tier2"]) == (2.0, 1.0)
    assert all(adv.scalar(t) == 0.0 for e in all_fail.episodes + all_faulted.episodes for t in e.turns)


def test_signal_counts_and_the_check_against_the_formula():
    groups = [Group("a", 1, [episode(1.0, tier=1)] * 4),
              Group("b", 3, [episode(1.0, tier=3), episode(0.0, tier=3)])]
    m = signal_metrics(groups)
    assert m == {"groups/tier1": 1.0, "signal_groups/tier1": 0.0, "episodes/tier1": 4.0,
                 "successes/tier1": 4.0, "groups/tier3": 1.0, "signal_groups/tier3": 1.0,
                 "episodes/tier3": 2.0, "successes/tier3": 1.0, "signal_measured": 0.5}
    # a run of Bernoulli groups: two tiers at p = 0.05 (n = 8) and 0.6 (n = 4), 200 steps
    rng = np.random.default_rng(0)
    rows = []
    for _ in range(200):
        made = [Group("x", 3, [episode(float(rng.random() < 0.05)) for _ in range(8)]) for _ in range(3)]
        made += [Group("y", 1, [episode(float(rng.random() < 0.6), tier=1) for _ in range(4)])
                 for _ in range(2)]
        rows.append(signal_metrics(made))
    check = signal_check(rows, window=10)
    truth = (3 * signal_probability(0.05, 8) + 2 * signal_probability(0.6, 4)) / 5
    assert check["groups"] == 1000
    assert check["predicted"] == pytest.approx(truth, abs=0.02)
    assert check["measured"] == pytest.approx(check["predicted"], abs=0.04)  # 1000 groups: se ~ 0.016


# ---- the hooks ---------------------------------------------------------------------------------
def test_dropping_the_hardest_tier():
    m = canopy("method.drop_hardest_tier=true")
    pool = tasks_of(m.env.task_set()["train"])
    tasks = m.tasks(pool, step=0, rng=random.Random(0))
    assert len(tasks) == m.run.tasks_per_step and {t.tier for t in tasks} <= {1, 2}
    assert 3 in {t.tier for t in canopy().tasks(pool, step=0, rng=random.Random(1))
                 + canopy().tasks(pool, 1, random.Random(2))}


def test_fixed_group_size_and_resume_state():
    fixed = canopy("method.coverage=null", "trainer.group_size=4")
    assert fixed.n == 4 and fixed.group_size({}) == 4 and fixed.group_size({}, "eval") == fixed.run.eval_k
    sized = canopy()
    assert sized.n is None  # the pilot sizes it before the first step
    sized.load_state_dict({"n": 7, "pilot": {"pilot_success": 0.1}})
    assert sized.group_size({}) == 7 and sized.state_dict() == {"n": 7, "pilot": {"pilot_success": 0.1}}


@pytest.mark.parametrize("overrides, message", [
    (["method.coverage=1.5"], "method.coverage must be in"),
    (["method.coverage=null", "+method.pilot_tasks=8"], "no effect with method.coverage=null"),
    (["+method.min_group=1"], "min_group"),
    (["+method.min_group=64"], "min_group"),
])
def test_bad_settings_fail_before_anything_runs(overrides, message):
    with pytest.raises(ValueError, match=message):
        canopy(*overrides)


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) and k not in ("roles",)
                   else {f"{prefix}{k}": v})
    return out


# each ablation arm differs from `full` in exactly what its name says (and in not re-evaluating the warm
# start)
ARM_CHANGES = {
    "n-small": {"method.coverage": None, "trainer.group_size": 4},
    # the same 64 episodes per step as full's 4 tasks x 16 (#16)
    "n-small-matched": {"method.coverage": None, "trainer.group_size": 4, "trainer.tasks_per_step": 16},
    "two-updates": {"trainer.minibatches": 2},
    "two-epochs": {"trainer.ppo_epochs": 2},
    "no-kl": {"trainer.kl.coef": 0.0, "trainer.kl.placement": "none"},
    "seq-mean": {"trainer.loss_agg": "seq-mean"},
    "no-hardest": {"method.drop_hardest_tier": True},
}


def test_each_arm_differs_from_full_in_exactly_its_ablation():
    import dataclasses

    from experiments.replicate import load_replication

    rep = load_replication("canopy")
    assert set(rep.arms) == {"full", *ARM_CHANGES}
    cfgs = {arm: compose("canopy", ["scale=cpu", f"arm={arm}", *overrides])
            for arm, overrides in rep.arms.items()}
    for cfg in cfgs.values():
        resolve(cfg, METHODS)
    t = cfgs["full"].trainer
    assert ((t.loss_agg, t.entropy_coef, t.ppo_epochs * t.minibatches, t.kl.placement, t.kl.estimator)
            == ("token-mean", 0.0, 1, "loss", "k3"))
    assert cfgs["full"].method.get("coverage", 0.8) is not None
    full = _flat(dataclasses.asdict(cfgs["full"]))
    for arm, expected in ARM_CHANGES.items():
        flat = _flat(dataclasses.asdict(cfgs[arm]))
        diff = {k: flat.get(k) for k in full.keys() | flat.keys() if flat.get(k) != full.get(k)}
        assert diff == {**expected, "arm": arm, "eval.at_start": False}, arm


def test_paper_scales_refuse_to_start_without_model_and_data(tmp_path):
    from experiments.replicate import plan, validate_cells

    for scale in ("paper", "paper_swe"):
        with pytest.raises(ValueError, match="needs model.path|paper_data"):
            resolve(compose("canopy", [f"scale={scale}"]), METHODS)
        with pytest.raises(ValueError, match="paper_data"):  # the model alone is not enough
            resolve(compose("canopy", [f"scale={scale}", f"model.path={tmp_path}"]), METHODS)
    with pytest.raises(ValueError):
        validate_cells(plan("canopy", "paper"))


def test_measured_signal_agrees_with_the_formula_in_the_committed_runs():
    """Over every step of the committed cpu-scale runs: the share of groups with signal against
    P_sig at each tier's measured success rate (pooled over groups; P_sig is concave, so the
    measured share may sit a little below)."""
    files = sorted((ROOT / "results" / "canopy").glob("chain_tasks/*/seed-*/metrics.jsonl"))
    if not files:
        pytest.skip("no committed canopy results yet")
    checks = [signal_check([json.loads(line) for line in f.read_text().splitlines()]) for f in files]
    groups = sum(c["groups"] for c in checks)
    measured = sum(c["measured"] * c["groups"] for c in checks) / groups
    predicted = sum(c["predicted"] * c["groups"] for c in checks) / groups
    assert groups > 1000
    assert abs(measured - predicted) < 0.05, (measured, predicted)
