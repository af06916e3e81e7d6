"""The sample log: what the policy wrote, and what it was credited with, at a few steps of a run.

Every `log.samples_every` steps (steps 0, N, 2N, ... and the last one) the step's first
`log.samples_groups` groups go to `samples.jsonl` in the run folder, one JSON object per group:

    {"step": s, "group": g, "task_id": ..., "tier": ..., "prompt": the first observation,
     "completions": [{"text", "reward", "success", "advantage", "turns"?}, ...]}

A completion's `advantage` is the mean over its turns that were credited (null when none was: a
scripted or excluded episode); an episode of several turns also lists them (`turns`: role, observation,
text, advantage). The groups are the first ones, not a random draw, so logging takes nothing from any
random stream and a run computes the same numbers with the sample log on or off. With TensorBoard or
W&B among the loggers the same rows also go there as text (`log_text`). Only rank 0 writes.
"""

from __future__ import annotations

from typing import Any

from common.credit import Advantages, episode_offsets
from common.episode import Episode, Group


def due(step: int, steps: int, every: int) -> bool:
    """Whether step `step` (0-based) of a run of `steps` steps is sampled: 0, every, 2 x every, ..., last.

    >>> [s for s in range(25) if due(s, 25, 10)], due(3, 25, 0)
    ([0, 10, 20, 24], False)
    """
    return every > 0 and (step % every == 0 or step == steps - 1)


def _completion(episode: Episode, index: int, advantages: Advantages) -> dict[str, Any]:
    scalars = [advantages.scalar((index, i)) if (index, i) in advantages.by_turn else None
               for i in range(len(episode.turns))]
    turns = [{"role": t.role, "observation": t.prompt_text, "text": t.text, "advantage": a}
             for t, a in zip(episode.turns, scalars, strict=True)]
    credited = [a for a in scalars if a is not None]
    out: dict[str, Any] = {"text": "\n".join(t.text for t in episode.turns), "reward": float(episode.reward),
                           "success": bool(episode.success),
                           "advantage": sum(credited) / len(credited) if credited else None}
    if len(turns) > 1:
        out["turns"] = turns
    return out


def sample_rows(groups: list[Group], advantages: Advantages, step: int,
                n_groups: int) -> list[dict[str, Any]]:
    """The sample rows of one step: its first `n_groups` groups (`advantages` keyed as the step's)."""
    offsets = episode_offsets(groups)
    rows = []
    for g, group in enumerate(groups[:n_groups]):
        first = group.episodes[0] if group.episodes else None
        rows.append({"step": step, "group": g, "task_id": group.task_id, "tier": group.tier,
                     "prompt": first.turns[0].prompt_text if first and first.turns else "",
                     "completions": [_completion(e, offsets[g] + i, advantages)
                                     for i, e in enumerate(group.episodes)]})
    return rows


def as_markdown(rows: list[dict[str, Any]]) -> str:
    """The rows as one Markdown text (TensorBoard's text panel)."""
    parts = []
    for row in rows:
        parts.append(f"**step {row['step']}, task {row['task_id']}**\n\n```\n{row['prompt']}\n```")
        for c in row["completions"]:
            adv = "-" if c["advantage"] is None else f"{c['advantage']:+.3f}"
            parts.append(f"reward {c['reward']:g}, advantage {adv}\n\n```\n{c['text']}\n```")
    return "\n\n".join(parts)


def log_text(loggers: list[Any], rows: list[dict[str, Any]], step: int) -> None:
    """The rows as text in TensorBoard (`add_text`) and W&B (a table) when they are among the loggers."""
    if not rows:
        return
    from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

    for logger in loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_text("samples", as_markdown(rows), global_step=step)
        elif isinstance(logger, WandbLogger):
            columns = ["step", "task_id", "prompt", "completion", "reward", "advantage"]
            data = [[row["step"], row["task_id"], row["prompt"], c["text"], c["reward"], c["advantage"]]
                    for row in rows for c in row["completions"]]
            logger.log_text(key="samples", columns=columns, data=data)
