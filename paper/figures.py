"""Figures (seaborn style, matplotlib Agg): learning curves, final scores, the cross-method matrix.

Bands and error bars are 95% Student-t intervals over seeds from common/stats.py (the
same numbers as the tables), never seaborn's own estimator. Figures are drawn on Agg canvases
without pyplot, so no display or global backend is involved. Each figure is written as PNG and PDF
with the timestamps and software tags left out, so re-running the build on the same results gives
the same files.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import Any

import matplotlib as mpl
import numpy as np
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from common import stats
from paper.cards import Card
from paper.load import Results, Run
from paper.tables import CI, arms_of, envs_of, eval_k, main_arm, metric_label, stage_values

DPI = 120
X_AXES = (("step", "RL step"),
          ("generated_tokens_total", "generated tokens (cumulative)"),
          ("model_calls_total", "model calls (cumulative)"))
Y_LABELS = {
    "success_rate": "train success rate\n(fraction of episodes)",
    "reward_mean": "train reward\n(mean per episode)",
    "signal_fraction": "groups with signal\n(fraction of groups)",
    "entropy": "policy entropy\n(nats per token)",
    "kl": "KL to reference\n(nats per token)",
    "clip_fraction": "clipped tokens\n(fraction)",
    "response_tokens_mean": "response length\n(tokens)",
    "loss": "policy loss",
    "grad_norm": "gradient norm",
}
STAGE_LABELS = {"initial": "warm start (SFT)", "final": "after RL"}


def setup() -> None:
    sns.set_theme(style="whitegrid", context="paper", font_scale=1.0)
    mpl.rcParams.update({"figure.dpi": 100})


def palette(arms: list[str]) -> dict[str, Any]:
    return dict(zip(arms, sns.color_palette("colorblind", max(len(arms), 3)), strict=False))


def wrap(title: str, width_in: float) -> str:
    """Break a title into lines that fit a figure `width_in` inches wide."""
    return "\n".join(textwrap.wrap(title, width=max(int(width_in * 10), 30)))


def new_figure(rows: int, cols: int, figsize: tuple[float, float], **kw: Any) -> tuple[Figure, np.ndarray]:
    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False, **kw)


def save(fig: Figure, out_dir: Path, stem: str) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    png, pdf = out_dir / f"{stem}.png", out_dir / f"{stem}.pdf"
    fig.savefig(png, dpi=DPI, metadata={"Software": None})
    fig.set_layout_engine("none")  # keep the layout just computed: the PDF needs no second pass
    fig.savefig(pdf, metadata={"Creator": None, "Producer": None, "CreationDate": None})
    return [png, pdf]


def wrap_label(text: str, width: int = 16) -> str:
    """A tick label broken into lines of at most `width` characters (words are not split)."""
    return "\n".join(textwrap.wrap(text, width=width, break_long_words=False)) or text


def _renderer(fig: Figure) -> Any:
    fig.canvas.draw()  # runs the constrained layout: the boxes below are the ones saved
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def tick_label_boxes(fig: Figure, ax: Axes, axis: str = "x") -> list[Any]:
    """The drawn bounding boxes (display units) of an axis' visible, non-empty tick labels."""
    renderer = _renderer(fig)
    labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
    return [t.get_window_extent(renderer) for t in labels if t.get_visible() and t.get_text().strip()]


def boxes_overlap(a: Any, b: Any, pad: float = 0.5) -> bool:
    """Whether two display boxes share more than `pad` pixels in both directions."""
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > pad) and (min(a.y1, b.y1) - max(a.y0, b.y0) > pad)


def any_overlap(boxes: list[Any]) -> bool:
    return any(boxes_overlap(a, b) for i, a in enumerate(boxes) for b in boxes[i + 1:])


def declutter(fig: Figure) -> None:
    """Rotate the x tick labels of every axes whose labels overlap: 30 degrees, then 90 if still needed."""
    for ax in fig.axes:
        for angle in (30, 90):
            if not any_overlap(tick_label_boxes(fig, ax)):
                break
            for t in ax.get_xticklabels():
                t.set_rotation(angle)
                t.set_horizontalalignment("right" if angle < 90 else "center")
                t.set_rotation_mode("anchor" if angle < 90 else "default")


def interval_words(counts: list[int], what: str = "band") -> str:
    """What a figure draws over seeds, given each arm's seeds: an interval only where there are 2 or more."""
    if not counts or max(counts) < 2:
        return "one seed per arm, no interval"
    seeds = f"{min(counts)}" if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"
    lead = f"mean over {seeds} seeds, {what} = 95% t interval"
    return lead if min(counts) >= 2 else lead + " (none for an arm with one seed)"


# ---- curve data --------------------------------------------------------------------------------
def aligned(points: list[list[dict[str, Any]]], x_key: str, y_key: str) -> tuple[np.ndarray, np.ndarray]:
    """Every seed's curve on one x: (x_T, y_R_T), over the steps that every seed has.

    Against compute, seeds spend slightly different amounts by the same step; each step is drawn
    at the seeds' mean cumulative compute, so points stay the real evaluation or training steps.
    """
    rows = [{int(p["step"]): p for p in run if p.get(y_key) is not None and p.get(x_key) is not None}
            for run in points]
    rows = [r for r in rows if r]
    if not rows:
        return np.array([]), np.zeros((0, 0))
    steps = sorted(set.intersection(*(set(r) for r in rows)))
    x_R_T = np.array([[float(r[s][x_key]) for s in steps] for r in rows])
    y_R_T = np.array([[float(r[s][y_key]) for s in steps] for r in rows])
    return x_R_T.mean(axis=0), y_R_T


def _band(ax: Axes, x: np.ndarray, y_R_T: np.ndarray, color: Any, label: str, marker: str | None) -> None:
    if not x.size:
        return
    mean, lo, hi = stats.curve_ci(y_R_T, **CI)
    ax.plot(x, mean, color=color, label=label, lw=1.6, marker=marker, ms=3.5)
    if not np.isnan(lo).all():
        ax.fill_between(x, lo, hi, color=color, alpha=0.22, lw=0)


# ---- figures -----------------------------------------------------------------------------------
def curves_plot(method: str, env: str, results: Results, card: Card | None) -> Figure | None:
    """The figure `curves_figure` saves (None: nothing to draw). Rows: each card curve (metrics.jsonl)
    and the held-out eval; columns: steps, tokens, calls. A band is drawn only for an arm with 2+ seeds,
    and the title says which."""
    arms = arms_of(method, results, card)
    colors = palette(arms)
    runs_by_arm = {a: results.of(method, env, a) for a in arms if results.of(method, env, a)}
    if not runs_by_arm or not any(r.metrics for rs in runs_by_arm.values() for r in rs):
        return None  # no run has a training step (a training-free method): nothing to draw over steps
    keys = card.curves if card else ["success_rate"]
    eval_metric = card.eval_metric if card else "mean@k"
    k = eval_k([r for rs in runs_by_arm.values() for r in rs])
    rows: list[tuple[str, str]] = [("train", key) for key in keys] + [("eval", eval_metric)]
    fig, axes = new_figure(len(rows), 3, (11, 2.3 * len(rows) + 1.2), sharex="col")
    for i, (source, key) in enumerate(rows):
        for j, (x_key, x_label) in enumerate(X_AXES):
            ax = axes[i, j]
            for arm, runs in runs_by_arm.items():
                points: list[list[dict[str, Any]]] = (
                    [r.metrics for r in runs] if source == "train" else [r.eval_points() for r in runs])
                x, y = aligned(points, x_key, key)
                label = f"{card.label(arm) if card else arm} (n={len(runs)})"
                _band(ax, x, y, colors[arm], label, "o" if source == "eval" else None)
            if i == len(rows) - 1:
                ax.set_xlabel(x_label)
            if j == 0:
                ax.set_ylabel(Y_LABELS.get(key, key) if source == "train"
                              else f"held-out {metric_label(key, k)}\n(fraction of tasks)")
            if x_key != "step":
                ax.xaxis.set_major_formatter(EngFormatter(sep=""))
    handles, labels = axes[0, 0].get_legend_handles_labels()
    drawn = interval_words([len(rs) for rs in runs_by_arm.values()])
    fig.suptitle(wrap(f"{card.title if card else method} on {env}: {drawn}", 11))
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 4), frameon=False)
    declutter(fig)
    return fig


def curves_figure(method: str, env: str, results: Results, card: Card | None, out_dir: Path) -> list[Path]:
    """`curves_plot`, written as `<method>-<env>-curves.{png,pdf}`."""
    fig = curves_plot(method, env, results, card)
    return [] if fig is None else save(fig, out_dir, f"{method}-{env}-curves")


def final_plot(method: str, results: Results, card: Card | None) -> Figure | None:
    """The figure `final_figure` saves (None: no runs). Per env: each arm's warm start and final held-out
    score, the mean with its 95% t interval (an arm with 2+ seeds), seeds as dots; the arms' names are
    wrapped (rotated where they still collide) and the legend sits below the panels."""
    envs, arms = envs_of(method, results, card), arms_of(method, results, card)
    if not envs:
        return None
    metric = card.eval_metric if card else "mean@k"
    k = eval_k(results.of(method))
    stage_colors = dict(zip(("initial", "final"), sns.color_palette("colorblind", 2), strict=True))
    n_arms = [max(sum(1 for a in arms if results.of(method, e, a)), 1) for e in envs]
    width = max(1.0 + 1.3 * sum(max(n, 2) for n in n_arms), 5.5)
    fig, axes = new_figure(1, len(envs), (width, 4.6), sharey=True, width_ratios=[max(n, 2) for n in n_arms])
    counts: list[int] = []
    for ax, env in zip(axes[0], envs, strict=True):
        present = [a for a in arms if results.of(method, env, a)]
        for xi, arm in enumerate(present):
            runs = results.of(method, env, arm)
            counts.append(len(runs))
            for si, stage in enumerate(("initial", "final")):
                values = stage_values(runs, stage, metric)
                if not values:
                    continue
                m, lo, hi = stats.mean_ci(values, **CI)
                x = xi + (si - 0.5) * 0.34
                jitter = np.linspace(-0.06, 0.06, len(values)) if len(values) > 1 else np.zeros(1)
                ax.scatter(x + jitter, values, s=12, color=stage_colors[stage], alpha=0.45, lw=0, zorder=2)
                yerr = None if math.isnan(lo) else [[m - lo], [hi - m]]
                ax.errorbar([x], [m], yerr=yerr, fmt="o", ms=6, capsize=4, color=stage_colors[stage],
                            zorder=3, label=STAGE_LABELS[stage])
        ax.set_xticks(range(len(present)))
        names = [wrap_label(card.label(a) if card else a) for a in present]
        ax.set_xticklabels([f"{name}\n(n={len(results.of(method, env, a))})"
                            for name, a in zip(names, present, strict=True)], fontsize=8)
        ax.set_xlim(-0.6, len(present) - 0.4)
        ax.grid(axis="x", visible=False)
        ax.set_title(env)
    axes[0, 0].set_ylabel(f"held-out {metric_label(metric, k)}\n(fraction of tasks)")
    by_label: dict[str, Any] = {}
    for ax in axes[0]:
        by_label.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    fig.legend(handles=list(by_label.values()), labels=list(by_label), loc="outside lower center",
               ncol=len(by_label) + 1, frameon=False,
               title=f"dots: seeds; {interval_words(counts, 'error bar')}")
    fig.suptitle(wrap(f"{card.title if card else method}: held-out score before and after RL", width))
    declutter(fig)
    return fig


def final_figure(method: str, results: Results, card: Card | None, out_dir: Path) -> list[Path]:
    """`final_plot`, written as `<method>-final.{png,pdf}`."""
    fig = final_plot(method, results, card)
    return [] if fig is None else save(fig, out_dir, f"{method}-final")


def matrix_plot(methods: list[str], results: Results, cards: dict[str, Card]) -> Figure | None:
    """The figure `matrix_figure` saves (None: no method with an arm): a heat map of methods x envs, each
    method's own arm, final held-out score (mean [95% t interval], n)."""
    envs = sorted({r.env for r in results.runs if r.method in methods})
    rows, labels, counts = [], [], []
    for method in methods:
        card = cards.get(method)
        arm = main_arm(method, results, card)
        if arm is None:
            continue
        metric = card.eval_metric if card else "mean@k"
        labels.append(f"{method}\n({wrap_label(card.label(arm) if card else arm, 24)})")
        cells = []
        counts.append([len(results.of(method, env, arm)) for env in envs])
        for env in envs:
            runs: list[Run] = results.of(method, env, arm)
            cells.append(stats.mean_ci(stage_values(runs, "final", metric), **CI)
                         if runs else (math.nan,) * 3)
        rows.append(cells)
    if not rows:
        return None
    means = np.array([[c[0] for c in row] for row in rows])
    annot = np.array([["" if math.isnan(c[0]) else f"{c[0]:.2f}" + ("" if math.isnan(c[1]) else
                       f"\n[{c[1]:.2f}, {c[2]:.2f}]") + f"\nn={n}" for c, n in zip(row, ns, strict=True)]
                      for row, ns in zip(rows, counts, strict=True)])
    fig, axes = new_figure(1, 1, (3.2 + 1.2 * len(envs), 1.8 + 0.8 * len(rows)))
    ax = axes[0, 0]
    ax.set_facecolor("#eeeeee")  # cells of envs a method was not run on
    sns.heatmap(means, annot=annot, fmt="", cmap="viridis", vmin=0, vmax=1, xticklabels=envs,
                yticklabels=labels, cbar_kws={"label": "final held-out mean@k (fraction of tasks)"}, ax=ax,
                linewidths=0.5, annot_kws={"fontsize": 7})
    ax.grid(False)
    ax.tick_params(axis="y", rotation=0)
    ax.set_xlabel("environment")
    ax.set_ylabel("method (arm)")
    ax.set_title(wrap("Final held-out mean@k, mean over seeds [95% t interval], n = seeds; grey: not run",
                      3.2 + 1.2 * len(envs)))
    declutter(fig)
    return fig


def matrix_figure(methods: list[str], results: Results, cards: dict[str, Card], out_dir: Path) -> list[Path]:
    """`matrix_plot`, written as `matrix.{png,pdf}`."""
    fig = matrix_plot(methods, results, cards)
    return [] if fig is None else save(fig, out_dir, "matrix")


# ---- verdicts as categories (the head-to-head matrix, paper/head_to_head.py) ------------------------
# Okabe-Ito colours (safe for colour-blind readers); every cell also names its category in words.
# "testbed cannot tell": a cell the head to head's design check greys (void or design null: not counted),
# a darker grey than "n/a" (the method does not apply), with its gate written in the cell.
CATEGORY_COLORS = {
    "holds": "#009E73", "opposite": "#D55E00", "no effect": "#56B4E9", "inconclusive": "#F0E442",
    "void": "#CC79A7", "design null": "#0072B2", "testbed cannot tell": "#999999", "missing": "#FFFFFF",
    "n/a": "#DDDDDD",
}
DARK_CATEGORIES = {"opposite", "design null", "holds"}  # white text on these


def category_grid(fig: Figure, ax: Axes, rows: list[str], cols: list[str], category: list[list[str]],
                  text: list[list[str]], legend_title: str) -> None:
    """A rows x cols grid of cells coloured by their category (CATEGORY_COLORS), each cell's text written in
    it, and a legend of the categories present outside the axes (below)."""
    from matplotlib.patches import Patch, Rectangle

    for i in range(len(rows)):
        for j in range(len(cols)):
            cat = category[i][j]
            ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, facecolor=CATEGORY_COLORS[cat],
                                   edgecolor="white", lw=1.5, gid=f"cell {i} {j} {cat}",
                                   hatch="//" if cat == "missing" else None))
            ax.text(j, i, text[i][j], ha="center", va="center", fontsize=7,
                    color="white" if cat in DARK_CATEGORIES else "black")
    ax.set_xlim(-0.5, len(cols) - 0.5)
    ax.set_ylim(len(rows) - 0.5, -0.5)
    ax.set_xticks(range(len(cols)), [wrap_label(c, 14) for c in cols])
    ax.set_yticks(range(len(rows)), rows)
    ax.grid(False)
    present = [c for c in CATEGORY_COLORS if any(c in row for row in category)]
    handles = [Patch(facecolor=CATEGORY_COLORS[c], edgecolor="#777777", label=c,
                     hatch="//" if c == "missing" else None) for c in present]
    fig.legend(handles=handles, loc="outside lower center", ncol=len(handles), frameon=False,
               title=legend_title)
    declutter(fig)
