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
    With binary rewards this group baseline makes r_T affine in R^J within a group: after
    mean-centering it is the shared reward's advantage times 1 or 1 + λ/2 (an identity; see
    `v2_rewards`). `solo_baseline: sample` uses b_k = R^S_k, the paired solo play, instead.

Counterfactual pairing (`crn`, #18): when on, solo play k of a task uses the environment seed of
joint play k (common random numbers: the same hidden draws), so Δ_k compares the same episode with
and without the Thinker; when off, solo plays draw their own episodes (unpaired).

- `credit: oracle` (positive control, #38; not CCPO): Thinker r_T = R^J − E[R^S | the hidden draw], read from
    the env's `info['solo_value']` (thinker_solver's dyad setting); Solver r_S = R^J; mean-centering, no solo
    plays: what a perfect per-draw counterfactual baseline would give.
- `credit: vote` (the paper's majority-vote setting, env `voting`): voter i is credited with
    Δ_i = 1[the majority is right] − 1[the majority without voter i is right], recomputed from the
    same votes (`vote_counterfactuals`: paired by construction, no extra plays); GRPO per voter.

The formulas live in `counterfactual.py` (`v2_rewards`, `V1Credit`, `vote_counterfactuals`),
importable from here too.
In both versions only one role trains at a time, switching every `alternate_every` steps (10 in
the paper). The team reward here is the environment's episode reward (in `thinker_solver`:
success − the Thinker's message cost); v2 maps it affinely to [−1, +1] (2r − 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from common.credit import Credit
from common.episode import Group, Task, info_means
from common.method import Method, MethodConfig, Mode, RunView
from common.rollout import Rollout
from replications.ccpo.counterfactual import (  # noqa: F401  (public API of this module too)
    V1Credit,
    oracle_rewards,
    v2_rewards,
    vote_counterfactuals,
)


@dataclass
class CCPOConfig(MethodConfig):
    name: str = "ccpo"
    # shared (GRPO on the team reward, the baseline) | v1 | v2 (CCPO) | oracle (positive control) | vote
    credit: Literal["shared", "v1", "v2", "oracle", "vote"] = "v1"
    # group normalization: auto = grpo for shared and v1, drgrpo (mean-centering) for v2 and oracle
    estimator: str = "auto"
    thinker_role: str = "thinker"  # the role credited with the counterfactual difference
    solver_role: str = "solver"  # the role that can also play alone (the `solo` variant)
    # train one role at a time, switching every N steps (paper: 10); 0 = both always
    alternate_every: int = 10
    first_role: str = "thinker"  # the role trained first when alternating (official: start_agent)
    ema_decay: float = 0.99  # v1: EMA decay of the running statistics
    min_samples: int = 10  # v1: no normalization before this many samples have been seen
    alpha: float = 1.0  # v1: tanh sensitivity of the Thinker's reward
    eta: float = 1.0  # v1: sharpness of the Solver's gate
    eps: float = 1e-6  # v1: added to every std
    bonus: float = 0.2  # v2: λ, weight of the help/hurt event bonus
    # v2: b = the group's mean solo reward, or each play's paired solo reward
    solo_baseline: Literal["group", "sample"] = "group"
    # solo play k reuses joint play k's environment seed (paired counterfactuals, #18); false: its own
    crn: bool = False


class CCPO(Method):
    Config = CCPOConfig
    needs = frozenset({"two_role_dialogue"})  # a Thinker, a Solver, and the Solver alone (solo)
    compare_arm = "ccpo-v1"  # v1: the EMA-normalized counterfactual credit, paired solo plays
    paper_data_hint = ("download MATH (hendrycks/competition_math) to a local folder and pass "
                       "method.paper_data=...")
    cfg: CCPOConfig

    def __init__(self, cfg: CCPOConfig, run: RunView):
        if cfg.estimator == "auto":
            cfg.estimator = "drgrpo" if cfg.credit in ("v2", "oracle") else "grpo"
        super().__init__(cfg, run)
        self.v1 = V1Credit(cfg.ema_decay, cfg.min_samples, cfg.alpha, cfg.eta, cfg.eps)

    def validate(self) -> None:
        super().validate()
        c, roles = self.cfg, set(self.env.roles)
        if c.credit == "vote":
            missing = [f"without{i}" for i in range(len(self.env.roles))
                       if f"without{i}" not in self.env.variants()]
            if missing:
                raise ValueError("method.credit=vote credits voters of a majority vote (env voting); "
                                 f"{self.env.name} has no variants {missing}")
            return
        for key in ("thinker_role", "solver_role", "first_role"):
            if getattr(c, key) not in roles:
                raise ValueError(f"method.{key}={getattr(c, key)!r} is not a role of {self.env.name}; "
                                 f"roles: {sorted(roles)}")
        if c.thinker_role == c.solver_role:
            raise ValueError("method.thinker_role and method.solver_role must differ")
        if "solo" not in self.env.variants():
            raise ValueError(f"CCPO plays the Solver alone (the 'solo' variant); {self.env.name} has none")
        if c.alternate_every < 0:
            raise ValueError(f"method.alternate_every must be >= 0; got {c.alternate_every}")

    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        """G joint plays per task and, paired by index, G solo plays of the Solver (scored, never
        trained; compute tag `solo`). Evaluation plays them in every arm: the Solver's own skill."""
        groups = super().play(rollout, tasks, step, mode, variant)
        if (variant == "main" and "solo" in self.env.variants()
                and (mode == "eval" or self.cfg.credit in ("v1", "v2"))):
            sizes = [len(g.episodes) for g in groups]
            solo = rollout.play_groups(tasks, sizes, step, mode=mode, variant="solo", tag="solo",
                                       trainable=False, seed_tag="main" if self.cfg.crn else None)
            for g, s in zip(groups, solo, strict=True):
                g.extra["solo"] = s.episodes
        return groups

    def trainable_roles(self, step: int) -> set[str] | None:
        n, c = self.cfg.alternate_every, self.cfg
        if n == 0 or c.credit == "vote":  # the voters train together
            return None
        order = [c.first_role, c.solver_role if c.first_role == c.thinker_role else c.thinker_role]
        return {order[(step // n) % 2]}

    def credit(self, groups: list[Group], step: int) -> Credit:
        """Thinker: the counterfactual reward (v1: tanh of the normalized Δ; v2: R^J + λ·event; oracle:
        R^J − the true expected solo outcome); Solver: v1's gated mix of z_J and z_S, v2's and the oracle's
        R^J. Both normalized per role by the core."""
        c, roles = self.cfg, self.trainable_roles(step)
        metrics = {**info_means([e for g in groups for e in g.episodes], prefix="info/"),
                   "trains_thinker": float(roles is None or c.thinker_role in roles)}
        if c.credit == "shared":
            return Credit.outcome(groups, metrics)
        if c.credit == "vote":
            voters = self.env.roles
            deltas = [[vote_counterfactuals([bool(e.info.get(f"{r}_correct", False)) for r in voters])
                       for e in g.episodes]
                      for g in groups]
            flat_V = np.concatenate([d for g in deltas for d in g]) if groups else np.zeros(0)
            metrics.update(vote_pivotal_rate=float(flat_V.mean()) if flat_V.size else 0.0)
            return Credit("reward",
                          [[dict(zip(voters, map(float, d), strict=True)) for d in g] for g in deltas],
                          metrics=metrics)
        joint_N = np.array([e.reward for g in groups for e in g.episodes])
        bounds = np.cumsum([0] + [len(g.episodes) for g in groups])
        spans = list(zip(bounds[:-1], bounds[1:], strict=True))  # each group's slice of the flat arrays
        if c.credit == "oracle":  # NaN where the env gives no solo_value: oracle_rewards refuses it
            values_N = [e.info.get("solo_value", np.nan) for g in groups for e in g.episodes]
            thinker_N, solver_N = oracle_rewards(joint_N, values_N)
            return Credit("reward", self._per_group(thinker_N, solver_N, spans), metrics=metrics)
        solo_N = np.array([e.reward for g in groups for e in g.extra["solo"]])
        if c.credit == "v1":
            thinker_N, solver_N = self.v1.rewards(joint_N, solo_N)
            metrics.update(v1_mu_delta=self.v1.delta.mean, v1_sigma_delta=self.v1.delta.std(self.v1.eps),
                           # the gate applied
                           **({} if self.v1.applied_gate is None else {"v1_gate": self.v1.applied_gate}))
        else:
            pairs = [v2_rewards(2 * joint_N[a:b] - 1, 2 * solo_N[a:b] - 1, c.bonus, c.solo_baseline)
                     for a, b in spans]
            thinker_N = np.concatenate([p[0] for p in pairs]) if pairs else joint_N
            solver_N = np.concatenate([p[1] for p in pairs]) if pairs else joint_N
        values = self._per_group(thinker_N, solver_N, spans)
        joint_ok = np.array([e.success for g in groups for e in g.episodes])
        solo_ok = np.array([e.success for g in groups for e in g.extra["solo"]])
        metrics.update(thinker_reward_mean=float(thinker_N.mean()), solver_reward_mean=float(solver_N.mean()),
                       solo_success_rate=float(solo_ok.mean()), help_rate=float((joint_ok & ~solo_ok).mean()),
                       hurt_rate=float((~joint_ok & solo_ok).mean()))
        return Credit("reward", values, metrics=metrics)

    def _per_group(self, thinker_N: np.ndarray, solver_N: np.ndarray, spans: list[Any]) -> list[Any]:
        flat = [{self.cfg.thinker_role: float(t), self.cfg.solver_role: float(s)}
                for t, s in zip(thinker_N, solver_N, strict=True)]
        return [flat[a:b] for a, b in spans]

    def state_dict(self) -> dict[str, Any]:
        return {"v1": self.v1.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.v1.load_state_dict(state["v1"])

