"""Behaviours SHARP's claims are about, as per-turn labels for the design check (experiments/design.py):
1 where a turn shows it, 0 where it does not, None where the label says nothing of that turn."""

from __future__ import annotations

from common.episode import Episode


def worker_right_tool(episode: Episode, turn: int) -> bool | None:
    """A worker called its slot's right tool (1) or the distractor (0); planner turns and tool errors
    say nothing."""
    record = episode.info.get("record") or {}
    workers = [t for t, tn in enumerate(episode.turns) if tn.role == "worker"]
    if turn not in workers or workers.index(turn) >= len(record.get("tool_kinds", [])):
        return None
    kind = record["tool_kinds"][workers.index(turn)]
    return True if kind == "value" else False if kind == "distractor" else None


BEHAVIOURS = {"worker_right_tool": worker_right_tool}
