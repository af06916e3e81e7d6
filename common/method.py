"""The hooks a method overrides. The defaults are GRPO.

A method is a class in `replications/<name>/method.py` that subclasses `Method` and overrides
only the hooks it needs (see DESIGN.md):

| hook                          | default                                    |
| ----------------------------- | ------------------------------------------ |
| `tasks(pool, step, rng)`      | `tasks_per_step` tasks uniformly at random |
| `play(rollout, tasks, step)`  | `group_size` episodes per task             |
| `credit(groups, step)`        | group-normalized outcome, broadcast        |
| `extra_loss(batch, step)`     | none                                       |
| `trainable_roles(step)`       | every role bound to a trainable adapter    |

Each method declares its own settings as a dataclass `Config` (fields documented where declared);
`method.*` keys in the Hydra config must match it exactly, so a typo fails before anything runs.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from common.credit import assign_outcome_credit, get_estimator
from common.episode import Group

if TYPE_CHECKING:
    import torch
    from datasets import Dataset

    from common.config import RunConfig
    from common.envs.base import Environment
    from common.rollout import Rollout


@dataclass
class MethodConfig:
    """Settings shared by every method."""

    name: str = "grpo"
    estimator: str = "grpo"  # advantage estimator from common.credit.CREDIT: grpo | drgrpo | rloo


class Method:
    """GRPO: sample tasks, play G episodes each, broadcast the group-normalized outcome."""

    Config: ClassVar[type[MethodConfig]] = MethodConfig

    def __init__(self, cfg: MethodConfig, run: RunConfig, env: Environment):
        self.cfg = cfg
        self.run = run
        self.env = env
        self.estimator = get_estimator(cfg.estimator)

    def validate(self) -> None:
        """Raise ValueError for settings that make no sense together (called before any run)."""

    def tasks(self, pool: Dataset, step: int, rng: random.Random) -> list[dict[str, Any]]:
        """This step's tasks (rows of the train split)."""
        n = self.run.trainer.tasks_per_step
        idx = [rng.randrange(len(pool)) for _ in range(n)]
        return [pool[i] for i in idx]

    def group_size(self, task: dict[str, Any]) -> int:
        return self.run.trainer.group_size

    def play(self, rollout: Rollout, tasks: list[dict[str, Any]], step: int) -> list[Group]:
        """Play the episodes of this step; extra (counterfactual) plays go in `Group.extra`."""
        return rollout.play_groups(tasks, [self.group_size(t) for t in tasks], step=step)

    def credit(self, groups: list[Group], step: int) -> dict[str, float]:
        """Set `Turn.advantage` on every trainable turn; return metrics to log."""
        assign_outcome_credit(groups, self.estimator)
        return {}

    def extra_loss(self, batch: Any, step: int) -> torch.Tensor | None:
        """An extra term added to the policy loss (None: nothing)."""
        return None

    def trainable_roles(self, step: int) -> set[str] | None:
        """Roles whose adapters train this step (None: every trainable role)."""
        return None
