"""River on the audit-labelled pools of `arith`, `service_desk` and `chain_tasks` (#46): the method built
from its own config at the smoke scale on each, its filter reading the tasks' labels (a tiny case computed by
hand), its pool's figures, and its repetition penalty on a service_desk dialogue."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from common.credit import grpo
from common.episode import Episode, Group, Turn
from common.fit import resolve
from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv
from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv
from experiments.run import compose
from replications import METHODS
from replications.river.filter import audit_rates
from replications.river.method import River
from tests.helpers import credit_advantages, run_view

# an audit of our own, so that defective tasks pass it often enough to show the oracle's stage:
# a = 0.55, p = 0.9, n = 0.2: f = 0.35 / 0.7 = 1/2, pi = 0.9/2 + 0.8/2 = 0.85,
# sensitivity = 0.45 / 0.85 = 9/17, specificity = 0.2 * 0.5 / 0.15 = 2/3
AUDIT = ["++method.audit_agreement=0.55", "++method.audit_flag_precision=0.9",
         "++method.audit_clean_precision=0.2", "method.filter_seed=5"]
# random.Random(5)'s first ten draws: the audit flags task i when draw i < 9/17 (defective) or < 1/3 (clean)
DRAWS = [0.623, 0.742, 0.795, 0.942, 0.740, 0.922, 0.029, 0.466, 0.943, 0.649]

# the tiny train pools (env.train_size=10) of the two defective settings, by hand:
CASES = {
    # audit Clean: 0 1 2 3 4 5 8 9 (draws >= 9/17 or, clean, >= 1/3); the oracle (always works) fails the
    # reject task 3 and the first_number task 8 (4+6-2+6-5 = 9, its first integer 4), passes the first_number
    # task 9 (3*4-9 = 3: its first integer is the answer)
    "arith_defects": (["clean", "clean", "weak", "reject", "weak", "clean", "clean", "first_number",
                       "first_number", "first_number"], [0, 1, 2, 4, 5, 9],
                      {"pool_size": 6.0, "pool_defective": 3 / 6, "pool_shortcut": 3 / 6}),
    # audit Clean: 0 1 2 3 4 5 8 9; the oracle fails the unsolvable task 2 and the reject task 8
    "service_desk_defects": (["clean", "clean", "unsolvable", "clean", "weak", "weak", "weak", "weak",
                              "reject", "clean"], [0, 1, 3, 4, 5, 9],
                             {"pool_size": 6.0, "pool_defective": 2 / 6, "pool_shortcut": 2 / 6}),
    # weak 0.2, reject 0.1, unsolvable 0.1 of ten: the reject task 6 and the unsolvable task 7 draw under 9/17
    # (flagged); audit Clean: 0 1 2 3 4 5 8 9, where the oracle (the demonstrator: the asked cart; `done`
    # once the shop says it does not stock an item) passes every task: the clean ones and the weak tasks 1, 3
    "chain_tasks_defects": (["clean", "weak", "clean", "weak", "clean", "clean", "reject", "unsolvable",
                             "clean", "clean"], [0, 1, 2, 3, 4, 5, 8, 9],
                            {"pool_size": 8.0, "pool_defective": 2 / 8, "pool_shortcut": 2 / 8}),
}


def river(env: str, tmp_path, *overrides: str) -> River:
    cfg = compose("river", ["scale=smoke", f"env={env}", "env.train_size=10", f"work_dir={tmp_path}",
                            *overrides])
    method = resolve(cfg, METHODS).method
    assert isinstance(method, River)
    return method


def test_the_tiny_audit_by_hand():
    r = audit_rates(0.55, 0.9, 0.2)
    rates = (r.flagged, r.prevalence, r.sensitivity, r.specificity)
    assert rates == pytest.approx((0.5, 0.85, 9 / 17, 2 / 3))
    rng = random.Random(5)
    assert [rng.random() for _ in DRAWS] == pytest.approx(DRAWS, abs=5e-4)


@pytest.mark.parametrize("env", CASES)
def test_the_filter_reads_the_labels(env, tmp_path):
    labels, kept, stats = CASES[env]
    m = river(env, tmp_path, *AUDIT)
    train = [json.loads(t) for t in m.env.task_set()["train"]["task"]]
    assert [m.env.defect_of(t) for t in train] == labels
    # the rule, from the draws: audit Clean, then the oracle's verdict by the defect's kind
    clean_verdict = [d >= (1 / 3 if lab == "clean" else 9 / 17) for d, lab in zip(DRAWS, labels, strict=True)]
    audit_clean = [i for i, c in enumerate(clean_verdict) if c]
    assert audit_clean == [0, 1, 2, 3, 4, 5, 8, 9]
    report = m.filter_report()
    assert report.kept == kept and m.pool(10) == kept
    assert m.pool_stats == pytest.approx(stats)
    # the audit's confusion matrix is read against the labels
    assert report.audit == {d: {"clean": sum(labels[i] == d for i in audit_clean),
                                "flagged": sum(labels[i] == d for i in range(10) if i not in audit_clean)}
                            for d in set(labels)}
    assert report.kept_by_defect == {d: [labels[i] for i in kept].count(d) for d in {labels[i] for i in kept}}
    # the other arms: a random subset of the filtered size, and every train task
    assert len(river(env, tmp_path, *AUDIT, "method.pool=random").pool(10)) == len(kept)
    full = river(env, tmp_path, *AUDIT, "method.pool=full")
    assert full.pool(10) == list(range(10))
    shortcut = m.env.shortcut_defects()
    assert full.pool_stats == pytest.approx({"pool_size": 10.0,
                                             "pool_defective": np.mean([d != "clean" for d in labels]),
                                             "pool_shortcut": np.mean([d in shortcut for d in labels])})


def test_the_default_pools_are_all_clean(tmp_path):
    """Offered by default too: every train task clean, so the filter is the audit's draw and the oracle."""
    for env in ("arith", "service_desk", "chain_tasks"):
        m = river(env, tmp_path, *AUDIT)
        report = m.filter_report()
        assert m.pool(10) == report.kept == [i for i, d in enumerate(DRAWS) if d >= 1 / 3]  # oracle: all
        assert set(report.audit) == {"clean"} and m.pool_stats["pool_defective"] == 0.0


def test_a_pool_without_labels_is_refused_and_full_needs_none(tmp_path):
    env = ToolPlanEnv(ToolPlanConfig(train_size=8, heldout_size=4, dev_size=0))
    with pytest.raises(ValueError, match="method.pool=river filters train tasks by their audit labels"):
        River(River.Config(pool="river"), run_view(env, work_dir=str(tmp_path))).validate()
    full = River(River.Config(pool="full"), run_view(env, work_dir=str(tmp_path)))
    full.validate()
    assert full.pool(8) == list(range(8)) and full.pool_stats == {}


def test_the_penalty_on_a_service_desk_dialogue_with_a_redundant_lookup():
    env = ServiceDeskEnv(ServiceDeskConfig(share_weak=0.5, train_size=8, heldout_size=4, dev_size=0))
    task = {"intent": "refund", "method": "cash", "order": "K", "trap": "Q", "delay": 2,
            "remarks": ["it was a gift", "it came late"], "probe": "ask", "defect": "clean"}
    looping = ["ask", "lookup", "lookup", "ok", "ok", "refund cash K", "end"]
    plain = ["ask", "lookup", "ok", "ok", "refund cash K", "end"]
    episodes = []
    for actions in (looping, plain, ["end"]):
        state = env.new_episode(task, random.Random(0))
        state.start()
        ep = Episode("t0", 2)
        for a in actions:
            result = state.step(a)
            ep.turns.append(Turn("agent", "policy", [1], [0, 1], [-0.1, -0.1], " " + a))
        ep.reward, ep.info = result.reward, result.info
        episodes.append(ep)
    assert [e.reward for e in episodes] == [1.0, 1.0, 0.0]
    groups = [Group("t0", 2, episodes)]
    m = River(River.Config(), run_view(env, work_dir=""))
    adv, metrics = credit_advantages(m, groups)
    a = grpo(np.array([1.0, 1.0, 0.0]))
    # Ã = A + s: -0.05 on the repeated lookup's tokens (turn 2) only
    want = [a[0]] * 2 + [a[0] - 0.05] + [a[0]] * 4
    assert [adv.scalar(t) for t in episodes[0].turns] == pytest.approx(want)
    assert all(adv.scalar(t) == pytest.approx(a[i]) for i in (1, 2) for t in episodes[i].turns)
    assert metrics["penalized_turn_rate"] == pytest.approx(1 / 14)
    assert metrics["train_looped"] == pytest.approx(1 / 3)  # the first of three episodes
    assert metrics["train_shortcut"] == pytest.approx(1 / 3)  # `end` at once: closed, the refund not made
    assert metrics["train_solved"] == pytest.approx(2 / 3)
