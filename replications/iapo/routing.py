"""IAPO's routing of a trajectory's advantage over its actions (torch-free; plain numpy).

Notation of the paper (IAPO, arXiv 2608.24588, section 3), per assistant action i of one trajectory:
L_i its tokens, L = sum_i L_i; d+_i its outgoing support-use edges (`input`, `success_utilization`),
d-_i its outgoing failed-use edges (`failed_utilization`), d_in_i its incoming support edges plus
direct user input, e_i in {0, 1} whether it carries an error.

    phi+_i = log(1 + d+_i + d_in_i)                      phi-_i = log(1 + e_i (1 + d-_i + d_in_i))
    z_i    = (phi_i - mean_L(phi)) / (std_L(phi) + eps)   (L-weighted mean and std, eps <= 1e-6)
    m_i    = exp(clip(z_i, -c, c)) / [(1/L) sum_j L_j exp(clip(z_j, -c, c))]
    A > 0: w_i = L m+_i exp(-beta+ psi-_i) / sum_j L_j m+_j exp(-beta+ psi-_j),  psi- = phi- - mean_L(phi-)
    A < 0: w_i = m-_i
    A = 0: the advantage is 0 whatever the weights (w = 1 here)

and the token advantage of action i is A * w_i. Invariants: w_i > 0, sum_i L_i w_i = L (the
trajectory's total advantage mass is kept), the sign is kept, and a graph that says nothing (every
action with the same features) gives w = 1.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EPS = 1e-8  # the z-score's eps (the card asks for at most 1e-6)
BETA_PLUS = 0.05  # beta+: how much an action's own errors cut its share of a positive advantage [P]
CLIP = 0.25  # c: the bound of the z-scores, so multipliers stay in [e^-2c, e^2c] [P]


def features(support_out: Sequence[float], failed_out: Sequence[float], incoming: Sequence[float],
             errors: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """(phi+, phi-) of every action (the paper's features).

    >>> [round(float(x), 4) for x in features([1, 0], [0, 2], [1, 0], [0, 1])[0]]
    [1.0986, 0.0]
    >>> [round(float(x), 4) for x in features([1, 0], [0, 2], [1, 0], [0, 1])[1]]
    [0.0, 1.3863]
    """
    d_plus, d_minus = np.asarray(support_out, float), np.asarray(failed_out, float)
    d_in, e = np.asarray(incoming, float), np.asarray(errors, float)
    return np.log1p(d_plus + d_in), np.log1p(e * (1.0 + d_minus + d_in))


def weighted_mean(x: np.ndarray, lengths: np.ndarray) -> float:
    return float(np.sum(lengths * x) / np.sum(lengths))


def multipliers(phi: np.ndarray, lengths: np.ndarray, c: float = CLIP) -> np.ndarray:
    """Bounded multipliers m_i: the L-weighted z-score of phi clipped to [-c, c], exponentiated and
    normalized to an L-weighted mean of 1."""
    lengths = np.asarray(lengths, float)
    mean = weighted_mean(phi, lengths)
    std = np.sqrt(weighted_mean((phi - mean) ** 2, lengths))
    z = (phi - mean) / (std + EPS)
    raw = np.exp(np.clip(z, -c, c))
    return raw / weighted_mean(raw, lengths)


def routing_weights(lengths: Sequence[int], support_out: Sequence[float], failed_out: Sequence[float],
                    incoming: Sequence[float], errors: Sequence[float], advantage: float,
                    beta_plus: float = BETA_PLUS, c: float = CLIP) -> list[float]:
    """One positive weight per action, with sum_i L_i w_i = L, routing the trajectory advantage `advantage`.

    Arguments are aligned per action (the trajectory's assistant actions in order). Routing by the
    sign of the advantage: a success is credited toward actions whose information was used (phi+),
    away from actions that erred (beta+ psi-); a failure is blamed toward actions that erred and whose
    errors were carried on (phi-). A flat graph gives w = 1 (GRPO's broadcast):

    >>> routing_weights([3, 3], [0, 0], [0, 0], [1, 1], [0, 0], advantage=1.0)
    [1.0, 1.0]
    >>> w = routing_weights([2, 2], [1, 0], [0, 0], [0, 0], [0, 0], advantage=1.0)
    >>> [round(x, 4) for x in w], round(2 * w[0] + 2 * w[1], 6)
    ([1.2449, 0.7551], 4.0)
    """
    lengths_N = np.asarray(lengths, float)
    n = lengths_N.size
    for name, arr in (("support_out", support_out), ("failed_out", failed_out), ("incoming", incoming),
                      ("errors", errors)):
        if len(arr) != n:
            raise ValueError(f"routing_weights: {name} has {len(arr)} entries for {n} actions "
                             "(one per action)")
        if np.any(np.asarray(arr, float) < 0):
            raise ValueError(f"routing_weights: {name} must be >= 0 (degrees and error flags); "
                             f"got {list(arr)}")
    if n == 0:
        return []
    if np.any(lengths_N < 0) or lengths_N.sum() <= 0:
        raise ValueError(f"routing_weights: lengths must be >= 0 with a positive sum; got {list(lengths)}")
    if not c > 0 or beta_plus < 0:
        raise ValueError(f"routing_weights: need c > 0 and beta_plus >= 0; got c={c}, beta_plus={beta_plus}")
    if advantage == 0 or not np.isfinite(advantage):
        if not np.isfinite(advantage):
            raise ValueError(f"routing_weights: the advantage must be finite; got {advantage}")
        return [1.0] * n
    phi_plus, phi_minus = features(support_out, failed_out, incoming, errors)
    total = lengths_N.sum()
    if advantage > 0:
        psi_minus = phi_minus - weighted_mean(phi_minus, lengths_N)
        raw = multipliers(phi_plus, lengths_N, c) * np.exp(-beta_plus * psi_minus)
        w = total * raw / np.sum(lengths_N * raw)
    else:
        w = multipliers(phi_minus, lengths_N, c)
    return [float(x) for x in w]


def routing_weights_reference(lengths: Sequence[int], support_out: Sequence[float],
                              failed_out: Sequence[float], incoming: Sequence[float], errors: Sequence[float],
                              advantage: float, beta_plus: float = BETA_PLUS, c: float = CLIP) -> list[float]:
    """The same formulas written out with Python loops, one line per symbol (a slow, obvious reference
    for the tests)."""
    import math

    n, total = len(lengths), float(sum(lengths))
    if advantage == 0:
        return [1.0] * n
    phi_p = [math.log(1 + support_out[i] + incoming[i]) for i in range(n)]
    phi_m = [math.log(1 + errors[i] * (1 + failed_out[i] + incoming[i])) for i in range(n)]

    def mult(phi: list[float]) -> list[float]:
        mean = sum(lengths[i] * phi[i] for i in range(n)) / total
        var = sum(lengths[i] * (phi[i] - mean) ** 2 for i in range(n)) / total
        z = [(phi[i] - mean) / (math.sqrt(var) + EPS) for i in range(n)]
        raw = [math.exp(min(max(zi, -c), c)) for zi in z]
        norm = sum(lengths[i] * raw[i] for i in range(n)) / total
        return [r / norm for r in raw]

    if advantage < 0:
        return mult(phi_m)
    mean_m = sum(lengths[i] * phi_m[i] for i in range(n)) / total
    m_p = mult(phi_p)
    raw = [m_p[i] * math.exp(-beta_plus * (phi_m[i] - mean_m)) for i in range(n)]
    denom = sum(lengths[i] * raw[i] for i in range(n))
    return [total * raw[i] / denom for i in range(n)]


def oracle_weights(lengths: Sequence[int], decisions: Sequence[bool], unit: bool = False) -> list[float]:
    """The oracle arm: w = L / (tokens of the decisions) on the decisions, 0 elsewhere (sum_i L_i w_i = L);
    w = 1 everywhere when no action is a decision (or the decisions have no tokens). `unit`: the unit
    oracle's weights (`unit_oracle_weights`).

    >>> oracle_weights([1, 2, 2, 3], [True, False, False, True])  # L = 8 over the 4 decision tokens
    [2.0, 0.0, 0.0, 2.0]
    >>> oracle_weights([1, 2], [False, False])
    [1.0, 1.0]
    """
    if unit:
        return unit_oracle_weights(decisions)
    mass = sum(n for n, d in zip(lengths, decisions, strict=True) if d)
    if mass == 0:
        return [1.0] * len(lengths)
    return [sum(lengths) / mass if d else 0.0 for d in decisions]


def unit_oracle_weights(decisions: Sequence[bool]) -> list[float]:
    """The unit oracle (#39): w = 1 on the decisions, 0 elsewhere, GRPO's per-token weight where the credit
    goes (the noise removed, no step enlarged: the total mass is not kept); w = 1 everywhere without any.

    >>> unit_oracle_weights([True, False, True]), unit_oracle_weights([False, False])
    ([1.0, 0.0, 1.0], [1.0, 1.0])
    """
    if not any(decisions):
        return [1.0] * len(decisions)
    return [1.0 if d else 0.0 for d in decisions]
