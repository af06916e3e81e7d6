"""Statistics for few-run RL results: t intervals, paired differences, power, IQM, bootstrap.

A replication has a handful of seeds per arm, so point estimates alone mislead, and so do intervals
whose coverage is only right for many seeds. What we report:

- **means over seeds: Student-t intervals** (`t_interval`, `mean_ci`), exact for normal data at any
  n >= 2. The percentile bootstrap of a mean (Efron & Tibshirani 1993, ch. 13) is kept as
  `mean_ci(method="percentile")` for comparison only: at n = 3 its interval is the range of the
  seeds and covers the true mean about 75% of the time, not 95% (tests/common/test_stats.py checks
  both coverages by simulation);
- **paired differences** (`paired_t_ci`, `stratified_t_ci` of per-seed differences): arms that
  share a seed share the warm start and the task order, so a difference is taken seed by seed and
  the t interval is over those differences; over several strata (environments) the aggregate is
  the mean of per-stratum means, with Welch-Satterthwaite degrees of freedom;
- **power** (`paired_t_power`, `paired_seeds_needed`): the seeds a paired t-test needs to detect a
  given difference with a given probability (noncentral t; Cohen 1988, ch. 2);
- following Agarwal et al. 2021, "Deep Reinforcement Learning at the Edge of the Statistical
  Precipice" (NeurIPS 2021, arXiv:2108.13264; the `rliable` library), the interquartile mean (IQM,
  their Sec. 4.3) and aggregates over several tasks with **stratified bootstrap** intervals (their
  Sec. 4.1: runs are resampled with replacement *within* each task), and the probability of
  improvement P(X > Y) (their Sec. 4.4: per task the Mann-Whitney statistic, ties 1/2, averaged over
  tasks). These are percentile bootstraps, kept for statistics without a t interval (IQM, P(X > Y));
  like any percentile bootstrap they under-cover with fewer than about 10 runs per stratum.

Here a "stratum" (rliable's "task") is whatever the runs are grouped by: an environment, a tier.
Every function is deterministic given `seed`. Functions that return an interval return
`(point, lo, hi)`; the bounds are NaN when the data cannot give one (fewer than 2 values: one
value says nothing about the spread), never a zero-width interval from a single value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats as sps

Interval = tuple[float, float, float]  # (point estimate, lower bound, upper bound)
Statistic = Literal["mean", "iqm"] | Callable[[list[np.ndarray]], np.ndarray]
MeanInterval = Literal["t", "percentile"]

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
        raise ValueError(f"{what}: pass one 1-D sample or a list of 1-D samples, one per stratum; got an "
                         f"array of shape {values.shape} (for an rliable-style (runs, tasks) matrix pass "
                         "list(matrix.T))")
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


def _t_quantile(confidence: float, df: float) -> float:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1); got {confidence}")
    return float(sps.t.ppf(0.5 + confidence / 2, df))


def t_interval(values: ArrayLike, confidence: float = 0.95) -> Interval:
    """Mean and its Student-t confidence interval: `(mean, lo, hi)`.

    mean +- t_{(1+c)/2, n-1} * s / sqrt(n), s the sample standard deviation (ddof=1). Exact
    coverage for normal data at every n >= 2; for bounded scores such as mean@k over a held-out set
    (a mean of many Bernoulli outcomes) it stays close to nominal at n = 3 (tested by simulation).
    One value gives `(x, nan, nan)`; none gives NaNs.
    """
    x = _as_sample(values)
    if x.size == 0:
        return NAN, NAN, NAN
    if x.size == 1:
        return float(x[0]), NAN, NAN
    half = _t_quantile(confidence, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size)
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def prediction_interval(values: ArrayLike, confidence: float = 0.95) -> Interval:
    """Where one more draw from the same distribution falls: `(mean, lo, hi)`, mean +- t_{(1+c)/2, n-1} *
    s * sqrt(1 + 1/n) (normal data; Hahn & Meeker 1991, sec. 4.4). A rerun of one seed on another machine
    is such a draw when only float rounding differs (`make verify`). Fewer than 2 values give NaN bounds.
    """
    x = _as_sample(values)
    if x.size < 2:
        return (float(x[0]) if x.size else NAN), NAN, NAN
    half = _t_quantile(confidence, x.size - 1) * x.std(ddof=1) * np.sqrt(1 + 1 / x.size)
    return float(x.mean()), float(x.mean() - half), float(x.mean() + half)


def mean_ci(values: ArrayLike, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0,
            method: MeanInterval = "t") -> Interval:
    """Mean over seeds and its confidence interval: `(mean, lo, hi)`.

    `method="t"` (the default): the Student-t interval (`t_interval`); `n_boot` and `seed` are
    unused. `method="percentile"`: the percentile bootstrap, `n_boot` resamples of the n values with
    replacement, bounds at the (1-c)/2 and (1+c)/2 quantiles of the resampled means; kept to
    compare with (it under-covers at small n: at n = 3 it is the range of the three values). One
    value gives `(x, nan, nan)`; none gives NaNs.
    """
    if method == "t":
        return t_interval(values, confidence)
    if method != "percentile":
        raise ValueError(f"method must be 't' or 'percentile'; got {method!r}")
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


def curve_ci(values_R_T: ArrayLike, confidence: float = 0.95, n_boot: int = 2000, seed: int = 0,
             method: MeanInterval = "t") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pointwise mean and confidence band of R runs' curves sampled at the same T points.

    `method="t"`: a Student-t interval at each point. `method="percentile"`: whole runs are
    resampled (the same resampled seeds at every point). Returns three arrays of length T; bounds
    are NaN for R < 2.
    """
    y = np.asarray(values_R_T, dtype=float)
    if y.ndim != 2:
        raise ValueError(f"curve_ci expects a (runs, points) array; got shape {y.shape}")
    mean_T = y.mean(axis=0) if y.shape[0] else np.full(y.shape[1], NAN)
    if y.shape[0] < 2:
        return mean_T, np.full(y.shape[1], NAN), np.full(y.shape[1], NAN)
    if method == "t":
        half_T = _t_quantile(confidence, y.shape[0] - 1) * y.std(axis=0, ddof=1) / np.sqrt(y.shape[0])
        return mean_T, mean_T - half_T, mean_T + half_T
    if method != "percentile":
        raise ValueError(f"method must be 't' or 'percentile'; got {method!r}")
    rng = np.random.default_rng(seed)
    idx_B_R = rng.integers(0, y.shape[0], size=(n_boot, y.shape[0]))
    means_B_T = y[idx_B_R].mean(axis=1)
    lo_T, hi_T = _quantiles(means_B_T, confidence)
    return mean_T, lo_T, hi_T


# ---- paired differences and power ------------------------------------------------------------


def stratified_t_ci(strata: ArrayLike | Sequence[ArrayLike], confidence: float = 0.95) -> Interval:
    """The mean over strata of each stratum's mean, with a t interval.

    The estimate is (1/S) sum_s mean(x_s); its variance (1/S^2) sum_s var_s / n_s; the degrees of
    freedom are Welch-Satterthwaite's, (sum_s v_s)^2 / sum_s v_s^2 / (n_s - 1) with v_s = var_s / n_s
    (Welch 1947). With one stratum this is `t_interval`. Bounds are NaN if any stratum has fewer
    than 2 values; an interval of zero width when every stratum is constant.
    """
    groups = _as_strata(strata, "strata")
    if not groups or any(g.size == 0 for g in groups):
        return NAN, NAN, NAN
    point = float(np.mean([g.mean() for g in groups]))
    if any(g.size < 2 for g in groups):
        return point, NAN, NAN
    v_S = np.array([g.var(ddof=1) / g.size for g in groups])
    if not v_S.any():
        return point, point, point
    dof = v_S.sum() ** 2 / np.sum(v_S**2 / np.array([g.size - 1 for g in groups]))
    half = _t_quantile(confidence, dof) * np.sqrt(v_S.sum()) / len(groups)
    return point, float(point - half), float(point + half)


def paired_t_ci(x: ArrayLike, y: ArrayLike, confidence: float = 0.95) -> Interval:
    """mean(x - y) over pairs (x_i, y_i) (the same seed in two arms) and its paired t interval.

    Pairing removes what the two runs of one seed share (the warm start, the task order) from the
    spread, so it is never wider than it should be and usually much narrower than an unpaired one.
    """
    xs, ys = _as_sample(x, "x"), _as_sample(y, "y")
    if xs.size != ys.size:
        raise ValueError(f"paired samples must have the same length; got {xs.size} and {ys.size}")
    return t_interval(xs - ys, confidence)


def paired_t_power(n: int, sd: float, difference: float, alpha: float = 0.05) -> float:
    """Power of the two-sided paired t-test at level `alpha` with n pairs, when the true mean
    difference is `difference` and the per-pair differences have standard deviation `sd`.

    P(|T| > t_{1-alpha/2, n-1}) with T noncentral t, n-1 degrees of freedom and noncentrality
    difference / (sd / sqrt(n)) (Cohen 1988, ch. 2; what G*Power computes).
    """
    if n < 2:
        return NAN
    if sd <= 0:
        return 1.0 if difference != 0 else alpha
    df, ncp = n - 1, abs(difference) / sd * np.sqrt(n)
    crit = sps.t.ppf(1 - alpha / 2, df)
    return float(sps.nct.sf(crit, df, ncp) + sps.nct.cdf(-crit, df, ncp))


def paired_seeds_needed(sd: float, difference: float, alpha: float = 0.05, power: float = 0.8,
                        max_n: int = 100_000) -> int:
    """The fewest pairs (seeds) for which the paired t-test has at least `power` to detect
    `difference`, given the standard deviation `sd` of the per-seed differences (e.g. from a pilot).

    For example sd = difference needs 10 pairs, sd = 2 x difference 34 (G*Power's d = 1 and 0.5).
    `sd` of 0 gives 2; a NaN `sd` (no pilot) is an error. Returns `max_n` if even that is too few.
    """
    if not np.isfinite(sd) or sd < 0:
        raise ValueError(f"sd must be a finite number >= 0; got {sd}")
    if difference <= 0:
        raise ValueError(f"difference must be > 0; got {difference}")
    lo, hi = 2, 2
    while paired_t_power(hi, sd, difference, alpha) < power:  # bracket, then bisect: power rises with n
        if hi >= max_n:
            return max_n
        lo, hi = hi, min(2 * hi, max_n)
    while lo < hi:
        mid = (lo + hi) // 2
        if paired_t_power(mid, sd, difference, alpha) >= power:
            hi = mid
        else:
            lo = mid + 1
    return hi


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
    runs paired by seed use `paired_t_ci` or `stratified_t_ci` of the per-seed differences).
    Both must have the same strata. A percentile bootstrap: for aggregates such as the IQM, and
    short of nominal coverage with few runs.
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
    bx_B, by_B = (_aggregate(statistic, _resample(xs, rng, n_boot)),
                  _aggregate(statistic, _resample(ys, rng, n_boot)))
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
