"""River's filter (the audit's rates from the paper's numbers, by hand; its confusion matrix; the oracle's
pass@2) and its credit (GRPO's advantage plus the penalty on the repeated turns' tokens only)."""

import doctest
import json
import random

import numpy as np
import pytest

from common.config import build_dataclass
from common.credit import grpo
from common.episode import Episode, Group, Turn
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv
from replications.river import filter as filter_module
from replications.river.filter import (
    AuditRates,
    audit_rates,
    confusion,
    random_subset,
    river_filter,
    simulate_audit,
)
from replications.river.method import River, RiverConfig
from tests.helpers import credit_advantages, run_view


def test_doctests():
    assert doctest.testmod(filter_module).failed == 0


def test_audit_rates_by_hand():
    # a = 0.833, p = 0.895, n = 0.40: f = 0.433 / 0.495; pi = 0.895 f + 0.6 (1 - f)
    r = audit_rates()
    f = 0.433 / 0.495
    pi = 0.895 * f + 0.6 * (1 - f)
    assert r.flagged == pytest.approx(f) and r.prevalence == pytest.approx(pi)
    assert (r.sensitivity == pytest.approx(0.895 * f / pi)
            and r.specificity == pytest.approx(0.4 * (1 - f) / (1 - pi)))
    # the rates reproduce the three numbers they came from
    flag, clean = (pi * r.sensitivity + (1 - pi) * (1 - r.specificity),
                   (1 - pi) * r.specificity + pi * (1 - r.sensitivity))
    assert flag == pytest.approx(f)
    assert (pi * r.sensitivity / flag == pytest.approx(0.895)
            and (1 - pi) * r.specificity / clean == pytest.approx(0.40))
    assert pi * r.sensitivity + (1 - pi) * r.specificity == pytest.approx(0.833)
    # a second case by hand: a = 0.8, p = 0.9, n = 0.6: f = 2/3, pi = 0.6 + 0.4/3 = 11/15,
    # sensitivity = 0.6 / (11/15) = 9/11, specificity = 0.2 / (4/15) = 3/4
    r2 = audit_rates(agreement=0.8, flag_precision=0.9, clean_precision=0.6)
    assert ((r2.flagged, r2.prevalence, r2.sensitivity, r2.specificity)
            == pytest.approx((2 / 3, 11 / 15, 9 / 11, 3 / 4)))
    with pytest.raises(ValueError, match="not between"):
        audit_rates(agreement=0.3)
    with pytest.raises(ValueError, match="must exceed"):
        audit_rates(flag_precision=0.3)


def test_simulated_audit_has_its_rates():
    rates = AuditRates(0.5, 0.5, 0.9, 0.3)
    defects = ["clean"] * 20000 + ["leak"] * 20000
    flags = simulate_audit(defects, rates, random.Random(0))
    table = confusion(defects, flags)
    assert table["leak"]["flagged"] / 20000 == pytest.approx(0.9, abs=0.01)
    assert table["clean"]["clean"] / 20000 == pytest.approx(0.3, abs=0.01)


def test_filter_keeps_audit_clean_tasks_the_oracle_solves_in_two_tries():
    tasks = [{"defect": d} for d in ["clean", "leak", "reject", "clean", "unsolvable", "ambiguous"]]
    never_flag = AuditRates(0.0, 0.5, 0.0, 1.0)
    attempts = []

    def oracle(task, attempt):
        attempts.append((task["defect"], attempt))
        return {"clean": True, "leak": True, "reject": False, "unsolvable": False,
                "ambiguous": attempt == 1}[task["defect"]]

    report = river_filter(tasks, oracle, never_flag, seed=0, tries=2)
    assert report.kept == [0, 1, 3, 5]  # pass@2: the ambiguous task passes on its second try
    assert report.oracle == {"ambiguous": {"solved": 1, "failed": 0}, "clean": {"solved": 2, "failed": 0},
                             "leak": {"solved": 1, "failed": 0}, "reject": {"solved": 0, "failed": 1},
                             "unsolvable": {"solved": 0, "failed": 1}}
    assert ("clean", 1) not in attempts  # a solved task is not tried again
    assert river_filter(tasks, oracle, never_flag, seed=0, tries=1).kept == [0, 1, 3]
    always_flag = AuditRates(1.0, 0.5, 1.0, 0.0)
    assert river_filter(tasks, oracle, always_flag, seed=0).kept == []


def test_random_subset():
    s = random_subset(100, 20, seed=3)
    assert len(s) == len(set(s)) == 20 and s == sorted(s) and s == random_subset(100, 20, seed=3)


def test_filter_on_the_real_sandbox_drops_the_defects_it_should():
    env = TerminalEnv(TerminalConfig(train_size=120, heldout_size=4, dev_size=0, backend="sim"))
    method = river(env)
    report = method.filter_report()
    kept = [json.loads(env.task_set()["train"][i]["task"])["defect"] for i in report.kept]
    assert "reject" not in kept and "unsolvable" not in kept  # the oracle cannot pass them
    assert (sum(report.audit[d]["clean"] for d in report.audit)
            == sum(sum(r.values()) for r in report.oracle.values()))
    assert sorted(report.kept_by_defect) == sorted(set(kept))
    assert method.pool(120) == report.kept
    random_arm = river(env, pool="random")
    assert len(random_arm.pool(120)) == len(report.kept)
    assert river(env, pool="full").pool(120) == list(range(120))


def river(env=None, **kw):
    env = env or TerminalEnv(TerminalConfig(backend="sim"))
    m = River(build_dataclass(RiverConfig, kw, "method"),
              run_view(env, work_dir=str(pytest_tmp()), tasks_per_step=4))
    m.validate()
    return m


_TMP: list = []


def pytest_tmp():
    import tempfile

    if not _TMP:
        _TMP.append(tempfile.mkdtemp(prefix="river-test-"))
    return _TMP[0]


def episode(reward, pairs, tokens=2):
    ep = Episode("t0", 1)
    for cmd, _ in pairs:
        ep.turns.append(Turn("agent", "policy", [1], list(range(tokens)), [-0.1] * tokens, " " + cmd))
    ep.reward = reward
    ep.info = {"record": {"turns": [list(p) for p in pairs]}, "solved": reward > 0, "read_memo": False,
               "looped": False, "repeat_rate": 0.0}
    return ep


LOOP = [("grep k3 a", "k3 47"), ("grep k3 a", "k3 47"), ("echo 47 > out", ""), ("submit", "")]
PLAIN = [("grep k3 a", "k3 47"), ("echo 47 > out", ""), ("submit", "")]


def test_credit_adds_the_penalty_to_the_repeated_turns_tokens_only():
    groups = [Group("t0", 1, [episode(1.0, LOOP), episode(0.0, PLAIN), episode(1.0, PLAIN)])]
    adv, metrics = credit_advantages(river(), groups)
    a = grpo(np.array([1.0, 0.0, 1.0]))
    ep0 = groups[0].episodes[0]
    assert adv.tokens(ep0.turns[0]) == pytest.approx([a[0]] * 2)
    assert adv.tokens(ep0.turns[1]) == pytest.approx([a[0] - 0.05] * 2)  # Ã = A + s on that turn only
    assert adv.tokens(ep0.turns[2]) == pytest.approx([a[0]] * 2)
    for i in (1, 2):
        assert all(adv.tokens(t) == pytest.approx([a[i]] * 2) for t in groups[0].episodes[i].turns)
    assert metrics["penalized_turn_rate"] == pytest.approx(1 / 10)


def test_without_the_penalty_credit_is_grpo():
    groups = [Group("t0", 1, [episode(1.0, LOOP), episode(0.0, PLAIN), episode(0.0, LOOP)])]
    adv, metrics = credit_advantages(river(penalty=False), groups)
    a = grpo(np.array([1.0, 0.0, 0.0]))
    for i, ep in enumerate(groups[0].episodes):
        assert all(adv.tokens(t) == pytest.approx([a[i]] * 2) for t in ep.turns)
    assert metrics["penalized_turn_rate"] == 0.0


def test_penalty_breaks_ties_in_a_group_of_equal_rewards():
    """All successes: GRPO's advantage is 0, the looping episode's repeated turn still gets -delta."""
    groups = [Group("t0", 1, [episode(1.0, LOOP), episode(1.0, PLAIN)])]
    adv, _ = credit_advantages(river(), groups)
    ep0 = groups[0].episodes[0]
    assert [adv.scalar(t) for t in ep0.turns] == pytest.approx([0.0, -0.05, 0.0, 0.0])


def test_truncated_episode_without_a_record_gets_no_penalty():
    ep = episode(0.0, LOOP)
    ep.info = {}
    ep.truncated = True
    groups = [Group("t0", 1, [ep, episode(1.0, PLAIN)])]
    adv, _ = credit_advantages(river(), groups)
    a = grpo(np.array([0.0, 1.0]))
    assert all(adv.scalar(t) == pytest.approx(a[0]) for t in ep.turns)


def test_bad_settings_fail_before_the_run():
    with pytest.raises(ValueError, match="threshold"):
        river(threshold=1.5)
    with pytest.raises(ValueError, match="oracle_tries"):
        river(oracle_tries=0)
    with pytest.raises(ValueError, match="method.pool"):
        class Arith:
            name = "arith"
            cfg = None
        River(build_dataclass(RiverConfig, {"pool": "river"}, "method"),
              run_view(Arith(), work_dir="")).validate()
