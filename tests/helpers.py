"""Small helpers the tests share (import as `from tests.helpers import ...`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from common.credit import Advantages, to_advantages
from common.episode import Group


def credit_advantages(method: Any, groups: list[Group], step: int = 0) -> tuple[Advantages, dict[str, float]]:
    """What the trainer does with a method's credit: (the advantages, the credit's metrics + credit_metrics)."""
    credit = method.credit(groups, step)
    adv = to_advantages(groups, credit, method.agent_of, method.estimator, method.excluded)
    return adv, {**credit.metrics, **method.credit_metrics(groups, adv)}


def last_checkpoint(run_dir: Path) -> Path | None:
    """The run's own `last.ckpt` (its folder is recorded in the manifest), or None while there is none yet."""
    import json

    try:
        folder = json.loads((Path(run_dir) / "manifest.json").read_text())["checkpoints"]
    except (OSError, ValueError, KeyError):
        return None
    path = Path(folder) / "last.ckpt"
    return path if path.exists() else None
