"""Held-out evaluation: mean@k and pass@k, per tier and per role.

mean@k: the success rate averaged over the k samples of each task, then over tasks.
pass@k: the share of tasks with at least one success among k samples (the unbiased estimator of
Chen et al. 2021 with n = k). Per role: the share of that role's turns that were invalid actions,
and its tokens per turn. Environment-specific numbers (`Episode.info`, numeric or boolean) are
averaged under `metrics` over the episodes that report them (an environment that wants a rate over
all episodes reports the value in every episode).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import numpy as np

from common.engines.base import SamplingParams
from common.episode import Episode
from common.rollout import PlaySpec, Rollout


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples with c successes (Chen et al. 2021, eq. 1)."""
    if n - c < k:
        return 1.0
    return 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def summarize(episodes_by_task: dict[str, list[Episode]], k: int, step: int) -> dict[str, Any]:
    tiers: dict[int, list[str]] = defaultdict(list)
    for task_id, eps in episodes_by_task.items():
        tiers[eps[0].tier].append(task_id)

    def scores(task_ids: list[str]) -> dict[str, float]:
        means = [np.mean([e.success for e in episodes_by_task[t]]) for t in task_ids]
        passes = [pass_at_k(len(episodes_by_task[t]), sum(e.success for e in episodes_by_task[t]), k) for t in task_ids]
        return {"mean@k": float(np.mean(means)), "pass@k": float(np.mean(passes)), "n_tasks": len(task_ids)}

    all_eps = [e for eps in episodes_by_task.values() for e in eps]
    per_role: dict[str, dict[str, float]] = {}
    role_turns: dict[str, int] = defaultdict(int)
    role_tokens: dict[str, int] = defaultdict(int)
    role_invalid: dict[str, int] = defaultdict(int)
    for e in all_eps:
        for i, t in enumerate(e.turns):
            role_turns[t.role] += 1
            role_tokens[t.role] += t.num_action_tokens
            role_invalid[t.role] += any(ev.kind == "invalid_action" and ev.turn == i for ev in e.events)
    for role, n in role_turns.items():
        per_role[role] = {"turns": n, "tokens_per_turn": role_tokens[role] / n, "invalid_rate": role_invalid[role] / n}
    metrics: dict[str, list[float]] = defaultdict(list)
    for e in all_eps:
        for key, value in e.info.items():
            if isinstance(value, bool | int | float):
                metrics[key].append(float(value))
    return {
        "step": step,
        "k": k,
        **scores(list(episodes_by_task)),
        "per_tier": {str(tier): scores(ids) for tier, ids in sorted(tiers.items())},
        "per_role": per_role,
        "metrics": {key: float(np.mean(v)) for key, v in sorted(metrics.items())},
    }


def evaluate(rollout: Rollout, tasks: list[dict[str, Any]], k: int, params: SamplingParams, step: int,
             variant: str = "main") -> dict[str, Any]:
    """Play k episodes of every task (the same environment seeds at every evaluation).

    `variant` plays an environment variant instead (e.g. a counterfactual: a role's message emptied).
    """
    specs = [PlaySpec(task, variant=variant, tag="eval", trainable=False) for task in tasks for _ in range(k)]
    episodes = rollout.play(specs, step=-1, salt=f"eval/{variant}", params=params)
    by_task: dict[str, list[Episode]] = defaultdict(list)
    for e in episodes:
        by_task[e.task_id].append(e)
    return summarize(by_task, k, step)
