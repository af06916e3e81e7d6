"""SkillRise's chain credit as plain functions (no torch): the curate reward and the advantage.

A chain plays K related tasks in order, solve(0) -> curate(0) -> solve(1) -> ... -> solve(K-1);
the policy's curate turn p rewrites the skill document that solve(p+1) will read. N chains of the
same K tasks form a *chain group*.

- Solve reward: r_p, the task's own reward (success minus the invalid-action penalty).
- Curate reward (the official code's `skillrise_credit_assignment`; `decay` is its `traj_gamma`):

      R_p = sum_{j>p} decay^(j-p) * r_j,        p = 0 .. K-2                         (curate)

  the discounted success of every *later* task, the only place credit crosses tasks.
- Advantage: one score per trajectory (a solve or a curate episode), grouped by
  (chain group, position, role), minus the group's mean, no division by its std; curate
  advantages are multiplied by `curate_loss_weight` (1 in the paper).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence


def curate_rewards(solve_rewards: Sequence[float], decay: float = 0.6) -> list[float]:
    """The K - 1 curate rewards of one chain from its K solve rewards: R_p = sum_{j>p} decay^(j-p) r_j.

    >>> curate_rewards([1.0, 0.0, 1.0])  # R_0 = 0.6*0 + 0.36*1, R_1 = 0.6*1
    [0.36, 0.6]
    >>> curate_rewards([0.0, 1.0, 1.0, 1.0], decay=0.5)
    [0.875, 0.75, 0.5]
    """
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1]; got {decay}")
    r = [float(x) for x in solve_rewards]
    return [sum(decay ** (j - p) * r[j] for j in range(p + 1, len(r))) for p in range(len(r) - 1)]


def current_task_rewards(solve_rewards: Sequence[float]) -> list[float]:
    """The control's curate rewards: the curate step after task p earns r_p, the reward of the task it
    just watched (nothing it writes can change it)."""
    return [float(x) for x in solve_rewards[:-1]]


def grouped_advantages(scores: Sequence[float], keys: Sequence[Hashable], weights: Sequence[float] | None = None
                       ) -> list[float]:
    """A_i = w_i * (s_i - mean of the scores that share key_i): mean-centered within each key, no std
    division (the key is (chain group, position, role)); `weights` scale each advantage (the curate
    loss weight), 1 by default.

    >>> grouped_advantages([1, 0, 0.5, 0.5], ["a", "a", "b", "b"])
    [0.5, -0.5, 0.0, 0.0]
    """
    if len(scores) != len(keys) or (weights is not None and len(weights) != len(scores)):
        raise ValueError(f"scores, keys and weights must have one entry per trajectory; got {len(scores)}, {len(keys)}, "
                         f"{len(weights) if weights is not None else '-'}")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out = [0.0] * len(scores)
    for idx in members.values():
        mean = sum(float(scores[i]) for i in idx) / len(idx)
        for i in idx:
            out[i] = (1.0 if weights is None else float(weights[i])) * (float(scores[i]) - mean)
    return out
