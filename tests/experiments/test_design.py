"""The design check's pieces by hand (#36): what two arms differ in, the gates, the credit gap and its
signal-to-noise over resampled batches, the correlation of advantages."""

from __future__ import annotations

import numpy as np
import pytest

from common.episode import Episode, Group, Turn
from experiments.design import claim_specs, difference_kind, gate, schedule_arm
from experiments.shared_batch import Batch, correlation, credit_gap, signal_to_noise


def test_what_two_arms_differ_in():
    base = {"method": {"name": "m", "credit": "a"}, "trainer": {"ppo_epochs": 1, "group_size": 8, "lr": 1e-3},
            "arm": "x", "seed": 0}
    credit = {**base, "method": {"name": "m", "credit": "b"}, "arm": "y", "seed": 3}
    schedule = {**base, "trainer": {**base["trainer"], "ppo_epochs": 2}}
    sampling = {**base, "trainer": {**base["trainer"], "group_size": 4}}
    objective = {**base, "trainer": {**base["trainer"], "lr": 2e-3}}
    assert difference_kind(base, credit) == "credit"  # the arm's name and seed are not a difference
    assert difference_kind(base, schedule) == "schedule"
    assert difference_kind(base, sampling) == "sampling"
    assert difference_kind(base, objective) == "objective"
    assert difference_kind(base, {**base, "arm": "z"}) == "same"


def test_the_schedule_arm_is_the_one_with_more_passes():
    one = {"trainer": {"ppo_epochs": 1, "minibatches": 1}}
    two_epochs = {"trainer": {"ppo_epochs": 2, "minibatches": 1}}
    two_updates = {"trainer": {"ppo_epochs": 1, "minibatches": 2}}
    four = {"trainer": {"ppo_epochs": 2, "minibatches": 2}}
    assert schedule_arm({"full": one, "two-epochs": two_epochs}) == "two-epochs"  # control named second
    assert schedule_arm({"two-updates": two_updates, "full": one}) == "two-updates"
    assert schedule_arm({"two-epochs": two_epochs, "both": four}) == "both"


def test_the_gates():
    yes, no = {"pass": True}, {"pass": False}
    assert gate(yes, None, yes) == "pass"
    assert gate(no, None, yes) == "void"  # the control does not learn: nothing to conclude
    assert gate(yes, no, yes) == "void"  # the oracle does not beat it: the mechanism cannot matter here
    assert gate(yes, yes, no) == "design null"
    free = {"pass": None, "why": "training-free (trainer.steps=0): nothing to learn"}
    assert gate(free, None, {"pass": None}) == "pass"  # not applicable is not a failure
    unmeasured = {"arm": "grpo", "gain": None, "pass": None}  # --no-pilots: the pilots did not run
    assert gate(unmeasured, None, yes) == "partial"  # separation alone is not a pass
    assert gate(yes, {"arm": "oracle", "gain": None, "pass": None}, yes) == "partial"
    assert gate(unmeasured, None, no) == "design null"  # a measured failure still decides
    undefined = {"kind": "schedule", "clip_fraction": float("nan"), "pass": None}  # no later pass measured
    assert gate(yes, None, undefined) == "partial"
    assert gate(yes, None, {"kind": "objective", "pass": None}) == "pass"  # no same-batch figure exists


def test_credit_gap_and_correlation_by_hand():
    values, label = np.array([1.0, 0.0, 2.0, -1.0]), np.array([1.0, 0.0, 1.0, np.nan])
    assert credit_gap(values, label) == pytest.approx(1.5 - 0.0)  # the unlabelled turn says nothing
    assert correlation(np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 6.0])) == pytest.approx(1.0)
    assert np.isnan(correlation(np.array([1.0, 1.0]), np.array([0.0, 1.0])))  # a constant arm: undefined


def _batch(gaps: list[float]) -> tuple[Batch, np.ndarray, np.ndarray]:
    """One group per entry of `gaps`: a turn labelled 1 with advantage `gap`, one labelled 0 with
    advantage 0."""
    groups, keys, values, label = [], [], [], []
    for g, gap in enumerate(gaps):
        eps = [Episode(f"t{g}", 1, turns=[Turn("a", "policy", [1], [2], [0.0], "x")]) for _ in range(2)]
        groups.append(Group(f"t{g}", 1, eps))
        keys += [(2 * g, 0), (2 * g + 1, 0)]
        values += [gap, 0.0]
        label += [1.0, 0.0]
    return Batch(groups, keys, [e for g in groups for e in g.episodes]), np.array(values), np.array(label)


def test_signal_to_noise_over_resampled_batches():
    batch, values, label = _batch([1.0] * 8)
    # the same gap in every resampled batch: no noise at all
    assert signal_to_noise(values, label, batch, batch_groups=4) == float("inf")
    batch, values, label = _batch([1.0, -1.0] * 4)
    assert abs(signal_to_noise(values, label, batch, batch_groups=4)) < 0.5  # the gap's sign is noise


def test_every_card_claim_has_a_spec():
    specs = {s.id: s for s in claim_specs("sharp")}
    assert specs["hops-exact-beats-grpo-k2"].behaviour == "worker_right_tool"
    assert specs["hops-exact-beats-grpo-k2"].control == "hops-grpo-k2"


def test_claims_about_another_setting_keep_their_previous_entries():
    from experiments.design import keep_other_settings

    old_c = {"gate": "design null", "checked_at": {"scale": "cpu", "code": {"commit": "old"}}}
    previous = {"scale": "cpu", "code": {"commit": "abc"},
                "claims": {"fr-a": {"gate": "pass"}, "dy-b": {"gate": "void"}, "fr-c": old_c}}
    result = {"scale": "dyad", "code": {"commit": "def"}, "claims": {"dy-b": {"gate": "partial"}},
              "other_env": {"fr-a": "...", "fr-c": "...", "fr-new": "..."}}
    merged = keep_other_settings(result, previous)
    assert merged["claims"] == {
        "dy-b": {"gate": "partial"},  # checked now: the new entry
        "fr-a": {"gate": "pass", "checked_at": {"scale": "cpu", "code": {"commit": "abc"}}},
        "fr-c": {"gate": "design null", "checked_at": {"scale": "cpu", "code": {"commit": "old"}}},
    }  # fr-new: never checked, nothing to keep
    assert keep_other_settings(result, None) is result and result["claims"] == {"dy-b": {"gate": "partial"}}
    # the pilots of arms not piloted now are kept too (the kept claims' learnable gains came from them)
    previous["pilots"] = {"a": {"gain": 0.1}, "b": {"gain": 0.2}}
    result["pilots"] = {"b": {"gain": 0.3}}
    assert keep_other_settings(result, previous)["pilots"] == {
        "b": {"gain": 0.3}, "a": {"gain": 0.1, "checked_at": {"scale": "cpu", "code": {"commit": "abc"}}}}
