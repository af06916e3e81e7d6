"""Statistics for few-run RL results: IQM, bootstrap intervals, probability of improvement.

A replication has a handful of seeds per arm, so point estimates alone mislead. Following
Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical Precipice"
(NeurIPS 2021, arXiv:2108.13264; the `rliable` library), we report:

- the interquartile mean (IQM, their Sec. 4.3): the mean of the middle 50% of runs, robust to
  one outlying seed yet less noisy than the median;
- percentile-bootstrap confidence intervals (Efron & Tibshirani 1993, ch. 13) of a mean, and
  stratified bootstrap intervals of an aggregate over several tasks (their Sec. 4.1: runs are
  resampled with replacement *within* each task, so every task keeps its number of runs);
- the probability of improvement P(X > Y) (their Sec. 4.4): per task the Mann-Whitney
  statistic, i.e. the share of run pairs (x_i, y_j) with x_i > y_j, ties counting 1/2, then
  averaged over tasks; its interval by the same stratified bootstrap, X and Y resampled
  independently.

Here a "stratum" (rliable's "task") is whatever the runs are grouped by: an environment, a tier.
Every function is pure numpy and deterministic given `seed`. Functions that return an interval
return `(point, lo, hi)`; the bounds are NaN when the data cannot give one (a stratum with a
single run: resampling one value says nothing about the spread), never a zero-width interval.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

Interval = tuple[float, float, float]  # (point estimate, lower bound, upper bound)
Statistic = Literal["mean", "iqm"] | Callable[[list[np.ndarray]], np.ndarray]

NAN = float("nan")


def _as_sample(values: ArrayLike, what: str = "values") -> np.ndarray:
    x = np.asarray(values, dtype=float).ravel()
    if not np.all(np.isfinite(x)):
        raise ValueError(f"{what} must be finite numbers; got {x.tolist()}")
    return x


def _as_strata(values: ArrayLike | Sequence[ArrayLike], what: str = "values") -> list[np.ndarray]:
    """One 1-D sample (a single stratum) or a sequence of 1-D samples (one per stratum)."""
    if isinstance(values, np.ndarray):
        if values.ndim <= 1:
            return [_as_sample(values, what)]
        raise ValueError(f"{what}: pass one 1-D sample or a list of 1-D samples, one per stratum; got an array of "
                         f"shape {values.shape} (for an rliable-style (runs, tasks) matrix pass list(matrix.T))")
    seq = list(values)  # type: ignore[arg-type]
    if all(np.ndim(v) == 0 for v in seq):
        return [_as_sample(np.asarray(seq, dtype=float), what)]
    return [_as_sample(v, f"{what}[{i}]") for i, v in enumerate(seq)]


def _trimmed_mean(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """IQM along `axis`: sort, drop floor(n/4) values at each end, average the rest."""
    n = x.shape[axis]
    cut = n // 4
    s = np.sort(x, axis=axis)
    return np.take(s, np.arange(cut, n - cut), axis=axis).mean(axis=axis)


def iqm(values: ArrayLike) -> float:
    """Interquartile mean (Agarwal et al. 2021, Sec. 4.3): the mean of the middle 50% of values.

    Same convention as `scipy.stats.trim_mean(values, 0.25)`, which rliable uses: floor(n/4)
    values are dropped at each end, so for n < 4 it is the plain mean, and for n = 4 the mean of
    the middle two. NaN for an empty input.
    """
    x = _as_sample(values)
    return NAN if x.size == 0 else float(_trimmed_mean(x))


def _quantiles(boot: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray]:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    alpha = 1.0 - confidence
    lo, hi = np.quantile(boot, [alpha / 2, 1 - alpha / 2], axis=0)
    return lo, hi


def mean_ci(values: ArrayLike, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> Interval:
    """Mean and its percentile-bootstrap confidence interval: `(mean, lo, hi)`.

    `n_boot` resamples of the n values with replacement; the bounds are the (1-c)/2 and
    (1+c)/2 quantiles of the resampled means. One value gives `(x, nan, nan)`; none gives NaNs.
    """
    x = _as_sample(values)
    if x.size == 0:
        return NAN, NAN, NAN
    if x.size == 1:
        return float(x[0]), NAN, NAN
    rng = np.random.default_rng(seed)
    idx_B_n = rng.integers(0, x.size, size=(n_boot, x.size))
    means_B = x[idx_B_n].mean(axis=1)
    lo, hi = _quantiles(means_B, confidence)
    return float(x.mean()), float(lo), float(hi)


def curve_ci(values_R_T: ArrayLike, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0
             ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise mean and bootstrap band of R runs' curves sampled at the same T points.

    Whole runs are resampled (the same resampled seeds at every point), so the band is the one a
    reader expects of a learning curve. Returns three arrays of length T; bounds are NaN for R < 2.
    """
    y = np.asarray(values_R_T, dtype=float)
    if y.ndim != 2:
        raise ValueError(f"curve_ci expects a (runs, points) array; got shape {y.shape}")
    mean_T = y.mean(axis=0) if y.shape[0] else np.full(y.shape[1], NAN)
    if y.shape[0] < 2:
        return mean_T, np.full(y.shape[1], NAN), np.full(y.shape[1], NAN)
    rng = np.random.default_rng(seed)
    idx_B_R = rng.integers(0, y.shape[0], size=(n_boot, y.shape[0]))
    means_B_T = y[idx_B_R].mean(axis=1)
    lo_T, hi_T = _quantiles(means_B_T, confidence)
    return mean_T, lo_T, hi_T


# ---- stratified bootstrap ------------------------------------------------------------------


def _aggregate(statistic: Statistic, strata_S: list[np.ndarray]) -> np.ndarray:
    """Apply an aggregate to S strata, each shaped (..., n_s); returns shape (...)."""
    if statistic == "mean":  # every stratum weighs the same (rliable's mean over tasks)
        return np.mean([s.mean(axis=-1) for s in strata_S], axis=0)
    if statistic == "iqm":  # IQM of all runs of all strata pooled (rliable's aggregate IQM)
        return _trimmed_mean(np.concatenate(strata_S, axis=-1))
    if callable(statistic):
        return np.asarray(statistic(strata_S))
    raise ValueError(f"statistic must be 'mean', 'iqm' or a callable; got {statistic!r}")


def _resample(strata: list[np.ndarray], rng: np.random.Generator, n_boot: int) -> list[np.ndarray]:
    """Each stratum resampled with replacement within itself: shapes (n_boot, n_s)."""
    return [s[rng.integers(0, s.size, size=(n_boot, s.size))] for s in strata]


def stratified_bootstrap_ci(strata: ArrayLike | Sequence[ArrayLike], statistic: Statistic = "mean",
                            confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> Interval:
    """An aggregate over strata (tasks, environments) and its stratified bootstrap interval.

    `strata` is one sample or a sequence of samples, one per stratum (sizes may differ).
    `statistic`: "mean" (the mean over strata of each stratum's mean), "iqm" (IQM of all runs
    pooled), or a callable taking a list of arrays shaped (..., n_s) and reducing the last axis.
    Runs are resampled within each stratum (Agarwal et al. 2021, Sec. 4.1). Bounds are NaN if
    any stratum has fewer than 2 runs.
    """
    groups = _as_strata(strata, "strata")
    if not groups or any(g.size == 0 for g in groups):
        return NAN, NAN, NAN
    point = float(_aggregate(statistic, groups))
    if any(g.size < 2 for g in groups):
        return point, NAN, NAN
    rng = np.random.default_rng(seed)
    boot_B = _aggregate(statistic, _resample(groups, rng, n_boot))
    lo, hi = _quantiles(boot_B, confidence)
    return point, float(lo), float(hi)


def difference_ci(x: ArrayLike | Sequence[ArrayLike], y: ArrayLike | Sequence[ArrayLike],
                  statistic: Statistic = "mean", confidence: float = 0.95, n_boot: int = 2000,
                  seed: int = 0) -> Interval:
    """statistic(X) - statistic(Y) for two independent sets of runs, with a bootstrap interval.

    X and Y are each resampled within every stratum, independently of each other (unpaired; for
    paired runs, e.g. one run's final vs its own initial score, bootstrap the per-run
    differences with `stratified_bootstrap_ci` instead). Both must have the same strata.
    """
    xs, ys = _as_strata(x, "x"), _as_strata(y, "y")
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} strata and y has {len(ys)}; give both the same strata (tasks)")
    if any(s.size == 0 for s in xs + ys):
        return NAN, NAN, NAN
    point = float(_aggregate(statistic, xs) - _aggregate(statistic, ys))
    if any(s.size < 2 for s in xs + ys):
        return point, NAN, NAN
    rng = np.random.default_rng(seed)
    bx_B, by_B = _aggregate(statistic, _resample(xs, rng, n_boot)), _aggregate(statistic, _resample(ys, rng, n_boot))
    lo, hi = _quantiles(bx_B - by_B, confidence)
    return point, float(lo), float(hi)


# ---- probability of improvement ---------------------------------------------------------------


def _prob_greater(x_B_n: np.ndarray, y_B_m: np.ndarray) -> np.ndarray:
    """Mann-Whitney P(X > Y) with ties 1/2, over the last axis; leading axes broadcast."""
    diff_B_n_m = x_B_n[..., :, None] - y_B_m[..., None, :]
    return ((diff_B_n_m > 0) + 0.5 * (diff_B_n_m == 0)).mean(axis=(-2, -1))


def prob_greater(x: ArrayLike, y: ArrayLike) -> float:
    """P(X > Y) from two samples: the share of pairs (x_i, y_j) with x_i > y_j, a tie counting 1/2.

    This is the Mann-Whitney U statistic divided by n*m (Agarwal et al. 2021, Sec. 4.4, Eq. for
    P(X_m > Y_m)); 0.5 means no difference, 1 that every run of X beats every run of Y.
    """
    xs, ys = _as_sample(x, "x"), _as_sample(y, "y")
    if xs.size == 0 or ys.size == 0:
        return NAN
    return float(_prob_greater(xs, ys))


def probability_of_improvement(x: ArrayLike | Sequence[ArrayLike], y: ArrayLike | Sequence[ArrayLike],
                               confidence: float = 0.95, n_boot: int = 2000, seed: int = 0) -> Interval:
    """P(X > Y) averaged over strata (tasks), with a stratified bootstrap interval.

    Agarwal et al. 2021, Sec. 4.4: P(X > Y) = (1/M) sum_m P(X_m > Y_m), each term the
    Mann-Whitney statistic of task m's runs (ties 1/2). The interval resamples X's and Y's runs
    independently within each task. Bounds are NaN if any task has fewer than 2 runs of X or Y.
    """
    xs, ys = _as_strata(x, "x"), _as_strata(y, "y")
    if len(xs) != len(ys):
        raise ValueError(f"x has {len(xs)} strata and y has {len(ys)}; give both the same strata (tasks)")
    if any(s.size == 0 for s in xs + ys):
        return NAN, NAN, NAN
    point = float(np.mean([_prob_greater(a, b) for a, b in zip(xs, ys, strict=True)]))
    if any(s.size < 2 for s in xs + ys):
        return point, NAN, NAN
    rng = np.random.default_rng(seed)
    bx, by = _resample(xs, rng, n_boot), _resample(ys, rng, n_boot)
    boot_B = np.mean([_prob_greater(a, b) for a, b in zip(bx, by, strict=True)], axis=0)
    lo, hi = _quantiles(boot_B, confidence)
    return point, float(lo), float(hi)
