"""Splits made of whole task families (SkillRise's environments: chain_tasks' and TextWorld's families):
each family a hidden procedure no other family anywhere has, its members one task per tier, and the demo
split's families expanded into scripted chains (the warm start's data)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from typing import Any

from datasets import Dataset, DatasetDict

SPLITS = ("train", "heldout", "dev", "demo")


def family_splits(cfg: Any, per_family: int, new_family: Callable[[], Any],
                  key: Callable[[Any], Hashable], members: Callable[[str, Any], list[dict[str, Any]]],
                  demo_chain: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]) -> DatasetDict:
    """`size // per_family` families for each split whose `cfg.<split>_size` is > 0 (train, held-out, dev,
    demo, in that order): a family is drawn (`new_family`) until its `key` is new, its tasks are
    `members(family id, family)`, and in the demo split they become `demo_chain(tasks)`. Rows: id
    `<split>-<row:05d>`, tier the task's `plan`, task its JSON (sorted keys). The callables carry the
    environment's random streams: the draws happen in this order, so a split's rows do not depend on the
    splits after it."""
    used: set[Hashable] = set()
    splits: dict[str, Dataset] = {}
    for split in SPLITS:
        size = getattr(cfg, f"{split}_size")
        if not size:
            continue
        rows: dict[str, list[Any]] = {"id": [], "tier": [], "task": []}
        for f in range(size // per_family):
            family = new_family()
            while key(family) in used:
                family = new_family()
            used.add(key(family))
            tasks = members(f"{split}-f{f:04d}", family)
            for task in demo_chain(tasks) if split == "demo" else tasks:
                rows["id"].append(f"{split}-{len(rows['id']):05d}")
                rows["tier"].append(task["plan"])
                rows["task"].append(json.dumps(task, sort_keys=True))
        splits[split] = Dataset.from_dict(rows)
    return DatasetDict(splits)
