"""Dynamic sampling (DAPO's), the control for River's filter in the second setting (#40): a train group whose
episodes all earn one reward gives GRPO no learning signal; it is dropped and tasks are drawn again, up to
`rounds` more plays, until as many groups with a signal as tasks were asked for are kept (short of that, the
dropped groups fill the rest, in play order). The update trains on as many groups and episodes as every
other arm's; the extra plays cost sampling only."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TYPE_CHECKING

from common.episode import Episode, Group, Task

if TYPE_CHECKING:
    from common.rollout import Rollout


def has_signal(group: Group, excluded: Callable[[Episode], bool]) -> bool:
    """Whether a group's kept episodes earn more than one reward (else GRPO learns nothing from it)."""
    return len({e.reward for e in group.episodes if not excluded(e)}) > 1


def resample(rollout: Rollout, groups: list[Group], want: int, draw: Callable[[random.Random], list[Task]],
             size: Callable[[Task], int], rng: random.Random, step: int, rounds: int, variant: str,
             excluded: Callable[[Episode], bool]) -> tuple[list[Group], dict[str, float]]:
    """`want` groups: those of `groups` with a signal, then those of further plays of `draw(rng)`'s tasks
    (tagged `dynamic<r>`, trained on), then the dropped ones; and the figures of the step: plays made,
    the first play's share of groups with a signal, groups filled without one."""
    kept = [g for g in groups if has_signal(g, excluded)]
    first_share = len(kept) / max(len(groups), 1)
    dropped = [g for g in groups if not has_signal(g, excluded)]
    plays = 1
    while len(kept) < want and plays <= rounds:
        more = draw(rng)
        new = rollout.play_groups(more, [size(t) for t in more], step, mode="train", variant=variant,
                                  tag=f"dynamic{plays}", trainable=True)
        plays += 1
        kept += [g for g in new if has_signal(g, excluded)]
        dropped += [g for g in new if not has_signal(g, excluded)]
    stats = {"dynamic_plays": float(plays), "dynamic_first_signal": first_share,
             "dynamic_filled": float(max(want - len(kept), 0))}
    return (kept + dropped)[:want], stats
