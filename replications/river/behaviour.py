"""What River's training episodes did beyond their (possibly defective) reward, as step metrics."""

from __future__ import annotations

import numpy as np

from common.episode import Group


def behaviour(groups: list[Group]) -> dict[str, float]:
    """The step's episodes beyond the (possibly defective) reward: true success, memo use, loops."""
    eps = [e for g in groups for e in g.episodes if e.info]
    if not eps:
        return {}

    def mean(key: str) -> float:
        return float(np.mean([float(e.info.get(key, 0.0)) for e in eps]))

    return {"train_solved": mean("solved"), "train_read_memo": mean("read_memo"),
            "train_looped": mean("looped"), "train_repeat_rate": mean("repeat_rate")}
