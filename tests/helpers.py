"""Small helpers the tests share (import as `from tests.helpers import ...`)."""

from __future__ import annotations

from typing import Any

from common.credit import Advantages, to_advantages
from common.episode import Group


def credit_advantages(method: Any, groups: list[Group], step: int = 0) -> tuple[Advantages, dict[str, float]]:
    """What the trainer does with a method's credit: (the advantages, the credit's metrics + credit_metrics)."""
    credit = method.credit(groups, step)
    adv = to_advantages(groups, credit, method.agent_of, method.estimator, method.excluded)
    return adv, {**credit.metrics, **method.credit_metrics(groups, adv)}
