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
def curves_figure(method: str, env: str, results: Results, card: Card | None, out_dir: Path) -> list[Path]:
    """Rows: each card curve (metrics.jsonl) and the held-out eval; columns: steps, tokens, calls."""
    arms = arms_of(method, results, card)
    colors = palette(arms)
    runs_by_arm = {a: results.of(method, env, a) for a in arms if results.of(method, env, a)}
    if not runs_by_arm or not any(r.metrics for rs in runs_by_arm.values() for r in rs):
        return []  # no run has a training step (a training-free method): nothing to draw over steps
    keys = card.curves if card else ["success_rate"]
    eval_metric = card.eval_metric if card else "mean@k"
    k = eval_k([r for rs in runs_by_arm.values() for r in rs])
    rows: list[tuple[str, str]] = [("train", key) for key in keys] + [("eval", eval_metric)]
    fig, axes = new_figure(len(rows), 3, (11, 2.3 * len(rows) + 0.8), sharex="col")
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
    title = f"{card.title if card else method} on {env}: mean over seeds, shaded 95% t CI"
    fig.suptitle(wrap(title, 11))
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), frameon=False)
    return save(fig, out_dir, f"{method}-{env}-curves")


def final_figure(method: str, results: Results, card: Card | None, out_dir: Path) -> list[Path]:
    """Per env: each arm's warm start and final held-out score, mean with 95% CI, seeds as dots."""
    envs, arms = envs_of(method, results, card), arms_of(method, results, card)
    if not envs:
        return []
    metric = card.eval_metric if card else "mean@k"
    k = eval_k(results.of(method))
    stage_colors = dict(zip(("initial", "final"), sns.color_palette("colorblind", 2), strict=True))
    n_arms = [max(sum(1 for a in arms if results.of(method, e, a)), 1) for e in envs]
    width = max(1.4 + 1.7 * sum(max(n, 2) for n in n_arms), 5.5)
    fig, axes = new_figure(1, len(envs), (width, 3.8), sharey=True, width_ratios=[max(n, 2) for n in n_arms])
    for ax, env in zip(axes[0], envs, strict=True):
        present = [a for a in arms if results.of(method, env, a)]
        for xi, arm in enumerate(present):
            runs = results.of(method, env, arm)
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
                            zorder=3, label=STAGE_LABELS[stage] if xi == 0 else None)
        ax.set_xticks(range(len(present)))
        ax.set_xticklabels([f"{card.label(a) if card else a}\n(n={len(results.of(method, env, a))})"
                            for a in present])
        ax.set_xlim(-0.6, len(present) - 0.4)
        ax.grid(axis="x", visible=False)
        ax.set_title(env)
        ax.set_xlabel("arm")
    axes[0, 0].set_ylabel(f"held-out {metric_label(metric, k)}\n(fraction of tasks)")
    axes[0, 0].legend(loc="best", frameon=True, title="mean, 95% CI; dots: seeds")
    fig.suptitle(wrap(f"{card.title if card else method}: held-out score before and after RL", width))
    return save(fig, out_dir, f"{method}-final")


def matrix_figure(methods: list[str], results: Results, cards: dict[str, Card], out_dir: Path) -> list[Path]:
    """Heat map of methods x envs: each method's own arm, final held-out score (mean [CI])."""
    envs = sorted({r.env for r in results.runs if r.method in methods})
    rows, labels, counts = [], [], []
    for method in methods:
        card = cards.get(method)
        arm = main_arm(method, results, card)
        if arm is None:
            continue
        metric = card.eval_metric if card else "mean@k"
        labels.append(f"{method}\n({card.label(arm) if card else arm})")
        cells = []
        counts.append([len(results.of(method, env, arm)) for env in envs])
        for env in envs:
            runs: list[Run] = results.of(method, env, arm)
            cells.append(stats.mean_ci(stage_values(runs, "final", metric), **CI)
                         if runs else (math.nan,) * 3)
        rows.append(cells)
    if not rows:
        return []
    means = np.array([[c[0] for c in row] for row in rows])
    annot = np.array([["" if math.isnan(c[0]) else f"{c[0]:.2f}" + ("" if math.isnan(c[1]) else
                       f"\n[{c[1]:.2f}, {c[2]:.2f}]") + f"\nn={n}" for c, n in zip(row, ns, strict=True)]
                      for row, ns in zip(rows, counts, strict=True)])
    fig, axes = new_figure(1, 1, (2.4 + 1.6 * len(envs), 1.2 + 0.8 * len(rows)))
    ax = axes[0, 0]
    ax.set_facecolor("#eeeeee")  # cells of envs a method was not run on
    sns.heatmap(means, annot=annot, fmt="", cmap="viridis", vmin=0, vmax=1, xticklabels=envs,
                yticklabels=labels, cbar_kws={"label": "final held-out mean@k (fraction of tasks)"}, ax=ax,
                linewidths=0.5)
    ax.grid(False)
    ax.tick_params(axis="y", rotation=0)
    ax.set_xlabel("environment")
    ax.set_ylabel("method (arm)")
    ax.set_title("Final held-out mean@k, mean over seeds [95% CI]")
    return save(fig, out_dir, "matrix")
