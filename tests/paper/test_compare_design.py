"""paper/compare_design.py: the head to head's design check (#46) read from `compare/design-<scale>.json`:
greyed cells (void, design null) shown with their reason and left out of the tally, the gate beside every
other verdict, the figure's own grey category; without the file the section as before plus its two lines;
a file that is not a design check is a problem."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from paper.compare_design import CANNOT_TELL, GATES, NOT_RUN, design_path, load_design
from paper.head_to_head import build_compare, compare_env, load_compare, load_plan
from tests.paper.test_compare import results, write  # noqa: F401  (`results`: the fixture)

DESIGN = Path(__file__).resolve().parent / "fixtures" / "compare-design-cpu.json"
SHARP_REASON = "advantages correlate 0.98 with GRPO's, signal-to-noise x1.00"


@pytest.fixture
def checked(results: Path) -> Path:  # noqa: F811
    """The fixture results with sharp and canopy on toolplan-k4, canopy on chain_tasks (GRPO's column there
    void), and the fixture design check: canopy on arith passes, sharp on toolplan-k4 is a design null,
    canopy on toolplan-k4 is not checked."""
    steps = results / "compare" / "steps"
    for s in range(5):
        write(steps, "grpo", "toolplan-k4", "grpo", s, 0.60 + 0.01 * s)
        write(steps, "sharp", "toolplan-k4", "sharp", s, 0.60 + 0.01 * s + 0.001 * (s % 2))
        write(steps, "canopy", "toolplan-k4", "full", s, 0.50 + 0.01 * s)
    write(steps, "canopy", "chain_tasks", "full", 0, 0.35)
    shutil.copy(DESIGN, design_path(results, "cpu"))
    return results


def row(text: str, method: str, start: str = "| ") -> str:
    return next(line for line in text.splitlines() if line.startswith(f"{start}{method} |"))


def test_a_greyed_cell_shows_its_reason_and_is_not_counted(checked, tmp_path):
    text, problems = build_compare(checked, tmp_path / "out")
    assert problems == []
    plan = load_plan(checked, "cpu")
    assert plan is not None
    toolplan, arith, chain = (plan.envs.index(e) + 2 for e in ("toolplan-k4", "arith", "chain_tasks"))
    sharp = [c.strip() for c in row(text, "sharp").split("|")]
    assert sharp[toolplan].startswith(f"(greyed: design null — {SHARP_REASON}) +0.000 [")
    assert sharp[toolplan].endswith("n=5, not counted [5 of 10 seeds]")
    assert "no effect" not in sharp[toolplan]  # a greyed cell says no verdict
    canopy = [c.strip() for c in row(text, "canopy").split("|")]
    assert canopy[arith].endswith("n=5: holds; design: pass [5 of 7 seeds]")
    assert canopy[toolplan].endswith(f"n=5: opposite; {NOT_RUN} [5 of 10 seeds]")
    assert canopy[chain].startswith("(greyed: void — the column: GRPO gains +0.010 mean@k on dev")
    # a cell without runs that the check greys is not missing: make compare does not run it
    iapo = [c.strip() for c in row(text, "iapo").split("|")]
    assert iapo[chain] == "not run (greyed: void — the column: GRPO gains +0.010 mean@k on dev (margin 0.05))"
    missing = next((line for line in text.splitlines() if line.startswith("Missing cells: ")), "")
    items = [i.split(":")[0] for i in missing.removeprefix("Missing cells: ").rstrip(".").split("; ")]
    assert "iapo on chain_tasks" not in items  # (iapo on chain_tasks-defects is another column)
    grpo = [c.strip() for c in row(text, "grpo").split("|")]
    assert grpo[arith].endswith("(baseline); design: pass [5 of 7 seeds]")
    assert grpo[chain] == "(greyed: void — GRPO gains +0.010 mean@k on dev (margin 0.05)) 0.300 (no CI) " \
                          "(baseline) [1 of 5 seeds]"
    # the tally counts canopy's two cells only; the greyed ones are listed with their reasons
    assert ("Counted verdicts, method − GRPO at equal steps (2 cells; 2 greyed left out; 1 without a design "
            "check): 1 holds, 1 opposite, 0 no effect, 0 inconclusive.") in text
    greyed = next(line for line in text.splitlines() if line.startswith("Greyed, not counted: "))
    assert f"sharp on toolplan-k4 (design null: {SHARP_REASON})" in greyed
    assert "grpo on chain_tasks (void: GRPO gains +0.010 mean@k on dev (margin 0.05))" in greyed
    assert "canopy on chain_tasks (void: the column: " in greyed
    where = design_path(checked, "cpu")
    assert f"Design check (`{where}`, dev split, margin 0.05, commit 0123456789)" in text
    # the per-environment tables: a design column, the numbers as they were
    vs_grpo = row(text, "toolplan-k4 | sharp", "| ")
    assert vs_grpo.endswith(f"| greyed, design null: {SHARP_REASON} |") and "n=5: no effect" in vs_grpo
    assert row(text, "arith | canopy").endswith("| pass: GRPO gains +0.120 on dev; separated from GRPO |")
    assert row(text, "toolplan-k4 | canopy").endswith(f"| {NOT_RUN} |")
    assert row(text, "toolplan-k4 | grpo − sharp").endswith("| greyed: sharp (design null) |")
    assert row(text, "toolplan-k4 | canopy − sharp").endswith("| greyed: sharp (design null) |")
    assert row(text, "toolplan-k4 | grpo − canopy").endswith("| — |")
    assert row(text, "chain_tasks | grpo − canopy").endswith("| greyed: grpo (void), canopy (void) |")
    ranked = row(text, "toolplan-k4 | 1 | sharp")  # the numbers as they were, the cell's gate beside them
    assert ranked.endswith(f"| 5 | 1 | 1.000 | greyed, design null: {SHARP_REASON} |")
    assert "| env | method | generated tokens (method vs GRPO) | equal steps | equal generated tokens | " \
           "design check |" in text


def test_the_figure_greys_a_cell_whose_testbed_cannot_tell(checked):
    from matplotlib.colors import to_hex
    from matplotlib.patches import Rectangle

    from paper import figures
    from paper.compare_design import load_design
    from paper.head_to_head import matrix_plot

    plan, design = load_plan(checked, "cpu"), load_design(checked, "cpu")
    assert plan is not None and design is not None
    steps, tokens = load_compare(checked)
    comparisons = [compare_env(e, steps, tokens) for e in ("arith", "chain_tasks", "toolplan-k4")]
    fig = matrix_plot(comparisons, "cpu", plan, design)
    ax = fig.axes[0]
    cells = {(round(p.get_x() + 0.5), round(p.get_y() + 0.5)): p
             for p in ax.patches if isinstance(p, Rectangle)}
    texts = {(round(t.get_position()[0]), round(t.get_position()[1])): t.get_text() for t in ax.texts}
    methods = [m for m in plan.methods if m != "grpo"]
    grey = to_hex(figures.CATEGORY_COLORS[CANNOT_TELL])
    assert grey not in {to_hex(figures.CATEGORY_COLORS[c]) for c in ("n/a", "missing")}
    sharp, canopy = methods.index("sharp"), methods.index("canopy")
    toolplan, arith, chain = (plan.envs.index(e) for e in ("toolplan-k4", "arith", "chain_tasks"))
    for j, i in ((toolplan, sharp), (chain, canopy)):
        assert to_hex(cells[j, i].get_facecolor()) == grey
    assert texts[toolplan, sharp].endswith("n=5: greyed,\ndesign null")
    assert texts[chain, canopy].endswith("n=1: greyed,\nvoid")
    assert texts[arith, canopy].endswith("n=5: holds\ndesign: pass")
    assert texts[toolplan, canopy].endswith(f"n=5: opposite\ndesign: {NOT_RUN.split()[-2]} run")
    [legend] = fig.legends
    assert {t.get_text() for t in legend.get_texts()} == {"holds", "opposite", CANNOT_TELL, "missing", "n/a"}
    from paper.figures import _renderer, any_overlap, boxes_overlap, tick_label_boxes

    renderer = _renderer(fig)
    assert not boxes_overlap(legend.get_window_extent(renderer), ax.get_window_extent(renderer))
    assert not any_overlap(tick_label_boxes(fig, ax))


def test_without_a_design_file_the_section_is_as_before_with_two_lines(results, tmp_path):  # noqa: F811
    assert not design_path(results, "cpu").exists()
    text, problems = build_compare(results, tmp_path / "out")
    assert problems == []
    lines = text.splitlines()
    said = [line for line in lines if "design" in line.replace(str(tmp_path), "").lower()]
    where = design_path(results, "cpu")
    assert said == [f"Design check not run: there is no `{where}` (`make compare-design SCALE=cpu` writes "
                    "it); no cell is greyed, every verdict is counted."]
    assert ("Counted verdicts, method − GRPO at equal steps (1 cell): 1 holds, 0 opposite, 0 no effect, "
            "0 inconclusive.") in lines
    assert not any(line.startswith("Greyed") for line in lines)
    assert row(text, "canopy").split("|")[2].strip() == "+0.101 [+0.099, +0.102] n=5: holds [5 of 7 seeds]"
    # the tables' headers as before the design check (#23)
    assert ("| env | method | generated tokens (method vs GRPO) | equal steps | equal generated tokens |"
            in lines)
    assert "| env | pair | difference [95% CI], verdict | tokens differ |" in lines
    assert "| env | rank | method | mean@k [95% CI] | seeds | rank 95% interval | P(first) |" in lines
    for name in ("matrix", "vs-grpo", "pairs", "ranking"):
        assert "design" not in (tmp_path / "out" / "tables" / f"compare-{name}-cpu.md").read_text()


@pytest.mark.parametrize(("content", "why"), [
    ("{", "not readable JSON"), ("[]", "not a JSON object"),
    ('{"scale": "smoke", "cells": {}}', "its scale is"),
    ('{"scale": "cpu", "cells": []}', "cells is not a map"),
    ('{"scale": "cpu", "cells": {"sharp": {"toolplan-k4": {"gate": "maybe", "reason": "x"}}}}',
     "cells.sharp.toolplan-k4 has no gate of " + ", ".join(GATES)),
    ('{"scale": "cpu", "cells": {"sharp": {"toolplan-k4": {"gate": "void"}}}}', "with a reason"),
])
def test_a_design_file_that_is_not_one_is_a_problem_not_a_crash(checked, content, why):
    design_path(checked, "cpu").write_text(content)
    with pytest.raises(ValueError, match=why):
        load_design(checked, "cpu")
    text, problems = build_compare(checked, None)
    assert [p for p in problems if "design-cpu.json: not a design check of the comparison" in p and why in p]
    assert "no cell is greyed, every verdict is counted." in text and "(greyed:" not in text
    assert "Counted verdicts, method − GRPO at equal steps (4 cells): " in text


def test_the_fixture_has_the_shape_experiments_compare_design_writes():
    data = json.loads(DESIGN.read_text())
    assert set(data) >= {"scale", "split", "margin", "code", "envs", "cells"}
    for by_env in data["cells"].values():
        for entry in by_env.values():
            assert set(entry) == {"gate", "reason", "learnable", "separation", "home"}
