"""Advantage estimators over a group of G episodes of one task.

Each estimator maps the group's scalar rewards to one advantage per episode (shapes in names:
`rewards_G` -> `advantages_G`). `assign_outcome_credit` broadcasts an episode's advantage to every
trainable action turn of that episode, which is how GRPO and its variants credit multi-turn and
multi-role episodes. Methods that redistribute credit across agents and turns (SHARP, CCPO, IAPO)
set `Turn.advantage` themselves and may register their own estimator here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np

from common.episode import Group

Estimator = Callable[[np.ndarray], np.ndarray]
EPS = 1e-6


def grpo(rewards_G: np.ndarray) -> np.ndarray:
    """GRPO (Shao et al. 2024, eq. 3): (r_i - mean(r)) / (std(r) + eps).

    std is the unbiased sample std (ddof=1), as in TRL and verl. A group of one, or a group whose
    rewards are all equal, gets advantage 0.
    """
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    if rewards_G.size < 2:
        return np.zeros_like(rewards_G)
    return (rewards_G - rewards_G.mean()) / (rewards_G.std(ddof=1) + EPS)


def drgrpo(rewards_G: np.ndarray) -> np.ndarray:
    """Dr. GRPO (Liu et al. 2025): r_i - mean(r), no std division (removes the difficulty bias)."""
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    return rewards_G - rewards_G.mean()


def rloo(rewards_G: np.ndarray) -> np.ndarray:
    """RLOO (Ahmadian et al. 2024): r_i - mean of the other G-1 rewards = G/(G-1)(r_i - mean(r))."""
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    g = rewards_G.size
    if g < 2:
        return np.zeros_like(rewards_G)
    return (rewards_G * g - rewards_G.sum()) / (g - 1)


CREDIT: dict[str, Estimator] = {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo}


def get_estimator(name: str) -> Estimator:
    if name not in CREDIT:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {sorted(CREDIT)}")
    return CREDIT[name]


def normalize_by_key(values_N: np.ndarray, keys: Iterable[object], estimator: Estimator) -> np.ndarray:
    """Apply `estimator` separately within each set of entries sharing a key (e.g. per role)."""
    values_N = np.asarray(values_N, dtype=np.float64)
    keys = list(keys)
    out_N = np.zeros_like(values_N)
    for key in dict.fromkeys(keys):
        idx = np.array([i for i, k in enumerate(keys) if k == key])
        out_N[idx] = estimator(values_N[idx])
    return out_N


def assign_outcome_credit(groups: list[Group], estimator: Estimator) -> None:
    """Group-normalize the episode rewards and broadcast them to every trainable turn."""
    for group in groups:
        advantages_G = estimator(np.array(group.rewards, dtype=np.float64))
        for episode, adv in zip(group.episodes, advantages_G, strict=True):
            for turn in episode.turns:
                turn.advantage = float(adv)
