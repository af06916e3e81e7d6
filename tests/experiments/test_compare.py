"""`make compare` (experiments/compare.py): the declarations, the matrix, one budget per environment,
every applicable pair resolving to a valid config, reuse of the methods' own finished runs."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

import pytest
import yaml

from envs.api.features import FEATURES
from envs.api.protocols import AuditLabels, CounterfactualReplay
from envs.registry import ENVS
from experiments.compare import (
    CompareCell,
    applicable,
    cells_for,
    compare_arm,
    home_env,
    hydra_value,
    link_reused,
    load_settings,
    plan,
    reusable,
)
from experiments.replicate import _plain_config, validate_cells
from experiments.run import compose
from replications import METHODS

# the budget: what every method on one environment shares (the rest is the method's recipe)
BUDGET = ("env", "model.hidden_size", "model.num_layers", "model.vocab_size", "model.max_length", "sft",
          "engine", "eval", "trainer.steps", "trainer.tasks_per_step", "trainer.group_size", "trainer.lr",
          "trainer.max_new_tokens", "trainer.temperature", "seed", "scale")


def get(d: dict, key: str):
    for part in key.split("."):
        d = d[part]
    return d


def test_declarations_use_the_vocabulary():
    for name, env in ENVS.items():
        assert env.offers and env.offers <= set(FEATURES), name
        # the declaration and the runtime protocol agree
        assert ("counterfactual_replay" in env.offers) == issubclass(env, CounterfactualReplay), name
        assert ("env_pool_with_audit" in env.offers) == issubclass(env, AuditLabels), name
        assert not {"single_agent", "multi_agent_shared_outcome"} <= env.offers, name
    for name, method in METHODS.items():
        assert method.needs <= set(FEATURES), name
        compare_arm(name)  # names an arm of its replication


def test_the_matrix_follows_the_declarations():
    settings = load_settings()
    assert all(s.env in ENVS and s.home in METHODS for s in settings.values())
    # #23's cpu envs
    assert {"arith", "toolplan-k4", "thinker_solver-freeride", "chain_tasks"} <= set(settings)
    for tag, s in settings.items():
        assert applicable("grpo", s.env) and applicable("canopy", s.env), tag  # they need nothing
        assert applicable(s.home, s.env), f"{s.home} does not apply to its own environment {tag}"
    assert (applicable("sharp", "toolplan") and not applicable("sharp", "arith")
            and applicable("sharp", "voting"))  # voting replays a vote with voters abstaining (#46)
    assert applicable("ccpo", "thinker_solver") and not applicable("ccpo", "chain_tasks")
    assert [m for m in METHODS if applicable(m, "service_desk")] == ["grpo", "canopy", "iapo", "river"]
    assert applicable("river", "arith") and applicable("river", "terminal")  # env_pool_with_audit (#46)
    # ... as classes; a column offers the audit only where its home arm (and the column's overrides) put
    # defects into the pool
    # (terminal-smollm2 has no cpu budget, so no cpu cells: there the class's offers say River applies)
    assert [t for t, s in settings.items() if applicable("river", s.env, home_env(s, "cpu"))] == [
        "terminal", "arith-defects", "chain_tasks-defects", "service_desk-defects", "terminal-smollm2"]


def test_hydra_values_survive_the_override_grammar():
    values = {"s": "it's a\\b, c=d {e}", "t": "ends\\", "u": "q\\'x", "n": None, "b": False, "i": 3,
              "f": 1e-06, "l": [1, "a b"], "d": {"k": 0.5}}
    cfg = compose("grpo", ["scale=smoke", *[f"++env.x_{k}={hydra_value(v)}" for k, v in values.items()]])
    assert {k: cfg.env[f"x_{k}"] for k in values} == values
    with pytest.raises(ValueError, match="interpolation"):
        hydra_value("${method.paper_data}")


@pytest.mark.parametrize("scale", ["smoke", "cpu"])
def test_every_applicable_pair_resolves_to_a_valid_config(scale):
    """One seed per (method, env) pair: composed, checked and resolved (environment and method built,
    every check of a run before training), with one budget per environment."""
    p = plan(scale, seeds=[0])
    validate_cells(list(p.cells))
    pairs = {(c.method, c.env) for c in p.cells}
    assert pairs == {(m, t) for m in METHODS for t, s in p.settings.items()
                     if s.home_scale(scale) is not None and applicable(m, s.env, home_env(s, scale))}
    for tag in {c.env for c in p.cells}:
        configs = {c.method: _plain_config(c.method, c.overrides) for c in p.cells if c.env == tag}
        grpo = configs.pop("grpo")
        for method, cfg in configs.items():
            k = dict(p.settings[tag].plays).get(method, 1)  # chains of k task plays: equal plays, not groups
            for key in BUDGET:
                want = get(grpo, key) // k if key == "trainer.group_size" else get(grpo, key)
                assert get(cfg, key) == want, f"{method} on {tag}: {key} differs from GRPO's"
            own = _plain_config(method, (f"scale={scale}", f"arm={compare_arm(method, p.settings[tag])}"))
            assert (cfg["method"] == own["method"]
                    and cfg["trainer"]["kl"] == own["trainer"]["kl"]), (method, tag)
    # only the columns whose budget compare.yaml gives at other compare scales (`scales`) are left out
    assert p.skipped == [f"{t}: {s.absent(scale)}" for t, s in p.settings.items()
                         if s.home_scale(scale) is None]


def test_a_cell_reuses_the_methods_own_finished_run(tmp_path):
    setting = load_settings()["chain_tasks"]
    cell = cells_for("canopy", setting, "smoke", [0], "full", "compare/steps")[0]
    cell = dataclasses.replace(cell, out_dir=str(tmp_path / "compare" / "steps"))
    assert isinstance(cell, CompareCell) and not cell.done and reusable(cell) is None
    own = tmp_path / "canopy" / "chain_tasks" / "another-name" / "seed-0"
    own.mkdir(parents=True)
    config = {**copy.deepcopy(_plain_config("canopy", cell.overrides)), "arm": "another-name",
              "out_dir": "elsewhere"}
    (own / "config.yaml").write_text(yaml.safe_dump(config))
    assert reusable(cell) is None  # not finished
    (own / "done").write_text("")
    assert reusable(cell) == own
    assert link_reused([cell]) == {cell.name: own}
    assert cell.run_dir.is_symlink() and cell.run_dir.resolve() == own.resolve() and cell.done
    # other settings: not this cell's run
    config["trainer"]["lr"] = 0.5
    (own / "config.yaml").write_text(yaml.safe_dump(config))
    assert not cell.done and reusable(cell) is None


def test_bad_selections_are_refused():
    with pytest.raises(ValueError, match="not in experiments/compare.yaml"):
        plan("smoke", envs=["nowhere"])
    with pytest.raises(ValueError, match="unknown"):
        plan("smoke", envs=["arith"], methods=["nosuch"])


@pytest.mark.parametrize("override", ["seed=7", "+arm=grpo", "method=sharp", "scale=cpu"])
def test_extra_overrides_that_move_a_cell_are_refused_in_one_line(override, tmp_path, capsys):
    """make compare ARGS=seed=7 (issue 34): the cells' seeds belong to SEEDS, arms, methods and scale to
    their own."""
    from experiments.compare import main

    assert main(["--scale", "smoke", "--envs", "arith", "--dry-run", f"out_dir={tmp_path}", override]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(
        f"error: {override} in the extra overrides (ARGS) is refused: a cell's "), err
    assert not any(tmp_path.iterdir())


def test_compare_file_exists_where_the_module_says():
    assert (Path(__file__).resolve().parents[2] / "experiments" / "compare.yaml").exists()


def test_the_printed_comparison_keeps_only_the_chosen_methods_and_envs(tmp_path):
    """make compare METHODS=canopy ENVS=arith printed 9 methods x 8 envs, nearly all `missing`."""
    from experiments.compare import compare_tables, write_plan
    from paper.head_to_head import compare_section

    write_plan(tmp_path, "cpu")
    everything = compare_section(tmp_path, scale="cpu")
    header = next(line for line in everything.splitlines() if line.startswith("| method |"))
    from experiments.compare_config import home_seeds

    budgets = [t for t, s in load_settings().items() if home_seeds(s, "cpu") is not None]
    assert header.count("|") - 2 == len(budgets)  # unfiltered: every env of compare.yaml with a cpu budget
    p = plan("cpu", envs=["arith"], methods=["canopy"], seeds=[0], out_root=str(tmp_path))
    assert {c.out_dir.split("/compare/")[0] for c in p.cells} == {str(tmp_path)}
    text = compare_tables("compare", "cpu", list(p.cells))
    rows = [line for line in text.splitlines() if line.startswith("| ")]
    assert rows[0].replace(" ", "") == "|method|arith|"
    assert sorted(r.split("|")[1].strip() for r in rows[2:]) == ["canopy", "grpo"]  # GRPO always
    assert "Missing cells: grpo on arith; canopy on arith." in text and "sharp" not in text


def test_a_column_may_name_the_arm_a_method_plays_there():
    from experiments.compare_config import compare_arm, load_settings

    settings = load_settings()
    assert compare_arm("skillrise") == "skillrise"  # its compare arm everywhere else
    assert compare_arm("skillrise", settings["skill_families"]) == "skillrise"
    assert compare_arm("skillrise", settings["skill_families_prior"]) == "skillrise-prior"
    assert compare_arm("canopy", settings["skill_families_prior"]) == "full"


def test_a_column_of_chains_gives_every_other_method_as_many_task_plays():
    from experiments.compare_config import load_settings

    s = load_settings()["skill_families_prior"]
    assert dict(s.plays) == {"skillrise": 3}
    cfg = {c.method: _plain_config(c.method, c.overrides) for c in plan("cpu", seeds=[0]).cells
           if c.env == "skill_families_prior"}
    assert cfg["skillrise"]["trainer"]["group_size"] == 8  # 8 chains of 3 tasks
    assert cfg["grpo"]["trainer"]["group_size"] == cfg["canopy"]["trainer"]["group_size"] == 24
    plain = {c.method: _plain_config(c.method, c.overrides) for c in plan("cpu", seeds=[0]).cells
             if c.env == "skill_families"}  # a column without plays: the budget's group as it was
    assert plain["grpo"]["trainer"]["group_size"] == plain["skillrise"]["trainer"]["group_size"]


def test_the_third_columns_of_sharp_and_skillrise_play_their_own_recipes_on_the_columns_env():
    """#46: SHARP plays its substitutes recipe on toolhops-subst-k4 (so its cells are its replication's, which
    `make compare` reuses); SkillRise plays its -prior recipe on chain_tasks' families with the prior,
    with the column's environment (chain_tasks, not skill_families' settings), the others 3 x its group."""
    from experiments.compare_config import load_settings

    cells = {(c.method, c.env): c for c in plan("cpu", seeds=[0]).cells}
    sharp = _plain_config("sharp", cells["sharp", "toolhops-subst-k4"].overrides)
    assert sharp["method"]["credit"] == "exact" and sharp["method"]["weights"] == "matched"
    assert sharp["env"]["name"] == "toolhops" and sharp["model"]["num_layers"] == 4
    grpo = _plain_config("grpo", cells["grpo", "toolhops-subst-k4"].overrides)
    assert grpo["model"] == sharp["model"] and grpo["sft"] == sharp["sft"] and grpo["env"] == sharp["env"]
    s = load_settings()["chain_tasks-families-prior"]
    assert dict(s.plays) == {"skillrise": 3}
    cfg = {m: _plain_config(m, cells[m, "chain_tasks-families-prior"].overrides)
           for m in ("grpo", "canopy", "skillrise")}
    assert cfg["skillrise"]["env"]["name"] == "chain_tasks" and "layout" not in cfg["skillrise"]["env"]
    assert cfg["skillrise"]["env"] == cfg["grpo"]["env"] and cfg["skillrise"]["env"]["order_prior"] == 0.5
    assert cfg["skillrise"]["sft"] == cfg["grpo"]["sft"] and cfg["grpo"]["sft"]["copy_steps"] == 2000
    assert cfg["skillrise"]["method"]["advantage_norm"] == "std"  # its -prior recipe
    assert cfg["grpo"]["trainer"]["group_size"] == cfg["canopy"]["trainer"]["group_size"] == \
        3 * cfg["skillrise"]["trainer"]["group_size"]
