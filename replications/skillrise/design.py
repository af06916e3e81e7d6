"""Behaviours SkillRise's claims are about, as per-turn labels for the design check (experiments/design.py):
1 where a turn shows it, 0 where it does not, None where the label says nothing of that turn. Both are about
the curate turns (the mechanism: the curate reward must tell a useful document from the rest); solve turns
say nothing."""

from __future__ import annotations

from common.episode import Episode


def _curate(episode: Episode, key: str) -> bool | None:
    if episode.tag != "curate" or not episode.turns:
        return None
    return bool(episode.info.get(key, False))


def curate_right_doc(episode: Episode, turn: int) -> bool | None:
    """A curate turn wrote a right document (an abstract prefix of the hidden order: 1) or any other (0)."""
    return _curate(episode, "doc_right")


def curate_abstract_doc(episode: Episode, turn: int) -> bool | None:
    """A curate turn wrote an abstract document (1) or a concrete, empty or other one (0)."""
    return _curate(episode, "doc_abstract")


BEHAVIOURS = {"curate_right_doc": curate_right_doc, "curate_abstract_doc": curate_abstract_doc}
