"""paper/head_to_head.py: the head-to-head section from results/compare/ (verdicts by hand, partial and
absent matrices, the ranking), and `make paper --strict` with it."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from paper import build
from paper.claims import HOLDS, INCONCLUSIVE, NO_EFFECT, OPPOSITE
from paper.head_to_head import MARGIN, build_compare, compare_env, load_compare, load_plan, ranking, versus

FIXTURES = Path(__file__).resolve().parent / "fixtures"
PLAN = Path(__file__).resolve().parents[2] / "results" / "compare" / "plan-cpu.json"  # make compare's
_spec = importlib.util.spec_from_file_location("make_fixtures", FIXTURES / "make_fixtures.py")
assert _spec and _spec.loader
fx = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fx)


def write(root: Path, method: str, env: str, arm: str, seed: int, final: float, tokens: int = 1000) -> None:
    path = root / method / env / arm / f"seed-{seed}"
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(yaml.safe_dump(fx.config(method, env, arm, seed)))
    (path / "manifest.json").write_text(json.dumps(fx.manifest(method, env, arm, seed)))
    rows = fx.metrics(seed, 0.8, 0.01)
    for r in rows:
        r["generated_tokens_total"] = tokens * (r["step"] + 1) // fx.STEPS
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (path / "eval.json").write_text(json.dumps(fx.evals(0.2, final, seed)))
    (path / "done").write_text("")


def test_versus_is_the_claims_rule_by_hand():
    # differences 0.10, 0.12, 0.08, 0.11, 0.09: mean 0.10, sd 0.0158, t(4) 2.776 -> half width 0.0196
    x = {s: 0.5 + d for s, d in enumerate([0.10, 0.12, 0.08, 0.11, 0.09])}
    y = dict.fromkeys(range(5), 0.5)
    v = versus("a", "grpo", x, y)
    assert v.n == 5 and v.diff[0] == pytest.approx(0.10)
    sd = np.std([0.10, 0.12, 0.08, 0.11, 0.09], ddof=1)
    assert v.diff[2] - v.diff[0] == pytest.approx(2.7764 * sd / 5 ** 0.5, rel=1e-3)
    assert v.verdict == HOLDS and versus("grpo", "a", y, x).verdict == OPPOSITE
    tiny = {s: 0.5 + d for s, d in enumerate([0.001, -0.002, 0.0, 0.002, -0.001])}
    assert versus("a", "grpo", tiny, y).verdict == NO_EFFECT  # inside +-MARGIN
    three = versus("a", "grpo", {s: x[s] for s in range(3)}, y)
    assert three.verdict == INCONCLUSIVE
    assert three.note == "fewer than 5 pairs (n=3); the interval alone says holds"
    assert "the interval alone says holds" in three.note
    assert MARGIN == 0.05


def test_ranking_resamples_the_shared_seeds():
    scores = {"a": {0: 0.9, 1: 0.8, 2: 0.85}, "b": {0: 0.1, 1: 0.2, 2: 0.15}, "c": {0: 0.5, 1: 0.5, 2: 0.5}}
    out = ranking(scores)
    assert [m for m, *_ in out] == ["a", "c", "b"]
    # never overtaken in any resample
    assert out[0][2] == (1.0, 1.0) and out[0][3] == 1.0 and out[2][3] == 0.0
    assert math.isnan(ranking({"a": {0: 0.5}})[0][3])  # one seed: no interval


@pytest.fixture
def results(tmp_path: Path) -> Path:
    root = tmp_path / "results"
    shutil.copytree(FIXTURES / "results", root)
    steps = root / "compare" / "steps"
    steps.mkdir(parents=True)
    shutil.copy(PLAN, root / "compare" / "plan-cpu.json")
    for s in range(5):
        write(steps, "grpo", "arith", "grpo", s, 0.40 + 0.01 * s, tokens=1000)
        write(steps, "canopy", "arith", "full", s, 0.50 + 0.01 * s + 0.002 * (s % 2), tokens=1500)
    write(steps, "grpo", "chain_tasks", "grpo", 0, 0.3)  # canopy's cell on chain_tasks is missing
    return root


def test_equal_steps_equal_tokens_and_missing_cells(results, tmp_path):
    steps, tokens = load_compare(results)
    c = compare_env("arith", steps, tokens)
    assert c.vs_grpo_steps["canopy"].verdict == HOLDS
    assert c.vs_grpo_steps["canopy"].diff[0] == pytest.approx(0.1008)
    # not run yet
    assert isinstance(c.vs_grpo_tokens["canopy"], str) and "1.50x" in c.vs_grpo_tokens["canopy"]
    for s in range(5):  # GRPO at canopy's tokens
        write(results / "compare" / "tokens" / "canopy", "grpo", "arith", "grpo", s, 0.45 + 0.01 * s,
              tokens=1500)
    steps, tokens = load_compare(results)
    v = compare_env("arith", steps, tokens).vs_grpo_tokens["canopy"]
    assert not isinstance(v, str) and v.diff[0] == pytest.approx(0.0508) and v.b == "grpo at canopy's tokens"
    text, problems = build_compare(results, tmp_path / "out")
    assert problems == []
    assert "Missing cells: " in text and "canopy on chain_tasks" in text and "sharp on toolplan-k4" in text
    matrix = (tmp_path / "out" / "tables" / "compare-matrix-cpu.md").read_text()
    ccpo_row = next(line for line in matrix.splitlines() if line.startswith("| ccpo |"))
    plan = load_plan(results, "cpu")
    assert plan is not None
    applies = sum(plan.applies["ccpo", t] for t in plan.envs)  # its thinker_solver columns
    assert applies >= 1 and ccpo_row.count("n/a") == len(ccpo_row.split("|")) - 3 - applies
    assert (tmp_path / "out" / "figures" / "compare-matrix-cpu.png").exists()


def test_make_paper_strict_with_compare_absent_partial_and_present(results, tmp_path):
    cards = [tmp_path / "no-cards"]  # the fixture cards hold a deliberately invalid claim
    shutil.rmtree(results / "grpo" / "arith" / "grpo" / "seed-5")  # the fixtures' deliberately invalid run
    report, errors = build.build(results, tmp_path / "partial", cards)
    assert errors == [] and "## Head to head" in report.read_text()
    assert "compare" not in build.load_results(results).methods()  # its own tree, not a method
    shutil.rmtree(results / "compare")
    text, problems = build_compare(results, tmp_path / "absent")
    assert problems == [] and "No head-to-head runs at scale cpu" in text
    broken = results / "compare" / "steps" / "grpo" / "arith" / "grpo" / "seed-0"
    write(results / "compare" / "steps", "grpo", "arith", "grpo", 0, 0.4)
    (broken / "eval.json").write_text("{")
    # --strict fails on it
    assert [p for p in build_compare(results, None)[1] if "invalid run" in p and str(broken) in p]


def test_the_matrix_is_the_plans_and_without_a_plan_there_is_none(results, tmp_path):
    plan = load_plan(results, "cpu")
    assert plan is not None and plan.methods[0] == "grpo" and plan.seeds["arith"] == 7
    assert plan.applies["ccpo", "thinker_solver-freeride"] and not plan.applies["ccpo", "arith"]
    (results / "compare" / "plan-cpu.json").unlink()
    text, problems = build_compare(results, tmp_path / "out")
    assert problems == [] and "No matrix at scale cpu: there is no `" in text and "plan-cpu.json`" in text
    assert "| arith | canopy |" in text  # the runs that exist are still compared
    assert not (tmp_path / "out" / "tables" / "compare-matrix-cpu.md").exists()
    assert not (tmp_path / "out" / "figures" / "compare-matrix-cpu.png").exists()


@pytest.mark.parametrize(("content", "why"), [
    ("{", "not readable JSON"), ("[]", "not a JSON object"), ('{"scale": "smoke"}', "its scale is 'smoke'"),
    ('{"scale": "cpu", "methods": ["grpo"], "envs": ["arith"], "applies": {}, "seeds": {"arith": [0]}}',
     "applies does not say"),
    ('{"scale": "cpu", "methods": ["grpo"], "envs": ["arith"], "applies": {"grpo": {"arith": true}}, '
     '"seeds": {}}', "seeds does not list"),
])
def test_a_plan_that_is_not_one_is_a_problem_not_a_crash(results, content, why):
    (results / "compare" / "plan-cpu.json").write_text(content)
    with pytest.raises(ValueError, match=why):
        load_plan(results, "cpu")
    text, problems = build_compare(results, None)
    assert [p for p in problems if "plan-cpu.json: not a plan of the comparison" in p and why in p]
    assert "No matrix at scale cpu: `" in text and why in text


def test_the_matrix_figure_is_coloured_by_verdict_with_the_estimates_written(results):
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    from paper import figures
    from paper.head_to_head import matrix_plot

    plan = load_plan(results, "cpu")
    assert plan is not None
    steps, tokens = load_compare(results)
    comparisons = [compare_env(e, steps, tokens) for e in ("arith", "chain_tasks")]
    fig = matrix_plot(comparisons, "cpu", plan)
    ax = fig.axes[0]
    cells = {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)): p
             for p in ax.patches if isinstance(p, Rectangle)}
    texts = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
    methods = [m for m in plan.methods if m != "grpo"]
    assert len(cells) == len(texts) == len(methods) * len(plan.envs)
    canopy = methods.index("canopy")
    arith, chain = plan.envs.index("arith"), plan.envs.index("chain_tasks")
    v = comparisons[0].vs_grpo_steps["canopy"]
    assert v.verdict == HOLDS
    assert to_hex(cells[arith, canopy].get_facecolor()) == figures.CATEGORY_COLORS[HOLDS].lower()
    assert texts[arith, canopy].startswith(f"{v.diff[0]:+.3f}\n[{v.diff[1]:+.2f}, {v.diff[2]:+.2f}]")
    assert texts[arith, canopy].endswith("n=5: holds")
    assert texts[chain, canopy] == "missing"  # applies, no run
    assert to_hex(cells[chain, canopy].get_facecolor()) == figures.CATEGORY_COLORS["missing"].lower()
    ccpo = methods.index("ccpo")
    assert texts[arith, ccpo] == "n/a"
    assert to_hex(cells[arith, ccpo].get_facecolor()) == figures.CATEGORY_COLORS["n/a"].lower()
    # every cell's colour is its category's, and the legend names exactly the categories drawn
    colours = {to_hex(c) for c in figures.CATEGORY_COLORS.values()}
    assert {to_hex(p.get_facecolor()) for p in cells.values()} <= colours
    [legend] = fig.legends
    assert {t.get_text() for t in legend.get_texts()} == {HOLDS, "missing", "n/a"}
    renderer = figures._renderer(fig)
    assert not figures.boxes_overlap(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
    assert not figures.any_overlap(figures.tick_label_boxes(fig, ax))
