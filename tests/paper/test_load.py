"""paper/load.py refuses run directories of the wrong shape, and finished runs with missing steps,
as invalid `Problem`s (listed, never counted); `python -m paper.build --strict` fails on them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from paper.build import build, main
from paper.load import load_results

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
SEED_0 = FIXTURES / "results/grpo/arith/grpo/seed-0"  # a valid finished run of 6 steps


@pytest.fixture
def run(tmp_path) -> Path:
    path = tmp_path / "results/grpo/arith/grpo/seed-0"
    shutil.copytree(SEED_0, path)
    return path


def rewrite_metrics(path: Path, rows: list) -> None:
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def metric_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in (path / "metrics.jsonl").read_text().splitlines()]


def set_eval(path: Path, **changes) -> None:
    evals = json.loads((path / "eval.json").read_text())
    (path / "eval.json").write_text(json.dumps({**evals, **changes}))


def set_config(path: Path, config) -> None:
    (path / "config.yaml").write_text(yaml.safe_dump(config))


def config_of(path: Path) -> dict:
    return yaml.safe_load((path / "config.yaml").read_text())


@pytest.mark.parametrize(("damage", "reason"), [
    # each metrics line must be an object with an integer step
    (lambda p: rewrite_metrics(p, [7, *metric_rows(p)[1:]]),
     "metrics.jsonl line 1 is a number, not an object"),
    (lambda p: rewrite_metrics(p, [[0], *metric_rows(p)[1:]]),
     "metrics.jsonl line 1 is a list, not an object"),
    (lambda p: rewrite_metrics(p, [{**r, "step": str(r["step"])} for r in metric_rows(p)]),
     "metrics.jsonl line 1: step is '0', not an integer"),
    (lambda p: rewrite_metrics(p, [{**r, "step": True} if r["step"] == 1 else r for r in metric_rows(p)]),
     "step is True, not an integer"),
    # the manifest and the config are objects
    (lambda p: (p / "manifest.json").write_text('"grpo"'), "manifest.json holds a string, not an object"),
    (lambda p: (p / "manifest.json").write_text("[1, 2]"), "manifest.json holds a list, not an object"),
    (lambda p: (p / "config.yaml").write_text("just a line\n"), "config.yaml holds a string, not an object"),
    # eval.json: an object of objects, history a list of objects
    (lambda p: (p / "eval.json").write_text("[]"), "eval.json is a list, not an object"),
    (lambda p: set_eval(p, final="0.45"), "eval.json 'final' is a string, not an object"),
    (lambda p: set_eval(p, initial=None), "eval.json has no 'initial' result"),
    (lambda p: set_eval(p, history=[0.3]), "eval.json history[0] is a number, not an object"),
    (lambda p: set_eval(p, history={"0": {}}), "eval.json history is an object, not a list"),
    (lambda p: set_eval(p, final={**json.loads((p / "eval.json").read_text())["final"], "step": "6"}),
     "eval.json 'final' step is '6', not an integer"),
    # a finished run has a row for every step of trainer.steps, and none beyond
    (lambda p: rewrite_metrics(p, metric_rows(p)[:1]),
     "done, but metrics.jsonl has 1 of trainer.steps=6 rows"),
    (lambda p: rewrite_metrics(p, [r for r in metric_rows(p) if r["step"] != 3]), "missing: step 3"),
    (lambda p: rewrite_metrics(p, []), "has 0 of trainer.steps=6 rows (6 missing: step 0, 1, 2, 3, 4, ...)"),
    (lambda p: set_config(p, {**config_of(p), "trainer": {**config_of(p)["trainer"], "steps": 4}}),
     "metrics.jsonl has step 4, beyond trainer.steps=4"),
    (lambda p: set_config(p, {**config_of(p), "trainer": {"lr": 0.1}}),
     "config.yaml has no integer trainer.steps"),
])
def test_a_done_run_of_the_wrong_shape_is_invalid(run, damage, reason):
    damage(run)
    results = load_results(run.parents[3])
    assert results.runs == [] and len(results.problems) == 1
    problem = results.problems[0]
    assert problem.kind == "invalid" and reason in problem.reason, problem.reason


def test_a_linked_run_is_checked_against_the_arm_it_ran_as(tmp_path):
    """`make compare` reuses a method's own run by a symlink named after its compare arm."""
    own = tmp_path / "results/grpo/arith/grpo-home/seed-0"
    shutil.copytree(SEED_0, own)
    manifest = json.loads((own / "manifest.json").read_text())
    (own / "manifest.json").write_text(json.dumps({**manifest, "arm": "grpo-home"}))
    link = tmp_path / "compare/grpo/arith/grpo/seed-0"
    link.parent.mkdir(parents=True)
    link.symlink_to(own)
    results = load_results(tmp_path / "compare")
    assert results.problems == [] and [(r.arm, r.seed) for r in results.runs] == [("grpo", 0)]
    # the same folder copied, not linked: the names disagree
    copy = tmp_path / "copied/grpo/arith/grpo/seed-0"
    shutil.copytree(own, copy)
    [problem] = load_results(tmp_path / "copied").problems
    assert "manifest.json says arm='grpo-home' but the directory says 'grpo'" in problem.reason


def test_an_unfinished_run_with_few_steps_is_unfinished_not_invalid(run):
    rewrite_metrics(run, metric_rows(run)[:2])
    (run / "done").unlink()
    [problem] = load_results(run.parents[3]).problems
    assert problem.kind == "unfinished" and "2 steps recorded" in problem.reason


def test_a_run_without_rl_steps_needs_no_metrics_rows(run):
    """A training-free method (trainer.steps=0) finishes with an empty metrics.jsonl."""
    set_config(run, {**config_of(run), "trainer": {**config_of(run)["trainer"], "steps": 0}})
    rewrite_metrics(run, [])
    assert [r.seed for r in load_results(run.parents[3]).runs] == [0]


def test_invalid_runs_are_listed_and_fail_strict(run, tmp_path, capsys):
    rewrite_metrics(run, metric_rows(run)[:1])  # the cpu/smoke checkpoint mix-up of issue #24
    report, errors = build(run.parents[3], tmp_path / "out", [REPO / "replications"])
    assert any("seed-0: invalid run, not counted: done, but metrics.jsonl has 1 of trainer.steps=6 rows" in e
               for e in errors), errors
    page = (report.parent / "methods/grpo.md").read_text()
    assert "seed-0`: invalid, done, but metrics.jsonl has 1 of trainer.steps=6 rows" in page
    args = ["--results", str(run.parents[3]), "--out", str(tmp_path / "out"),
            "--cards", str(REPO / "replications")]
    assert main(args) == 0
    assert "invalid run, not counted" in capsys.readouterr().err  # listed on the console
    assert main([*args, "--strict"]) == 1


def test_at_scale_keeps_the_runs_and_problems_of_that_scale(tmp_path):
    root = tmp_path / "results"
    for seed, scale in ((0, "cpu"), (1, "paper")):
        path = root / f"grpo/arith/grpo/seed-{seed}"
        shutil.copytree(SEED_0, path)
        set_config(path, {**config_of(path), "scale": scale, "seed": seed})
        manifest = json.loads((path / "manifest.json").read_text())
        (path / "manifest.json").write_text(json.dumps({**manifest, "seed": seed}))
    broken = root / "grpo/arith/grpo/seed-2"
    shutil.copytree(SEED_0, broken)
    (broken / "eval.json").write_text("{")
    results = load_results(root)
    assert [r.seed for r in results.at_scale("cpu").runs] == [0]
    assert [r.seed for r in results.at_scale("paper").runs] == [1]
    assert [p.path.name for p in results.at_scale("cpu").problems] == ["seed-2"]  # its config says cpu
    assert results.at_scale("smoke").runs == [] and results.at_scale("smoke").problems == []
    # the folder read stays, so its <method>/design.json still reaches the claims (replicate's printed report)
    assert results.root == root and results.at_scale("cpu").root == root
