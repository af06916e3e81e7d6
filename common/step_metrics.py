"""What a training step reports about its plays: the outcome metrics of the main plays (rewards,
successes, groups with a learning signal, invalid actions, faults, response lengths), before any
reward shaping. The step adds its compute counters, timings, the method's credit metrics and the
update's statistics (`common.trainer`); with several processes the ranks' metrics are combined by
`common.ranks.combine_rank_metrics`.
"""

from __future__ import annotations

import numpy as np

from common.episode import Group


def outcome_metrics(groups: list[Group]) -> dict[str, float]:
    """Reward, success and signal statistics of the main plays (before any reward shaping)."""
    eps = [e for g in groups for e in g.episodes]
    turns = [t for e in eps for t in e.turns if t.adapter is not None]
    non_faulted = [g for g in groups if len({e.reward for e in g.episodes if not e.faulted}) > 0]
    return {
        "truncated_rate": float(np.mean([e.truncated for e in eps])) if eps else 0.0,
        "reward_mean": float(np.mean([e.reward for e in eps])) if eps else 0.0,
        "success_rate": float(np.mean([e.success for e in eps])) if eps else 0.0,
        "signal_fraction": float(np.mean([len({e.reward for e in g.episodes if not e.faulted}) > 1
                                          for g in non_faulted]))
        if non_faulted else 0.0,
        "invalid_rate": float(np.mean([bool(e.events_of("invalid_action")) for e in eps])) if eps else 0.0,
        "fault_rate": float(np.mean([e.faulted for e in eps])) if eps else 0.0,
        "response_tokens_mean": float(np.mean([t.num_action_tokens for t in turns])) if turns else 0.0,
        "turns_mean": float(np.mean([len(e.turns) for e in eps])) if eps else 0.0,
    }
