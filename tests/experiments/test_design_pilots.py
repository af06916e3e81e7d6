"""The positive control reads the claim's own metric from the pilots (experiments/design_pilots.py)."""

import json

import pytest

from experiments.design_pilots import claim_metric_value


def pilot(tmp_path, name, curve, final):
    run = tmp_path / name
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "success_rate": v}) + "\n"
                                               for i, v in enumerate(curve)))
    (run / "eval.json").write_text(json.dumps({"initial": {"mean@k": 0.5}, "final": {"mean@k": final}}))
    return {"run": str(run)}


def test_a_curve_claim_compares_areas_an_eval_claim_compares_final_values(tmp_path):
    # the oracle learns by step 2, the control by step 4; both end at 1.0 held out
    oracle = pilot(tmp_path, "oracle", [0.5, 0.5, 1.0, 1.0, 1.0, 1.0], 1.0)
    control = pilot(tmp_path, "control", [0.5, 0.5, 0.5, 0.5, 1.0, 1.0], 1.0)
    curve = "curve:success_rate"
    area = claim_metric_value(oracle, curve) - claim_metric_value(control, curve)
    assert area == pytest.approx((5.0 - 4.0) / 6)  # by hand: means 5/6 and 4/6
    assert claim_metric_value(oracle, "curve:success_rate", 2) == pytest.approx(1.0)  # the last 2 steps
    assert claim_metric_value(control, "curve:success_rate", 3) == pytest.approx(2.5 / 3)
    assert claim_metric_value(oracle, "mean@k") - claim_metric_value(control, "mean@k") == 0.0
    with pytest.raises(KeyError, match="entropy"):
        claim_metric_value(oracle, "curve:entropy")


def test_a_pilot_from_other_code_is_stale(tmp_path):
    from experiments.design_pilots import stale

    now = {"git_sha": "b" * 40, "git_dirty": False}
    assert not stale(tmp_path, now)  # no run yet: nothing to reuse or refuse
    (tmp_path / "manifest.json").write_text(json.dumps({"git_sha": "b" * 40, "git_dirty": False}))
    assert not stale(tmp_path, now)
    assert stale(tmp_path, {**now, "git_dirty": True})
    assert stale(tmp_path, {"git_sha": "c" * 40, "git_dirty": False})
    (tmp_path / "manifest.json").write_text(json.dumps({"git_sha": "b" * 40, "git_dirty": True}))
    assert stale(tmp_path, now)
