"""CCPO's counterfactual rewards, as plain functions and one small state (no torch): v2's event
bonus and v1's running-statistics credit (official code: `two_model_trainer.py`,
`historical_normalizer.py`). Each is tested against hand-computed cases (tests/replications/test_ccpo.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def v2_rewards(joint: Any, solo: Any, bonus: float = 0.2, baseline: str = "group"
               ) -> tuple[np.ndarray, np.ndarray]:
    """CCPO v2 rewards of one group (before mean-centering).

    `joint[k]`, `solo[k]` in [−1, +1] (±1 for a verifier). Solo baseline b_k = mean(solo) for every k
    (`baseline="group"`, v2's default) or b_k = solo[k], the paired solo play (`baseline="sample"`);
    event_k = 1[joint_k > 0 and b_k < 0] (helped) − 1[joint_k < 0 and b_k > 0] (hurt).
    Returns (Thinker r_T = joint + bonus·event, Solver r_S = joint).

    With binary outcomes and the group baseline, r_T is an affine map of joint (b is one number per
    group), so after mean-centering the Thinker's advantage is a positive multiple of the shared one:
    >>> from common.credit import drgrpo
    >>> drgrpo(v2_rewards([1, -1, -1, 1], [-1, -1, 1, -1])[0]) / drgrpo([1, -1, -1, 1])
    array([1.1, 1.1, 1.1, 1.1])
    """
    if baseline not in ("group", "sample"):
        raise ValueError(f"v2's solo baseline is group or sample; got {baseline!r}")
    joint_G = np.asarray(joint, dtype=np.float64)
    solo_G = np.asarray(solo, dtype=np.float64)
    if solo_G.shape != joint_G.shape:
        raise ValueError(f"v2 pairs joint and solo plays by index: {joint_G.shape} joint, "
                         f"{solo_G.shape} solo")
    b_G = np.full_like(joint_G, solo_G.mean()) if baseline == "group" else solo_G
    event_G = ((joint_G > 0) & (b_G < 0)).astype(np.float64) - ((joint_G < 0) & (b_G > 0)).astype(np.float64)
    return joint_G + bonus * event_G, joint_G.copy()


def oracle_rewards(joint: Any, solo_value: Any) -> tuple[np.ndarray, np.ndarray]:
    """The positive control's rewards (#38): the Thinker is credited with the joint reward minus the
    Solver's *true* expected solo outcome given the episode's hidden draw (`solo_value`, from the
    environment: 1 if the Solver knows, else 1/V), a per-draw baseline no real method can see; the Solver
    with the joint reward. Returns (Thinker, Solver) rewards, before the estimator (mean-centering).
    >>> [round(x, 2) for x in oracle_rewards([0.85, -0.15, 1.0], [1.0, 0.1, 1.0])[0]]
    [-0.15, -0.25, 0.0]
    """
    joint_N = np.asarray(joint, dtype=np.float64)
    value_N = np.asarray(solo_value, dtype=np.float64)
    if value_N.shape != joint_N.shape:
        raise ValueError(f"the oracle pairs each joint play with its draw: {joint_N.shape} joint, "
                         f"{value_N.shape} solo values")
    if np.isnan(value_N).any():
        raise ValueError("method.credit=oracle reads the Solver's expected solo outcome from each episode's "
                         "info['solo_value'] (thinker_solver's dyad setting); some episodes have none")
    return joint_N - value_N, joint_N.copy()


def vote_counterfactuals(correct: Any) -> np.ndarray:
    """Each voter's counterfactual credit in a majority vote, recomputed from the same votes:
    Δ_i = 1[majority of all votes right] − 1[majority of the votes without voter i right].

    `correct[i]`: whether voter i's vote was right (an invalid vote counts as cast and wrong). A team
    is right when more than half of the cast votes are right (`envs.testbeds.voting.majority_correct`),
    so the outcome depends on the correctness vector only, and the counterfactual of voter i needs no
    extra play: it is paired with the joint outcome by construction (the paper's vote setting).
    >>> vote_counterfactuals([True, True, False]).tolist()   # the two right voters are pivotal
    [1.0, 1.0, 0.0]
    """
    correct_V = np.asarray(correct, dtype=bool)
    n, right = correct_V.size, int(correct_V.sum())
    if n < 2:
        raise ValueError(f"a vote counterfactual needs at least 2 voters; got {n}")
    team = float(2 * right > n)
    without_V = (2 * (right - correct_V.astype(int)) > n - 1).astype(np.float64)
    return team - without_V


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-min(max(x, -20.0), 20.0)))


@dataclass
class _Running:
    """EMA of a batch mean and of a batch variance (std = sqrt of the EMA variance)."""

    mean: float = 0.0
    var: float = 1.0

    def std(self, eps: float) -> float:
        return math.sqrt(self.var) if self.var > eps else 1.0

    def update(self, x_N: np.ndarray, decay: float, first: bool) -> None:
        m, v = float(np.mean(x_N)), float(np.var(x_N))
        self.mean, self.var = ((m, v) if first
                               else (decay * self.mean + (1 - decay) * m, decay * self.var + (1 - decay) * v))


@dataclass
class V1Credit:
    """CCPO v1's running statistics and both roles' rewards for a batch (`rewards`)."""

    decay: float = 0.99
    min_samples: int = 10
    alpha: float = 1.0
    eta: float = 1.0
    eps: float = 1e-6
    n_updates: int = 0
    n_seen: int = 0
    # the gate the last batch's Solver rewards used (None: not yet normalizing)
    applied_gate: float | None = None
    delta: _Running = field(default_factory=_Running)
    joint: _Running = field(default_factory=_Running)
    solo: _Running = field(default_factory=_Running)

    @property
    def warm(self) -> bool:
        """Whether enough history has been seen to normalize."""
        return self.n_updates >= 1 and self.n_seen >= self.min_samples

    def gate(self) -> float:
        """g = sigmoid(η μ_Δ / (σ_Δ + ε)): the Solver leans on its joint reward when the Thinker helps on
        average."""
        return _sigmoid(self.eta * self.delta.mean / (self.delta.std(self.eps) + self.eps))

    def rewards(self, joint: Any, solo: Any) -> tuple[np.ndarray, np.ndarray]:
        """(Thinker r1, Solver r2) for a batch of paired outcomes, then fold the batch into the statistics."""
        joint_N = np.asarray(joint, dtype=np.float64)
        solo_N = np.asarray(solo, dtype=np.float64)
        delta_N = joint_N - solo_N
        if not self.warm:
            r1_N, r2_N = delta_N.copy(), joint_N.copy()
            self.applied_gate = None
        else:
            r1_N = np.tanh(self.alpha * (delta_N - self.delta.mean) / (self.delta.std(self.eps) + self.eps))
            z_joint = (joint_N - self.joint.mean) / (self.joint.std(self.eps) + self.eps)
            z_solo = (solo_N - self.solo.mean) / (self.solo.std(self.eps) + self.eps)
            g = self.applied_gate = self.gate()
            r2_N = g * z_joint + (1 - g) * z_solo
        first = self.n_updates == 0
        for stat, x_N in ((self.delta, delta_N), (self.joint, joint_N), (self.solo, solo_N)):
            stat.update(x_N, self.decay, first)
        self.n_updates += 1
        self.n_seen += len(delta_N)
        return r1_N, r2_N

    def state_dict(self) -> dict[str, Any]:
        return {"n_updates": self.n_updates, "n_seen": self.n_seen,
                **{f"{k}_{a}": getattr(getattr(self, k), a)
                   for k in ("delta", "joint", "solo") for a in ("mean", "var")}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n_updates, self.n_seen = int(state["n_updates"]), int(state["n_seen"])
        for k in ("delta", "joint", "solo"):
            setattr(self, k, _Running(float(state[f"{k}_mean"]), float(state[f"{k}_var"])))
