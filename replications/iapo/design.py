"""Behaviours IAPO's claims are about, as per-turn labels for the design check (experiments/design.py)."""

from __future__ import annotations

from common.episode import Episode
from replications.iapo.graph import action_turns, provenance_annotator


def output_used(episode: Episode, turn: int) -> bool | None:
    """An action whose output a later action used (a support edge out of it, IAPO's d+) against one whose
    output nothing used; turns that are not actions say nothing."""
    actions = action_turns(episode)
    if turn not in actions:
        return None
    d_plus = provenance_annotator(episode).degrees()[0]
    return d_plus[actions.index(turn)] > 0


BEHAVIOURS = {"output_used": output_used}
