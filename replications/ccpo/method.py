"""CCPO: Counterfactual Credit Policy Optimization (arXiv 2603.21563; official code bhai114/ccpo).

A Thinker writes guidance, a Solver answers; a shared terminal reward hides who contributed and
lets the Thinker free-ride. CCPO credits the Thinker with the counterfactual difference between
the joint outcome R^J and the Solver's outcome alone R^S (a *solo* play of the same task, scored
but never trained on; its tokens are counted as compute under the tag `solo`).

Per task: G joint episodes (Thinker -> Solver) and G solo episodes (Solver only), paired by index k.

- `credit: shared` (the baseline): GRPO on the team reward, broadcast to both roles.
- `credit: v1` (CCPO v1, official code `historical_normalizer.py`):
    Δ_k = R^J_k − R^S_k; running EMA (decay 0.99) of the mean and variance of Δ, R^J, R^S,
    initialized from the first batch; the statistics *from before* the current batch are applied,
    and nothing is normalized until `min_samples` samples have been seen (then r1 = Δ, r2 = R^J).
    Thinker  r1 = tanh(α (Δ − μ_Δ) / (σ_Δ + ε))
    Solver   r2 = g z_J + (1 − g) z_S,  z_X = (R^X − μ_X) / (σ_X + ε),  g = sigmoid(η μ_Δ / (σ_Δ + ε))
    then GRPO group normalization of r1 and r2 on top (`estimator`, default grpo).
- `credit: v2` (CCPO v2, official code `two_model_trainer.py`): rewards in {−1, +1}; solo baseline
    b = mean_k R^S_k over the group; bonus_k = 1[R^J_k > 0 ∧ b < 0] − 1[R^J_k < 0 ∧ b > 0];
    Thinker r_T = R^J + λ bonus (λ = 0.2), Solver r_S = R^J; mean-centering only (no std division).

In both versions only one role trains at a time, switching every `alternate_every` steps (10 in
the paper). The team reward here is the environment's episode reward (in `thinker_solver`:
success − the Thinker's message cost); v2 maps it affinely to [−1, +1] (2r − 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from common.credit import assign_outcome_credit, get_estimator
from common.episode import Episode, Group
from common.method import Method, MethodConfig

CREDITS = ("shared", "v1", "v2")


@dataclass
class CCPOConfig(MethodConfig):
    name: str = "ccpo"
    credit: str = "v1"  # shared (GRPO on the team reward, the baseline) | v1 | v2 (CCPO, the two versions)
    estimator: str = "auto"  # group normalization: auto = grpo for shared and v1, drgrpo (mean-centering) for v2
    thinker_role: str = "thinker"  # the role credited with the counterfactual difference
    solver_role: str = "solver"  # the role that can also play alone (the `solo` variant)
    alternate_every: int = 10  # train one role at a time, switching every N steps (paper: 10); 0 = both always
    first_role: str = "thinker"  # the role trained first when alternating (official: start_agent)
    ema_decay: float = 0.99  # v1: EMA decay of the running statistics
    min_samples: int = 10  # v1: no normalization before this many samples have been seen
    alpha: float = 1.0  # v1: tanh sensitivity of the Thinker's reward
    eta: float = 1.0  # v1: sharpness of the Solver's gate
    eps: float = 1e-6  # v1: added to every std
    bonus: float = 0.2  # v2: λ, weight of the help/hurt event bonus
    paper_data: str | None = None  # scale=paper: local copy of the paper's training data (MATH); required there


# ---- the pure formulas ---------------------------------------------------------------------------
def v2_rewards(joint: Any, solo: Any, bonus: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """CCPO v2 rewards of one group (before mean-centering).

    `joint[k]`, `solo[k]` in [−1, +1] (±1 for a verifier). Solo baseline b = mean(solo);
    event_k = 1[joint_k > 0 and b < 0] (helped) − 1[joint_k < 0 and b > 0] (hurt).
    Returns (Thinker r_T = joint + bonus·event, Solver r_S = joint).
    """
    joint_G = np.asarray(joint, dtype=np.float64)
    b = float(np.mean(np.asarray(solo, dtype=np.float64)))
    event_G = ((joint_G > 0) & (b < 0)).astype(np.float64) - ((joint_G < 0) & (b > 0)).astype(np.float64)
    return joint_G + bonus * event_G, joint_G.copy()


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
        self.mean, self.var = (m, v) if first else (decay * self.mean + (1 - decay) * m, decay * self.var + (1 - decay) * v)


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
    delta: _Running = field(default_factory=_Running)
    joint: _Running = field(default_factory=_Running)
    solo: _Running = field(default_factory=_Running)

    @property
    def warm(self) -> bool:
        """Whether enough history has been seen to normalize."""
        return self.n_updates >= 1 and self.n_seen >= self.min_samples

    def gate(self) -> float:
        """g = sigmoid(η μ_Δ / (σ_Δ + ε)): the Solver leans on its joint reward when the Thinker helps on average."""
        return _sigmoid(self.eta * self.delta.mean / (self.delta.std(self.eps) + self.eps))

    def rewards(self, joint: Any, solo: Any) -> tuple[np.ndarray, np.ndarray]:
        """(Thinker r1, Solver r2) for a batch of paired outcomes, then fold the batch into the statistics."""
        joint_N = np.asarray(joint, dtype=np.float64)
        solo_N = np.asarray(solo, dtype=np.float64)
        delta_N = joint_N - solo_N
        if not self.warm:
            r1_N, r2_N = delta_N.copy(), joint_N.copy()
        else:
            r1_N = np.tanh(self.alpha * (delta_N - self.delta.mean) / (self.delta.std(self.eps) + self.eps))
            z_joint = (joint_N - self.joint.mean) / (self.joint.std(self.eps) + self.eps)
            z_solo = (solo_N - self.solo.mean) / (self.solo.std(self.eps) + self.eps)
            g = self.gate()
            r2_N = g * z_joint + (1 - g) * z_solo
        first = self.n_updates == 0
        for stat, x_N in ((self.delta, delta_N), (self.joint, joint_N), (self.solo, solo_N)):
            stat.update(x_N, self.decay, first)
        self.n_updates += 1
        self.n_seen += len(delta_N)
        return r1_N, r2_N

    def state_dict(self) -> dict[str, Any]:
        return {"n_updates": self.n_updates, "n_seen": self.n_seen,
                **{f"{k}_{a}": getattr(getattr(self, k), a) for k in ("delta", "joint", "solo") for a in ("mean", "var")}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n_updates, self.n_seen = int(state["n_updates"]), int(state["n_seen"])
        for k in ("delta", "joint", "solo"):
            setattr(self, k, _Running(float(state[f"{k}_mean"]), float(state[f"{k}_var"])))


# ---- the method ----------------------------------------------------------------------------------
class CCPO(Method):
    Config = CCPOConfig

    def __init__(self, cfg: CCPOConfig, run: Any, env: Any):
        self.cfg: CCPOConfig = cfg
        self.run, self.env = run, env
        est = cfg.estimator if cfg.estimator != "auto" else ("drgrpo" if cfg.credit == "v2" else "grpo")
        self.estimator = get_estimator(est)
        self.v1 = V1Credit(cfg.ema_decay, cfg.min_samples, cfg.alpha, cfg.eta, cfg.eps)

    def validate(self) -> None:
        c = self.cfg
        if c.credit not in CREDITS:
            raise ValueError(f"method.credit must be one of {CREDITS}; got {c.credit!r}")
        roles = set(self.env.roles)
        for key in ("thinker_role", "solver_role", "first_role"):
            if getattr(c, key) not in roles:
                raise ValueError(f"method.{key}={getattr(c, key)!r} is not a role of {self.env.name}; roles: {sorted(roles)}")
        if c.thinker_role == c.solver_role:
            raise ValueError("method.thinker_role and method.solver_role must differ")
        if c.credit != "shared" and "solo" not in self.env.variants():
            raise ValueError(f"method.credit={c.credit} needs solo plays; {self.env.name} has no 'solo' variant")
        if c.alternate_every < 0:
            raise ValueError(f"method.alternate_every must be >= 0; got {c.alternate_every}")
        if self.run.scale == "paper" and not (c.paper_data and Path(c.paper_data).exists()):
            raise ValueError(f"scale=paper needs the paper's data locally; method.paper_data={c.paper_data!r} does not exist "
                             "(download MATH (hendrycks/competition_math) to a local folder and pass method.paper_data=...)")

    def play(self, rollout: Any, tasks: list[dict[str, Any]], step: int) -> list[Group]:
        sizes = [self.group_size(t) for t in tasks]
        groups = rollout.play_groups(tasks, sizes, step=step)
        if self.cfg.credit != "shared":
            solo = rollout.play_groups(tasks, sizes, step=step, variant="solo", tag="solo", trainable=False)
            for g, s in zip(groups, solo, strict=True):
                g.extra["solo"] = s.episodes
        return groups

    def trainable_roles(self, step: int) -> set[str] | None:
        n = self.cfg.alternate_every
        if n == 0:
            return None
        order = [self.cfg.first_role, self.cfg.solver_role if self.cfg.first_role == self.cfg.thinker_role else self.cfg.thinker_role]
        return {order[(step // n) % 2]}

    def credit(self, groups: list[Group], step: int) -> dict[str, float]:
        metrics = episode_info_means([e for g in groups for e in g.episodes])
        roles = self.trainable_roles(step)
        metrics["trains_thinker"] = float(roles is None or self.cfg.thinker_role in roles)
        if self.cfg.credit == "shared":
            assign_outcome_credit(groups, self.estimator)
            return metrics
        joint_N = np.array([e.reward for g in groups for e in g.episodes])
        solo_N = np.array([e.reward for g in groups for e in g.extra["solo"]])
        if self.cfg.credit == "v1":
            thinker_N, solver_N = self.v1.rewards(joint_N, solo_N)
            metrics.update(v1_mu_delta=self.v1.delta.mean, v1_sigma_delta=self.v1.delta.std(self.v1.eps), v1_gate=self.v1.gate())
        else:
            thinker_N, solver_N = np.zeros_like(joint_N), np.zeros_like(joint_N)
            k = 0
            for g in groups:
                n = len(g.episodes)
                rt, rs = v2_rewards(2 * joint_N[k : k + n] - 1, 2 * solo_N[k : k + n] - 1, self.cfg.bonus)
                thinker_N[k : k + n], solver_N[k : k + n] = rt, rs
                k += n
        k = 0
        for g in groups:
            n = len(g.episodes)
            adv_t, adv_s = self.estimator(thinker_N[k : k + n]), self.estimator(solver_N[k : k + n])
            for e, at, as_ in zip(g.episodes, adv_t, adv_s, strict=True):
                for turn in e.turns:
                    turn.advantage = float(at) if turn.role == self.cfg.thinker_role else float(as_)
            k += n
        joint_ok = np.array([e.success for g in groups for e in g.episodes])
        solo_ok = np.array([e.success for g in groups for e in g.extra["solo"]])
        metrics.update(thinker_reward_mean=float(thinker_N.mean()), solver_reward_mean=float(solver_N.mean()),
                       solo_success_rate=float(solo_ok.mean()), help_rate=float((joint_ok & ~solo_ok).mean()),
                       hurt_rate=float((~joint_ok & solo_ok).mean()))
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"v1": self.v1.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.v1.load_state_dict(state["v1"])


def episode_info_means(episodes: list[Episode]) -> dict[str, float]:
    """Means of the environment's numeric `info` values over the main plays, as `info/<key>`."""
    sums: dict[str, list[float]] = {}
    for e in episodes:
        for key, value in e.info.items():
            if isinstance(value, bool | int | float):
                sums.setdefault(key, []).append(float(value))
    return {f"info/{k}": float(np.mean(v)) for k, v in sorted(sums.items())}
