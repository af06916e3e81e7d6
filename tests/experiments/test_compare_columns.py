"""Columns that are another setting of an environment (#46), without an arm added to any replication:
compare.yaml's `overrides` (Hydra overrides after the home's `scale=`, `arm=`) and `scales` (the home's scale
whose budget a column takes, per compare scale); the columns declared before them compose as before."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.util import flatten
from experiments.compare import cells_for, plan, plan_data, reusable
from experiments.compare_config import Setting, applicable, compare_arm, home_env, home_seeds, load_settings
from experiments.replicate import _plain_config, load_replication, validate_cells
from replications import METHODS

# the columns declared before `overrides` and `scales` (#23-#45): (home, arm)
BEFORE = {"arith": ("grpo", "grpo"), "toolplan-k4": ("sharp", "grpo-k4"),
          "toolhops-chain-k5": ("sharp", "hops-grpo-k5"), "thinker_solver-freeride": ("ccpo", "grpo"),
          "chain_tasks": ("canopy", "full"), "service_desk-choice-d8": ("iapo", "grpo"),
          "terminal": ("river", "grpo-full"), "skill_families": ("skillrise", "grpo")}


def test_the_columns_before_compose_their_home_arm_as_before():
    settings = load_settings()
    assert list(settings)[:len(BEFORE)] == list(BEFORE)  # in compare.yaml's order, ahead of the new ones
    for tag, (home, arm) in BEFORE.items():
        s = settings[tag]
        # at smoke and cpu only (at small their homes play other environments)
        assert (s.home, s.arm, s.overrides, s.scales) == (home, arm, (), (("smoke", "smoke"), ("cpu", "cpu")))
        for scale in ("smoke", "cpu"):
            assert s.home_overrides(scale) == (f"scale={scale}", f"arm={arm}")
            assert home_seeds(s, scale) == load_replication(home).seeds[scale]


def test_every_committed_compare_cell_still_composes_to_its_recorded_config():
    """The committed equal-steps cells (results/compare/steps) are done: each cell's config, composed now,
    is the one its run recorded, arm name aside (`CompareCell.done`)."""
    cells = [c for c in plan("cpu").cells if c.run_dir.exists()]
    assert set(BEFORE) <= {c.env for c in cells} and len(cells) >= 100  # the new columns' runs count too
    assert [c.name for c in cells if not c.done] == []


@pytest.mark.parametrize(("tag", "offered", "not_offered"), [
    ("arith-defects", {"river"}, {"ccpo", "sharp", "iapo", "skillrise"}),
    ("service_desk-defects", {"river", "iapo"}, {"ccpo", "sharp", "skillrise"}),
    ("thinker_solver-arith", {"ccpo"}, {"river", "sharp", "iapo", "skillrise"}),
    ("voting", {"sharp"}, {"ccpo", "river", "iapo", "skillrise"}),
    ("chain_tasks-families", {"skillrise"}, {"iapo", "river", "ccpo", "sharp"}),
])
def test_a_column_with_overrides_offers_what_its_settings_offer(tag, offered, not_offered):
    s = load_settings()[tag]
    env = home_env(s, "cpu")
    assert env is not None and (env.get("tag") or env["name"]) == tag
    assert all(applicable(m, s.env, env) for m in {"grpo", "canopy", *offered})
    assert not any(applicable(m, s.env, env) for m in not_offered)
    # the same home without the overrides is the home arm's own setting, which offers otherwise
    plain = home_env(Setting(tag, s.env, s.home, s.arm, (), s.scales), "cpu")
    assert plain is not None and plain != env


def test_overrides_change_the_env_settings_and_nothing_else_of_the_budget():
    """grpo on `arith` and on `arith-defects` (GRPO's arith budget with env=arith_defects): one budget but for
    the environment's settings (its defect shares, its tag), so the run folders differ too."""
    settings = load_settings()
    (plain,), (defects,) = (cells_for("grpo", settings[t], "smoke", [0], "grpo", "compare/steps")
                            for t in ("arith", "arith-defects"))
    a, b = (flatten(_plain_config("grpo", c.overrides), keep_empty=True) for c in (plain, defects))
    changed = {k for k in a.keys() | b.keys() if a.get(k, "(absent)") != b.get(k, "(absent)")}
    assert changed and all(k.startswith("env.") for k in changed)
    assert b["env.tag"] == "arith-defects" and b["env.share_weak"] == 0.25
    assert plain.run_dir != defects.run_dir and defects.run_dir.parts[-3] == "arith-defects"


def test_a_column_takes_its_budget_and_seeds_from_the_home_scale_it_names():
    """thinker_solver-dyad: CCPO's dyad budget (scale dyad: 90 steps, composing `scale: cpu`) and seeds, at
    compare scale cpu only; at smoke it is left out, said why, with no seeds in the plan."""
    s = load_settings()["thinker_solver-dyad"]
    assert s.home_scale("cpu") == "dyad" and s.home_scale("smoke") is None
    assert home_seeds(s, "cpu") == load_replication("ccpo").seeds["dyad"] and home_seeds(s, "smoke") is None
    dyad = _plain_config("ccpo", ("scale=dyad", "arm=grpo-center"))
    for c in plan("cpu", envs=["thinker_solver-dyad"], seeds=[0]).cells:
        cfg = _plain_config(c.method, c.overrides)
        assert (cfg["scale"], cfg["trainer"]["steps"], cfg["env"]) == ("cpu", 90, dyad["env"])
        assert (cfg["sft"], cfg["eval"]) == (dyad["sft"], dyad["eval"])
    p = plan("smoke", envs=["thinker_solver-dyad"])
    assert not p.cells and p.skipped == ["thinker_solver-dyad: compare.yaml's scales give it a budget at "
                                         "compare scale cpu (ccpo's scale dyad) only"]
    assert home_env(s, "smoke") is None and "thinker_solver-dyad" not in plan_data("smoke")["envs"]


@pytest.mark.parametrize(("line", "error"), [
    ("{env: arith, home: grpo, arm: grpo, overrides: [seed=3]}", "overrides"),
    ("{env: arith, home: grpo, arm: grpo, overrides: [+scale=smoke]}", "overrides"),
    ("{env: arith, home: grpo, arm: grpo, budget: dyad}", "unknown"),
    ("{env: arith, home: grpo}", "lacks"),
])
def test_bad_columns_are_refused(tmp_path: Path, line, error):
    path = tmp_path / "compare.yaml"
    path.write_text(f"envs:\n  x: {line}\n")
    with pytest.raises(ValueError, match=error):
        load_settings(path)


def test_envs_names_a_column_by_its_tag_and_an_environment_by_its_name():
    """ENVS=arith is the arith column alone, as before arith-defects (env arith) was a column; an
    environment's name that is no column's tag chooses each of its columns."""
    assert list(plan("smoke", envs=["arith"], methods=["grpo"], seeds=[0]).settings) == ["arith"]
    assert list(plan("smoke", envs=["thinker_solver"], methods=["grpo"], seeds=[0]).settings) == [
        "thinker_solver-freeride", "thinker_solver-arith", "thinker_solver-dyad", "thinker_solver-cost",
        "thinker_solver-facts", "thinker_solver-arith-freeride"]


# ---- the head to head at small scale (#46): terminal-smollm2, River's small budget, one seed ----------
SMALL_METHODS = ("canopy", "river", "iapo")


def test_the_small_terminal_column_is_rivers_small_budget_with_four_methods():
    s = load_settings()["terminal-smollm2"]
    assert home_seeds(s, "small") == [0] and home_seeds(s, "cpu") is None and home_seeds(s, "smoke") is None
    env = home_env(s, "small")
    assert env is not None and (env["name"], env["tag"], env["backend"]) == ("terminal", s.tag, "sandbox")
    assert [m for m in METHODS if applicable(m, "terminal", env)] == ["grpo", "canopy", "iapo", "river"]
    cells = [c for m in SMALL_METHODS for c in cells_for(m, s, "small", [0], compare_arm(m), "compare/steps")]
    validate_cells(cells)
    river = _plain_config("river", ("scale=small", "arm=river"))
    for c in cells:
        cfg = _plain_config(c.method, c.overrides)
        assert (cfg["scale"], cfg["model"], cfg["env"], cfg["sft"], cfg["eval"]) == (
            "small", river["model"], river["env"], river["sft"], river["eval"])
        assert {k: cfg["trainer"][k] for k in ("steps", "tasks_per_step", "group_size")} == {
            "steps": 12, "tasks_per_step": 4, "group_size": 4}
    # River's own committed small cell is this column's River cell (reused, not run again)
    assert reusable(cells[1]) == Path("results/river/terminal-smollm2/river/seed-0")


def test_grpo_composes_on_the_small_terminal_column():
    """overrides_for removes a nested dict the target lacks as a whole (GRPO's small env is reasoning_gym,
    whose generator_settings removed leaf by leaf left empty dicts behind, and the cell did not compose)."""
    cells = cells_for("grpo", load_settings()["terminal-smollm2"], "small", [0], "grpo", "compare/steps")
    assert any(o == "~env.generator_settings" for o in cells[0].overrides)
