"""Held-out evaluation: mean@k and pass@k, per tier and per role.

mean@k: the success rate averaged over the k samples of each task, then over tasks.
pass@k: the share of tasks with at least one success among k samples (the unbiased estimator of
Chen et al. 2021 with n = k). Per role: the share of that role's turns that were invalid actions,
and its tokens per turn. Environment-specific numbers (`Episode.info`, numeric or boolean) are
averaged under `metrics` over the episodes that report them (an environment that wants a rate over
all episodes reports the value in every episode); `truncated_rate` and `fault_rate` are over all.
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

import numpy as np

from common.episode import Episode, Group, Task

if TYPE_CHECKING:
    from common.method import Method
    from common.rollout import Rollout
    from envs.api.base import Environment


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
        passes = [pass_at_k(len(episodes_by_task[t]), sum(e.success for e in episodes_by_task[t]), k)
                  for t in task_ids]
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
        per_role[role] = {"turns": n, "tokens_per_turn": role_tokens[role] / n,
                          "invalid_rate": role_invalid[role] / n}
    metrics: dict[str, list[float]] = defaultdict(list)
    for e in all_eps:
        for key, value in e.info.items():
            if isinstance(value, bool | int | float):
                metrics[key].append(float(value))
    return {
        "step": step,
        "k": k,
        **scores(list(episodes_by_task)),
        # over every episode: the context ran out / the environment failed (a failure for mean@k)
        "truncated_rate": float(np.mean([e.truncated for e in all_eps])) if all_eps else 0.0,
        "fault_rate": float(np.mean([e.faulted for e in all_eps])) if all_eps else 0.0,
        "per_tier": {str(tier): scores(ids) for tier, ids in sorted(tiers.items())},
        "per_role": per_role,
        "metrics": {key: float(np.mean(v)) for key, v in sorted(metrics.items())},
    }


def eval_split(env: Environment, split: str) -> Any:
    """The tasks an evaluation plays: `heldout` (the test split: final results) or `dev` (design,
    tuning and pilots). The manifest records which one (`eval_split`)."""
    tasks = env.task_set()
    if split not in tasks:
        raise ValueError(f"{env.name} has no {split!r} split (it has {sorted(tasks)}); "
                         "eval.split=dev needs env.dev_size > 0")
    return tasks[split]


def evaluate(method: Method, rollout: Rollout, tasks: list[Task], step: int,
             variant: str = "main") -> dict[str, Any]:
    """Held-out evaluation through the method's own play (`mode="eval"`): k = `eval.k` episodes of
    every task, the same environment seeds at every evaluation. What the method plays besides its
    main episodes (e.g. CCPO's solo plays) is summarized under `extra/<tag>`.

    `variant` plays an environment variant instead (e.g. a counterfactual: a role's message emptied).
    """
    return summarize_groups(method.play(rollout, tasks, step, mode="eval", variant=variant), step)


def summarize_groups(groups: list[Group], step: int) -> dict[str, Any]:
    """The evaluation record of played groups (in a multi-process run, every rank's, gathered)."""
    k = max((len(g.episodes) for g in groups), default=0)
    result = summarize({g.task_id: g.episodes for g in groups}, k, step)
    tags = sorted({tag for g in groups for tag in g.extra})
    if tags:
        result["extra"] = {tag: summarize({g.task_id: g.extra[tag] for g in groups if g.extra.get(tag)},
                                          k, step)
                           for tag in tags}
    return result
