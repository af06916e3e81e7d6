"""The head to head's design check (experiments/compare_design.py, #46): which mechanisms two cells' configs
differ in, a cell's gate and reason (hand-made figures), and the home claim read from a design file."""

from __future__ import annotations

import json

import pytest

from experiments.compare_design import cell_gate, dev_overrides, differences, home_claim

LEARNS = {"gain": 0.2, "pass": True}
FLAT = {"gain": 0.01, "pass": False}


def _cfg(**over):
    cfg = {"method": {"name": "grpo", "estimator": "grpo"}, "trainer": {"ppo_epochs": 1, "minibatches": 1,
           "group_size": 8, "tasks_per_step": 8, "kl": {"coef": 0.0}, "lr": 1e-3},
           "model": {"roles": []}, "seed": 0, "arm": "grpo", "out_dir": "a", "eval": {"split": "dev"}}
    for key, value in over.items():
        node = cfg
        *path, last = key.split("__")
        for p in path:
            node = node[p]
        node[last] = value
    return cfg


def test_differences_name_each_mechanism_and_ignore_bookkeeping():
    base = _cfg()
    assert differences(base, _cfg(arm="x", seed=3, out_dir="b", eval__split="test")) == []
    assert differences(base, _cfg(method__name="iapo")) == ["credit"]
    assert differences(base, _cfg(trainer__ppo_epochs=2)) == ["schedule"]
    assert differences(base, _cfg(trainer__group_size=16)) == ["sampling"]
    # a method's own sampling setting counts where the treated side sets it: River's pool, not GRPO's update
    grpo = _cfg(method__update="rl")
    assert differences(_cfg(method__name="river", method__pool="river", method__dynamic=False), grpo) == \
        ["sampling", "credit"]
    assert differences(_cfg(method__name="iapo"), grpo) == ["credit"]
    assert differences(base, _cfg(trainer__kl__coef=0.1, method__name="canopy", trainer__ppo_epochs=2)) == \
        ["schedule", "credit", "objective"]


def test_a_column_where_grpo_does_not_learn_voids_every_cell_first():
    sep = {"pass": True, "kinds": ["credit"]}
    gate, why = cell_gate(FLAT, sep, {"claim": "x", "gate": "pass"})
    assert gate == "void" and why == "GRPO gains +0.010 mean@k on dev (margin 0.05)"
    assert cell_gate(FLAT, None, None)[0] == "void"  # GRPO's own row


def test_credit_indistinguishable_from_grpo_is_a_design_null_with_its_figures():
    sep = {"pass": False, "kinds": ["credit"], "credit": {"correlation": 0.981, "snr_ratio": 1.004}}
    assert cell_gate(LEARNS, sep, None) == \
        ("design null", "advantages correlate 0.98 with GRPO's, signal-to-noise x1.00")
    sched = {"pass": False, "kinds": ["schedule"], "schedule": {"clip_fraction": 0.001}}
    assert cell_gate(LEARNS, sched, None) == ("design null", "later passes clip 0.10% of tokens")


def test_a_home_claim_that_cannot_tell_greys_the_cell_and_an_objective_leaves_it_partial():
    sep = {"pass": True, "kinds": ["credit"]}
    assert cell_gate(LEARNS, sep, {"claim": "beats-grpo", "gate": "design null"}) == \
        ("design null", "its own design check: beats-grpo is design null")
    assert cell_gate(LEARNS, sep, {"claim": "beats-grpo", "gate": "pass"})[0] == "pass"
    objective = {"pass": None, "kinds": ["credit", "objective"]}
    assert cell_gate(LEARNS, objective, None) == \
        ("partial", "differs from GRPO in its objective, which one batch cannot gauge")
    assert cell_gate(LEARNS, None, None) == ("pass", "GRPO gains +0.200 on dev")


def test_dev_overrides_replace_the_seed_and_the_split():
    class C:
        overrides = ("scale=cpu", "arm=grpo", "++env.k=4", "seed=3")

    assert dev_overrides(C(), "x=1") == ("scale=cpu", "arm=grpo", "++env.k=4", "seed=0", "eval.split=dev",
                                         "eval.at_start=true", "x=1")


@pytest.mark.parametrize(("home", "found"), [("iapo", {"claim": "beats-grpo", "gate": "design null"}),
                                             ("sharp", None)])
def test_the_home_claim_is_the_compare_arm_against_the_columns_home_arm(tmp_path, monkeypatch, home, found):
    """Read from a design file like IAPO's: the claim whose arms are [an arm with the compare arm's method
    settings, the column's home arm]; another method's column has none."""
    from experiments.compare_config import Setting

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "iapo").mkdir(parents=True)
    (tmp_path / "results" / "iapo" / "design.json").write_text(json.dumps({"claims": {
        "c05-faster": {"arms": ["iapo-c05", "grpo"], "gate": "pass"},
        "beats-grpo": {"arms": ["iapo", "grpo"], "gate": "design null"},
        "graph-not-distribution": {"arms": ["iapo", "shuffled"], "gate": "design null"}}}))
    setting = Setting("service_desk-choice-d8", "service_desk", home, "grpo")
    assert home_claim("iapo", setting, "cpu", "iapo") == found


def test_make_compare_does_not_run_the_cells_its_design_check_greys(tmp_path):
    """design_blocks reads `<out root>/compare/design-<scale>.json` beside the cells' records: a void or
    design-null cell that is not done is blocked with its reason; a passing, unnamed or finished one is
    not."""
    from experiments.compare_gate import blocks_text, design_blocks
    from experiments.plan import Cell

    out = tmp_path / "results" / "compare" / "steps"

    def cell(method, env):
        return Cell(method, env, method, 0, "cpu", (), str(out), str(tmp_path / "work"))

    cells = [cell("grpo", "voting"), cell("sharp", "voting"), cell("grpo", "arith"), cell("river", "arith"),
             cell("canopy", "arith")]
    assert design_blocks(cells, "cpu") == {}  # no design file: nothing blocked
    out.mkdir(parents=True)
    (tmp_path / "results" / "compare" / "design-cpu.json").write_text(json.dumps({"scale": "cpu", "cells": {
        "grpo": {"voting": {"gate": "void", "reason": "GRPO gains -0.035"},
                 "arith": {"gate": "pass", "reason": "ok"}},
        "sharp": {"voting": {"gate": "void", "reason": "GRPO gains -0.035"}},
        "ccpo": {"voting": {"gate": "void", "reason": "GRPO gains -0.035"}},
        "river": {"arith": {"gate": "design null", "reason": "groups with a signal x1.00"}}}}))
    cells.append(cell("ccpo", "voting"))  # finished: nothing to block
    cells[5].run_dir.mkdir(parents=True)
    (cells[5].run_dir / "done").write_text("")
    blocks = design_blocks(cells, "cpu")
    assert blocks == {cells[0].name: "void: GRPO gains -0.035", cells[1].name: "void: GRPO gains -0.035",
                      cells[3].name: "design null: groups with a signal x1.00"}
    text = blocks_text(blocks, forced=False)
    assert text.startswith("\n[compare] 3 cell(s) not run") and "FORCE_DESIGN=1" in text
    assert blocks_text({}, forced=False) == ""
