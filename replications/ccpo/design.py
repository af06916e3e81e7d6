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


def thinker_best_response(episode: Episode, turn: int) -> bool | None:
    """thinker_solver's dyad setting (#38): the Thinker does its tier's best response (helps where help is
    needed, stays silent where the Solver usually knows: `info['needed']`) rather than the other one; a
    wrong or malformed message, or a Solver turn, says nothing."""
    if episode.turns[turn].role != "thinker" or "needed" not in episode.info:
        return None
    helps, silent = episode.info.get("msg_help"), episode.info.get("msg_silent")
    if not (helps or silent):
        return None
    return bool(helps) == bool(episode.info["needed"])


def solver_copies(episode: Episode, turn: int) -> bool | None:
    """thinker_solver's dyad setting: the Solver copies a (wrong) hint instead of answering what it knows;
    only where it knew and received a wrong readable hint (`info['solver_copied']`)."""
    if episode.turns[turn].role != "solver" or "solver_copied" not in episode.info:
        return None
    return bool(episode.info["solver_copied"])


BEHAVIOURS = {"thinker_helps": thinker_helps, "thinker_best_response": thinker_best_response,
              "solver_copies": solver_copies}
