"""The figures show what they say (#44): legends outside the data, tick labels that do not collide, a band
exactly where an arm has two or more seeds, and a title that says which."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from matplotlib.collections import PolyCollection
from matplotlib.figure import Figure

from paper import figures
from paper.cards import load_cards
from paper.load import load_results

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def results():
    figures.setup()
    return load_results(FIXTURES / "results")


@pytest.fixture(scope="module")
def cards():
    cards, errors = load_cards([REPO / "replications", FIXTURES / "cards"])
    assert "toy" in cards
    return cards


def legends_outside(fig: Figure) -> None:
    renderer = figures._renderer(fig)
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends, "no legend"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:
            assert not figures.boxes_overlap(box, ax.get_window_extent(renderer)), "legend over the data"


def ticks_apart(fig: Figure) -> None:
    for ax in fig.axes:
        for axis in ("x", "y"):
            boxes = figures.tick_label_boxes(fig, ax, axis)
            assert not figures.any_overlap(boxes), f"{axis} tick labels overlap on {ax.get_title()!r}"


def bands(ax) -> list[PolyCollection]:
    return [c for c in ax.collections if isinstance(c, PolyCollection)]


@pytest.mark.parametrize("method", ["grpo", "toy", "nocard"])
def test_final_figure_legend_outside_and_labels_apart(results, cards, method):
    fig = figures.final_plot(method, results, cards.get(method))
    assert fig is not None
    legends_outside(fig)
    ticks_apart(fig)


def test_long_arm_names_are_wrapped_or_rotated_not_overlapped(results, cards):
    long = {arm: f"{arm} with a very long descriptive name (dependent hops, K=5, 4 workers)"
            for arm in ("base", "better", "best", "few")}
    card = dataclasses.replace(cards["toy"], arms=long)
    fig = figures.final_plot("toy", results, card)
    assert fig is not None
    ticks_apart(fig)
    legends_outside(fig)
    # the overlap check itself sees overlapping labels
    ax = fig.axes[0]
    ax.set_xticks([0, 0.05], ["a label that is long", "another label as long"], rotation=0)
    assert figures.any_overlap(figures.tick_label_boxes(fig, ax))


def test_final_figure_says_what_its_error_bars_are(results, cards):
    one = figures.final_plot("nocard", results, None)
    four = figures.final_plot("grpo", results, cards["grpo"])
    assert one is not None and four is not None
    assert "one seed per arm, no interval" in one.legends[0].get_title().get_text()
    assert "mean over 4 seeds, error bar = 95% t interval" in four.legends[0].get_title().get_text()


@pytest.mark.parametrize(("method", "env", "seeds"), [("grpo", "arith", 4), ("nocard", "arith", 1),
                                                       ("toy", "grid", 2)])
def test_curves_band_iff_two_seeds_and_the_title_says_so(results, cards, method, env, seeds):
    fig = figures.curves_plot(method, env, results, cards.get(method))
    assert fig is not None
    title = fig.get_suptitle().replace("\n", " ")
    arms = {r.arm: len(results.of(method, env, r.arm)) for r in results.of(method, env)}
    for ax in fig.axes:
        lines = [ln for ln in ax.get_lines() if not ln.get_label().startswith("_")]
        assert len(lines) == len(arms)
        # a band per arm with two or more seeds, none for an arm with one
        assert len(bands(ax)) == sum(n >= 2 for n in arms.values())
    if seeds == 1:
        assert "one seed per arm, no interval" in title and "95%" not in title
    else:
        assert "band = 95% t interval" in title and "mean over" in title
    legends_outside(fig)
    ticks_apart(fig)


def test_matrix_figure_labels_apart(results, cards):
    fig = figures.matrix_plot(["grpo", "toy", "nocard"], results, cards)
    assert fig is not None
    ticks_apart(fig)


def test_interval_words():
    assert figures.interval_words([1, 1]) == "one seed per arm, no interval"
    assert figures.interval_words([3, 3]) == "mean over 3 seeds, band = 95% t interval"
    assert figures.interval_words([1, 5]).endswith("(none for an arm with one seed)")
