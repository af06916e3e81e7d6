"""Behaviours CCPO's claims are about, as per-turn labels for the design check (experiments/design.py):
1 where a turn shows it, 0 where it does not, None where the label says nothing of that turn."""

from __future__ import annotations

from common.episode import Episode


def thinker_helps(episode: Episode, turn: int) -> bool | None:
    """The Thinker's message helps (a hint, not silence); a Solver turn says nothing of it."""
    if episode.turns[turn].role != "thinker":
        return None
    if episode.info.get("msg_help"):
        return True
    return False if episode.info.get("msg_silent") else None


BEHAVIOURS = {"thinker_helps": thinker_helps}
