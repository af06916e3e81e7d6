"""What River's training episodes did beyond their (possibly defective) reward, as step metrics."""

from __future__ import annotations

import numpy as np

from common.episode import Group

# the episode's info key -> the step metric; each reported when some episode of the step has it (terminal:
# the first four; arith and service_desk with defects: solved and shortcut, service_desk also the loops)
KEYS = {"solved": "train_solved", "read_memo": "train_read_memo", "looped": "train_looped",
        "repeat_rate": "train_repeat_rate", "shortcut": "train_shortcut"}


def behaviour(groups: list[Group]) -> dict[str, float]:
    """The step's episodes beyond the (possibly defective) reward: true success, the shortcut (terminal's memo
    use, or the environment's own `shortcut`), loops."""
    eps = [e for g in groups for e in g.episodes if e.info]
    if not eps:
        return {}

    def mean(key: str) -> float:
        return float(np.mean([float(e.info.get(key, 0.0)) for e in eps]))

    return {metric: mean(key) for key, metric in KEYS.items() if any(key in e.info for e in eps)}
