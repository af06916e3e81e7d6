"""Behaviours River's claims are about, as per-turn labels for the design check (experiments/design.py)."""

from __future__ import annotations

from common.episode import Episode
from replications.river.penalty import repeated_turns


def repeats(episode: Episode, turn: int) -> bool | None:
    """A command that repeats an earlier one (River's loop, the penalty's target) against one that
    does not."""
    pairs = [tuple(p) for p in (episode.info.get("record") or {}).get("turns", [])]
    if len(pairs) != len(episode.turns):
        return None
    return repeated_turns(pairs)[turn]


BEHAVIOURS = {"repeats": repeats}
