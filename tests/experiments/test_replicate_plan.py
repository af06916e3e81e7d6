"""A replication's plan before it runs (#47): each cell's state (done, to run, to resume, forced rerun,
refused and why), its time from the recorded runs, and a refusal before anything starts."""

from __future__ import annotations

import copy
import json
from dataclasses import asdict

import pytest
import yaml

from common.records import config_changes
from experiments import replicate
from experiments.replicate import Cell, cell_config, estimate_seconds, plan_text, refusal


def _cell(tmp_path, seed=0, steps=10, extra=()):
    return Cell("grpo", "arith", "grpo", seed, "smoke", ("scale=smoke", f"seed={seed}", "arm=grpo", *extra),
                str(tmp_path / "out"), str(tmp_path / "work"), steps)


def _record(cell, config, rows=0, done=False, seconds=None):
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    (cell.run_dir / "config.yaml").write_text(yaml.safe_dump(config))
    (cell.run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": i}) + "\n" for i in range(rows)))
    if seconds is not None:
        finished = f"2026-01-01T00:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}+0000"
        (cell.run_dir / "manifest.json").write_text(json.dumps(
            {"started": "2026-01-01T00:00:00+0000", "finished": finished, "attempts": 1}))
    if done:
        (cell.run_dir / "done").write_text("")


def test_a_setting_added_later_at_its_schema_default_is_no_change():
    new = asdict(replicate.RunConfig())
    old = copy.deepcopy(new)
    del old["sft"]["pack"], old["sft"]["micro_batch_rows"]  # recorded before these settings existed
    assert config_changes(old, new) == []
    new["sft"]["pack"] = True  # a new setting away from its default is a change
    assert config_changes(old, new) == ["sft.pack: false -> true"]  # the absent setting reads as its default
    new["sft"]["pack"] = False
    new["env"]["grid"] = 3  # an environment key is not in the typed schema: absent is not its default
    assert config_changes(old, new) == ["env.grid: (absent) -> 3"]


def test_each_cell_says_what_running_it_would_do(tmp_path):
    fresh, finished, other, partial = (_cell(tmp_path, s) for s in range(4))
    config = asdict(cell_config(fresh))
    _record(finished, asdict(cell_config(finished)), rows=10, done=True)
    changed = asdict(cell_config(other))
    changed["trainer"]["lr"] = 0.5
    _record(other, changed, rows=10, done=True)
    _record(partial, asdict(cell_config(partial)), rows=3)
    assert config["seed"] == 0
    assert str(fresh.state()) == "to run"
    assert str(finished.state()) == "done" and finished.done
    assert other.state().state == "refused" and "trainer.lr: 0.5 -> " in other.state().why
    assert str(partial.state()) == "to resume (from step 3)"
    forced = _cell(tmp_path, 2, extra=("force=true",))
    assert str(forced.state()) == "forced rerun"


def test_a_cell_is_timed_by_its_recorded_neighbours(tmp_path):
    a, b, new = _cell(tmp_path, 0), _cell(tmp_path, 1), _cell(tmp_path, 2, steps=4)
    steps = cell_config(a).trainer.steps
    # 10 s a step (one more: evaluations)
    _record(a, asdict(cell_config(a)), done=True, seconds=10 * (steps + 1))
    _record(b, asdict(cell_config(b)), done=True, seconds=30 * (steps + 1))  # 30 s a step
    # the median rate, 5 steps
    assert estimate_seconds(new, committed=tmp_path / "none") == pytest.approx(20 * 5)
    lines = plan_text([a, b, new], parallel=2).splitlines()
    assert lines[-1] == "[plan] 3 cell(s): 2 done, 1 to run, ~2 min"
    assert lines[2].startswith("grpo/arith/grpo/seed-2: to run (~2 min)  scale=smoke seed=2")
    nothing = _cell(tmp_path / "elsewhere", 0)
    assert estimate_seconds(nothing, committed=tmp_path / "none") is None
    other_scale = Cell(new.method, new.env, new.arm, new.seed, "small", ("scale=small", *new.overrides[1:]),
                       new.out_dir, new.work_dir)  # runs at another scale do not time a cell
    assert estimate_seconds(other_scale, committed=tmp_path / "none") is None


def test_a_method_new_to_an_environment_is_timed_by_the_others_there(tmp_path):
    """A new compare column's CANOPY cells were timed by CANOPY's runs on other columns (~57 s a cell on
    chain_tasks-families-prior, where GRPO's took 6 min): the others' rate on the cell's environment times
    the method's median rate over theirs on the environments where both ran."""
    def cell(method, env, seed, root="out"):
        arm = "full" if method == "canopy" else "grpo"
        return Cell(method, env, arm, seed, "smoke", ("scale=smoke", f"seed={seed}", f"arm={arm}"),
                    str(tmp_path / root), str(tmp_path / "work"), 4)

    def run(method, env, seed, per_step, root="out"):
        _record(cell(method, env, seed, root), {"scale": "smoke", "trainer": {"steps": 10}}, done=True,
                seconds=per_step * 11)
    run("grpo", "arith", 0, 10)
    run("canopy", "arith", 0, 20)  # CANOPY twice GRPO's time where both ran
    run("grpo", "toolplan", 0, 30)
    run("grpo", "toolplan", 1, 40)
    assert estimate_seconds(cell("canopy", "toolplan", 0), committed=tmp_path / "none") == pytest.approx(
        35 * 2 * 5)  # (4 steps, one more for the evaluations)
    # a method with no run anywhere else: the others' rate alone
    run("grpo", "toolplan", 0, 30, root="other")
    assert estimate_seconds(cell("canopy", "toolplan", 0, "other"), committed=tmp_path / "none") == (
        pytest.approx(30 * 5))


def test_cells_the_design_check_blocks_are_shown_as_skipped_and_not_timed(tmp_path):
    """IAPO's dry run said "20 to run, ~24 min" and then skipped all 20 for the design check."""
    a, b, new = _cell(tmp_path, 0), _cell(tmp_path, 1), _cell(tmp_path, 2)
    steps = cell_config(a).trainer.steps
    _record(a, asdict(cell_config(a)), done=True, seconds=10 * (steps + 1))
    lines = plan_text([a, b, new], parallel=1, blocked={b.name: "claim-x: void"}).splitlines()
    assert lines[1] == "grpo/arith/grpo/seed-1: skipped by the design check (claim-x: void)"
    assert lines[-1] == "[plan] 3 cell(s): 1 done, 1 skipped by the design check, 1 to run, ~2 min"
    # a done cell stays done whatever the design check says of its arm
    assert plan_text([a], parallel=1, blocked={a.name: "claim-x: void"}).splitlines()[0].endswith(": done")


def test_runs_at_another_scale_do_not_time_a_cell(tmp_path):
    """A small-scale cell (SmolLM2) was timed by the cpu scale's tiny-model runs: ~23 s for an hour's run."""
    run, new = _cell(tmp_path, 0), _cell(tmp_path, 1)
    steps = cell_config(run).trainer.steps
    config = asdict(cell_config(run))
    config["scale"] = "cpu"
    _record(run, config, done=True, seconds=10 * (steps + 1))
    assert estimate_seconds(new, committed=tmp_path / "none") is None
    config["scale"] = "smoke"
    _record(run, config, done=True, seconds=10 * (steps + 1))
    assert estimate_seconds(new, committed=tmp_path / "none") == pytest.approx(10 * (new.steps + 1))


def test_cells_of_other_settings_are_refused_before_anything_runs(tmp_path, capsys, monkeypatch):
    cell = _cell(tmp_path, 0)
    changed = asdict(cell_config(cell))
    changed["trainer"]["lr"] = 0.5
    _record(cell, changed, rows=10, done=True)
    text = refusal([cell, _cell(tmp_path, 1)])
    assert text is not None and "FORCE=1" in text and "grpo/arith/grpo/seed-0: a finished run" in text
    monkeypatch.setattr(replicate, "launch_local",
                        lambda *a: pytest.fail("a refused replication started cells"))
    code = replicate.main(["--method", "grpo", "--scale", "smoke", "--seeds", "0",
                           "--out-dir", str(tmp_path / "out"), f"work_dir={tmp_path / 'work'}"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: 1 cell(s) hold runs of other settings") and "Traceback" not in err


def test_a_cell_is_timed_by_runs_of_the_scale_its_config_records(tmp_path):
    """CCPO's `--scale dyad` composes `scale: cpu`; its dry run said "time unknown" for every dyad cell."""
    run, new = _cell(tmp_path, 0), _cell(tmp_path, 1)
    config = asdict(cell_config(run))  # records scale smoke, as the cell's composed config does
    _record(run, config, done=True, seconds=10 * (cell_config(run).trainer.steps + 1))
    launched_as = Cell(new.method, new.env, new.arm, new.seed, "dyad", new.overrides, new.out_dir,
                       new.work_dir, new.steps)
    assert estimate_seconds(launched_as, committed=tmp_path / "none") == pytest.approx(10 * (new.steps + 1))


def test_an_arm_runs_its_own_seeds_where_the_replication_file_names_them(tmp_path, monkeypatch):
    """SHARP's subst-* arms ran 7 seeds (the power rule's), the other cpu arms 10: a fresh clone must not plan
    seeds 7-9 of the subst arms as cells to run."""
    import experiments.plan as plans
    from experiments.replicate import load_replication, plan

    rep = load_replication("sharp")
    assert rep.seeds_of("subst-sharp-exact-k4", "cpu") == list(range(7))
    assert rep.seeds_of("grpo-k2", "cpu") == rep.seeds["cpu"] == list(range(10))
    assert rep.seeds_of("subst-sharp-exact-k4", "smoke") == rep.seeds["smoke"]  # its own seeds: cpu only
    cells = plan("sharp", "cpu", arms=["grpo-k2", "subst-grpo-k4"])
    assert sorted(c.seed for c in cells if c.arm == "subst-grpo-k4") == list(range(7))
    assert sorted(c.seed for c in cells if c.arm == "grpo-k2") == list(range(10))
    assert {c.seed for c in plan("sharp", "cpu", seeds=[8], arms=["subst-grpo-k4"])} == {8}  # --seeds wins
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "replication.yaml").write_text(yaml.safe_dump(
        {"arms": {"a": []}, "seeds": {"cpu": [0]}, "arm_seeds": {"b": {"cpu": [1]}}}))
    monkeypatch.setattr(plans, "conf_dir", lambda method: conf)
    with pytest.raises(ValueError, match=r"arm_seeds names arm\(s\) \['b'\] that are not in arms"):
        load_replication("x")
