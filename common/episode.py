"""What a rollout produces: turns, episodes and groups.

A `Turn` is one action of one role: the exact prompt token ids the model saw, the action token
ids as sampled, and the behaviour log-probabilities of those tokens. Nothing here is ever
re-tokenized: training recomputes log-probabilities on exactly these ids.

A `Task` is one task of an environment's split, typed: its id, tier and content (`data`, what the
environment plays). An `Episode` is one play of one task: its turns in order, the terminal reward, and
the typed events the environment emitted (tool calls, tool results, errors, provenance). Credit is not
stored here: a method returns it as a value (`common.credit.Credit`) and the core turns it into
per-token advantages (`common.credit.Advantages`) after the play. A `Group` is the
G episodes of one task that share group statistics (GRPO and the methods built on it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

EventKind = Literal["tool_call", "tool_result", "error", "provenance", "invalid_action", "fault", "info"]


@dataclass(frozen=True)
class Task:
    """One task of a split. `spec` is the row's content exactly as the environment wrote it (JSON);
    `data` is it parsed, what `Environment.new_episode` plays."""

    id: str
    tier: int
    spec: str

    @property
    def data(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(self.spec)
        return data

    def with_data(self, **extra: Any) -> Task:
        """The same task with `extra` fields added to its content (a method's own per-episode input)."""
        return Task(self.id, self.tier, json.dumps({**self.data, **extra}, sort_keys=True))

    @classmethod
    def of(cls, row: Task | Mapping[str, Any]) -> Task:
        """A split's row (`{"id", "tier", "task"}`, as `Environment.task_set()` holds them) as a Task."""
        return row if isinstance(row, Task) else cls(str(row["id"]), int(row["tier"]), str(row["task"]))


def tasks_of(rows: Iterable[Task | Mapping[str, Any]]) -> list[Task]:
    """The rows of a split (a `datasets.Dataset`, or any rows) as Tasks, in order."""
    return [Task.of(r) for r in rows]


@dataclass
class Event:
    """A typed fact the environment reports about a turn.

    `turn` is the index of the turn in `Episode.turns` the event belongs to (-1: the episode).
    `data` is free-form but JSON-serializable (e.g. {"tool": "lookup", "ok": True}). Provenance
    events use {"source": i, "kind": "input" | "success_utilization" | "failed_utilization"}.
    """

    kind: EventKind
    turn: int
    data: dict[str, Any] = field(default_factory=dict)


@dataclass
class Turn:
    """One action of one role, with the tokens exactly as sampled."""

    role: str
    adapter: str | None  # LoRA adapter that produced it; None for scripted actors
    prompt_ids: list[int]  # the full context the model saw (for scripted actors: empty)
    action_ids: list[int]  # sampled tokens (for scripted actors: empty)
    logprobs: list[float]  # behaviour log-probabilities of action_ids
    text: str  # decoded action text, as the environment received it
    prompt_text: str = ""
    trainable: bool = True  # False for scripted actors and frozen adapters
    truncated: bool = False  # hit max_new_tokens without a stop

    @property
    def num_action_tokens(self) -> int:
        return len(self.action_ids)


@dataclass
class Episode:
    """One play of one task."""

    task_id: str
    tier: int
    turns: list[Turn] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    reward: float = 0.0  # terminal (outcome) reward
    success: bool = False
    info: dict[str, Any] = field(default_factory=dict)  # environment-specific metrics
    faulted: bool = False  # an infrastructure fault (or the environment raised), not the policy's doing
    truncated: bool = False  # the context ran out before the episode ended (reward 0, no terminal step)
    counts_for_training: bool = True  # False: scored for credit but never trained on
    tag: str = "main"  # e.g. "main", "solo", "masked": which play produced it

    def turns_of(self, role: str) -> list[Turn]:
        return [t for t in self.turns if t.role == role]

    def events_of(self, kind: EventKind) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def generated_tokens(self) -> int:
        return sum(t.num_action_tokens for t in self.turns)

    @property
    def model_calls(self) -> int:
        return sum(1 for t in self.turns if t.adapter is not None)


@dataclass
class Group:
    """The episodes of one task that share group statistics."""

    task_id: str
    tier: int
    episodes: list[Episode]
    extra: dict[str, list[Episode]] = field(default_factory=dict)  # counterfactual plays by tag

    @property
    def rewards(self) -> list[float]:
        return [e.reward for e in self.episodes]

    def all_episodes(self) -> list[Episode]:
        return self.episodes + [e for eps in self.extra.values() for e in eps]


def step_episodes(groups: list[Group]) -> list[Episode]:
    """Every episode of a step in one list, the order every later stage indexes: each group's
    `all_episodes()` (its episodes, then its extra plays), group after group."""
    return [e for g in groups for e in g.all_episodes()]


def info_means(episodes: list[Episode], prefix: str = "") -> dict[str, float]:
    """Means of the environment's numeric `info` values over `episodes` (each over the episodes that
    report it), keyed `<prefix><key>`."""
    values: dict[str, list[float]] = {}
    for e in episodes:
        for key, value in e.info.items():
            if isinstance(value, bool | int | float):
                values.setdefault(key, []).append(float(value))
    return {f"{prefix}{k}": float(np.mean(v)) for k, v in sorted(values.items())}
