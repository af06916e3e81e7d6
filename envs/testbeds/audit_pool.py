"""Audit-labelled train pools beyond `terminal`'s (`env_pool_with_audit`, envs/api/features.py): what
`arith` and `service_desk` share when a `share_*` setting puts defective tasks into their train split.

River (replications/river/) filters a train pool by its tasks' audit labels (`defect_of`) and reports how
much of its pool pays a shortcut (`shortcut_defects`). `terminal` draws its defects in its own split plan;
the environments here add them to a pool that stays the default one:

- the train split's rows get their labels by exact quota (`terminal.tasks.quota`, the rest clean), shuffled
  by a random stream of their own (seeded by the environment's name and `data_seed`), so the split's task
  stream draws exactly what it draws by default; every other split (demo, dev, held-out) is the default's,
  unlabelled (clean): defects are a property of the train pool, as in `terminal`;
- a labelled row's task is drawn as by default, then its defect is applied with a random stream seeded by
  `data_seed` and the drawn task (`defect_rng`); the defect adds fields of its own (`DEFECT_FIELDS`) and
  changes none of the drawn ones, and a task's identity (`task_key`) is its drawn content, so no split
  gains, loses or reorders a task;
- with every share 0 (the default) nothing changes: no label, no field, the same streams, observations and
  rewards (pinned by tests/envs/testbeds/test_audit_pools.py).

A task without a label is clean. The episodes of an environment with a share > 0 also report `solved`
(the customer's or the question's true answer was met, whatever the task's verifier says) and `shortcut`
(the behaviour that earns the shortcut defects' reward), as `terminal` reports `solved` and `read_memo`.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from envs.api.base import EnvConfig
from envs.testbeds.terminal.env import repeat_flags
from envs.testbeds.terminal.tasks import quota


def check_shares(cfg: EnvConfig, defects: Sequence[str]) -> dict[str, float]:
    """The config's `share_<defect>` values; ValueError (one line) unless each is >= 0 with a sum <= 1."""
    shares = {d: float(getattr(cfg, f"share_{d}")) for d in defects}
    if any(not 0 <= v <= 1 for v in shares.values()) or sum(shares.values()) > 1:
        raise ValueError(f"env.share_* are shares of the train split, each >= 0, summing to <= 1; {shares}")
    return shares


def labelled(task: dict[str, Any], defect: str, defects: Sequence[str], env: str) -> dict[str, Any]:
    """`task` with its label (`defect`: one of `defects`, or `clean`); ValueError (one line) for another."""
    if defect != "clean" and defect not in defects:
        raise ValueError(f"unknown {env} defect {defect!r}; choose from {tuple(defects)}")
    return {**task, "defect": defect}


def loop_info(turns: list[tuple[str, str]]) -> dict[str, Any]:
    """River's loop figures of an episode's (action, observation) pairs, as `terminal` reports them."""
    flags = repeat_flags(turns)
    return {"repeat_rate": sum(flags) / len(flags) if flags else 0.0, "looped": any(flags)}


class AuditedPool:
    """Mixin (before `Environment` in the bases) of an environment whose train pool may hold defective tasks:
    the labels' split plan, the tasks' identity without the defects' fields, the labels River reads.

    A subclass sets `DEFECTS` (each a `share_<defect>` field of its config), `SHORTCUT_DEFECTS` and
    `DEFECT_FIELDS` (every field a defect adds to a task, `defect` first)."""

    DEFECTS: ClassVar[tuple[str, ...]] = ()
    SHORTCUT_DEFECTS: ClassVar[tuple[str, ...]] = ()
    DEFECT_FIELDS: ClassVar[tuple[str, ...]] = ("defect",)
    name: ClassVar[str]
    cfg: EnvConfig

    def defect_shares(self) -> dict[str, float]:
        return check_shares(self.cfg, self.DEFECTS)

    @classmethod
    def offers_for(cls, settings: Mapping[str, Any]) -> frozenset[str]:
        """`env_pool_with_audit` only where a share puts defects into the pool: a clean pool's audit is
        empty, and River's filter on it would only draw at random (`make compare` asks this)."""
        offers: frozenset[str] = getattr(cls, "offers", frozenset())
        if any(float(settings.get(f"share_{d}") or 0.0) > 0 for d in cls.DEFECTS):
            return offers
        return offers - {"env_pool_with_audit"}

    @property
    def audited(self) -> bool:
        """Whether the train pool holds defects (a share > 0): its tasks are labelled, episodes say more."""
        return any(self.defect_shares().values())

    def defect_of(self, task: dict[str, Any]) -> str:
        """The task's audit label: "clean" or its defect (a task without a label is clean)."""
        return str(task.get("defect", "clean"))

    def shortcut_defects(self) -> frozenset[str]:
        return frozenset(self.SHORTCUT_DEFECTS)

    def split_plan(self, split: str, size: int, rng: random.Random) -> list[tuple[int, dict[str, Any]]]:
        """The default plan; with a share > 0, each train row also names its label (`defect=`): exact quotas,
        shuffled by a stream of their own (the split's `rng` draws nothing more)."""
        plan: list[tuple[int, dict[str, Any]]] = super().split_plan(split, size, rng)  # type: ignore[misc]
        shares = self.defect_shares()
        if split != "train" or not any(shares.values()):
            return plan
        labels = quota(shares, size)
        random.Random(f"{self.name}/defects/{self.cfg.data_seed}").shuffle(labels)
        return [(tier, {**extra, "defect": d}) for (tier, extra), d in zip(plan, labels, strict=True)]

    def task_key(self, task: dict[str, Any]) -> str:
        """A task is its drawn content: the defects' fields left out (the default tasks have none)."""
        return json.dumps({k: v for k, v in task.items() if k not in self.DEFECT_FIELDS}, sort_keys=True)

    def defect_rng(self, task: dict[str, Any]) -> random.Random:
        """The random stream a drawn task's defect is made with: seeded by `data_seed` and the task."""
        return random.Random(f"{self.name}/defect/{self.cfg.data_seed}/{self.task_key(task)}")
