"""Credit: what a method says each agent of each episode earned, and how the core turns that into
per-token advantages.

A method's `credit(groups, step)` returns a `Credit` (a value; nothing is written into episodes):
for every episode of every group, a table agent key -> scalar, plus optional per-token advantages
and metrics. `to_advantages` is the one function that turns it into what the loss reads:

- `kind="reward"`: each key's rewards are normalized with the method's estimator within the group,
  over the episodes that have that key (e.g. a worker absent from one rollout is left out of that
  worker's statistics), after the KL-in-reward penalty when `trainer.kl.placement=reward`;
- `kind="advantage"`: the values are advantages already and are used as they are.

Each turn reads the value of its agent key (`Method.agent_of(episode, index)`, by default the
turn's role); the key `BROADCAST` ("*") applies to every turn of the episode whose own key has no
entry (GRPO: one outcome per episode, broadcast to every action). Per-token advantages
(`Credit.tokens`) override the turn's scalar (IAPO routes a trajectory's advantage over its
actions this way).

Estimators map a group's scalar rewards to one advantage each (shapes in names: `rewards_G` ->
`advantages_G`) and are registered in `CREDIT`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from common.episode import Episode, Group, Turn

Estimator = Callable[[np.ndarray], np.ndarray]
AgentOf = Callable[[Episode, int], str]
EPS = 1e-6
BROADCAST = "*"


def grpo(rewards_G: np.ndarray) -> np.ndarray:
    """GRPO (Shao et al. 2024, eq. 3): (r_i - mean(r)) / (std(r) + eps).

    std is the unbiased sample std (ddof=1), as in TRL and verl. A group of one, or a group whose
    rewards are all equal, gets advantage 0.
    """
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    if rewards_G.size < 2:
        return np.zeros_like(rewards_G)
    return (rewards_G - rewards_G.mean()) / (rewards_G.std(ddof=1) + EPS)


def drgrpo(rewards_G: np.ndarray) -> np.ndarray:
    """Dr. GRPO (Liu et al. 2025): r_i - mean(r), no std division (removes the difficulty bias)."""
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    return rewards_G - rewards_G.mean()


def rloo(rewards_G: np.ndarray) -> np.ndarray:
    """RLOO (Ahmadian et al. 2024): r_i - mean of the other G-1 rewards = G/(G-1)(r_i - mean(r))."""
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    g = rewards_G.size
    if g < 2:
        return np.zeros_like(rewards_G)
    return (rewards_G * g - rewards_G.sum()) / (g - 1)


def rft(rewards_G: np.ndarray) -> np.ndarray:
    """Rejection-sampling fine-tuning on the policy's own samples (DeepSeekMath's Online RFT,
    Shao et al. 2024, section 5.2.1): 1 for an episode whose reward is 1 (a full success in every
    environment of the suite), 0 otherwise; no baseline, no normalization, no negative gradient.
    With the strictly on-policy update this is supervised training on the group's successes."""
    rewards_G = np.asarray(rewards_G, dtype=np.float64)
    return (rewards_G >= 1.0 - EPS).astype(np.float64)


CREDIT: dict[str, Estimator] = {"grpo": grpo, "drgrpo": drgrpo, "rloo": rloo, "rft": rft}


def get_estimator(name: str) -> Estimator:
    if name not in CREDIT:
        raise ValueError(f"unknown advantage estimator {name!r}; choose one of {sorted(CREDIT)}")
    return CREDIT[name]


def normalize_by_key(values_N: np.ndarray, keys: Iterable[object], estimator: Estimator) -> np.ndarray:
    """Apply `estimator` separately within each set of entries sharing a key (e.g. per role)."""
    values_N = np.asarray(values_N, dtype=np.float64)
    keys = list(keys)
    out_N = np.zeros_like(values_N)
    for key in dict.fromkeys(keys):
        idx = np.array([i for i, k in enumerate(keys) if k == key])
        out_N[idx] = estimator(values_N[idx])
    return out_N


# ---- what a method returns ------------------------------------------------------------------------
AgentValues = dict[str, float]  # agent key -> reward or advantage of one episode


@dataclass
class Credit:
    """A method's credit for one step's groups.

    `values[g][i]`: agent key -> scalar for episode i of group g (aligned with `Group.episodes`;
    extra plays get no credit). `tokens[(g, i, t)]`: optional per-token advantages of turn t of that
    episode (one per action token, used as they are). `metrics`: numbers to log for this step.
    """

    kind: Literal["reward", "advantage"]
    values: list[list[AgentValues]]
    tokens: dict[tuple[int, int, int], list[float]] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)

    @staticmethod
    def outcome(groups: list[Group], metrics: dict[str, float] | None = None) -> Credit:
        """GRPO's credit: each episode's outcome reward, broadcast to all of its turns."""
        return Credit("reward", [[{BROADCAST: e.reward} for e in g.episodes] for g in groups],
                      metrics=dict(metrics or {}))


# ---- what the loss reads --------------------------------------------------------------------------
TurnKey = tuple[int, int]  # (episode index in the step's `step_episodes(groups)`, turn index in its episode)


@dataclass(frozen=True)
class Advantages:
    """Advantages of the trained turns, keyed by `TurnKey`: a scalar per turn, or one value per action
    token."""

    by_turn: dict[TurnKey, float | list[float]] = field(default_factory=dict)

    def tokens(self, key: TurnKey, turn: Turn) -> list[float]:
        """One advantage per action token of `turn` (the turn at `key`; 0 for a turn that got no credit)."""
        adv = self.by_turn.get(key, 0.0)
        if isinstance(adv, list):
            if len(adv) != turn.num_action_tokens:
                raise ValueError(f"per-token advantages of a {turn.role} turn: {len(adv)} values for "
                                 f"{turn.num_action_tokens} action tokens")
            return adv
        return [adv] * turn.num_action_tokens

    def scalar(self, key: TurnKey) -> float:
        """The turn's advantage (the mean over its tokens when it has per-token values)."""
        adv = self.by_turn.get(key, 0.0)
        if isinstance(adv, list):
            return float(np.mean(adv)) if adv else 0.0
        return float(adv)


def episode_offsets(groups: list[Group]) -> list[int]:
    """The index in `step_episodes(groups)` of each group's first episode."""
    offsets, n = [], 0
    for group in groups:
        offsets.append(n)
        n += len(group.all_episodes())
    return offsets


def to_advantages(groups: list[Group], credit: Credit, agent_of: AgentOf, estimator: Estimator,
                  excluded: Callable[[Episode], bool] = lambda e: False,
                  penalty: Callable[[int, str], float] | None = None) -> Advantages:
    """Turn a method's `Credit` into per-turn advantages (the only place this happens).

    `excluded` episodes (faulted, truncated: the method decides) take no part in group statistics
    and get no advantage. `penalty(episode_index, key)` is subtracted from a key's reward before
    normalization (the KL-in-reward penalty of that key's tokens; rewards only); episodes are indexed
    as in `step_episodes(groups)`, and so are the returned advantages' keys.
    """
    if len(credit.values) != len(groups):
        raise ValueError(f"Credit.values has {len(credit.values)} groups for {len(groups)} groups played")
    by_turn: dict[TurnKey, float | list[float]] = {}
    for g, (group, offset) in enumerate(zip(groups, episode_offsets(groups), strict=True)):
        if len(credit.values[g]) != len(group.episodes):
            raise ValueError(f"Credit.values[{g}] has {len(credit.values[g])} episodes for "
                             f"{len(group.episodes)} played")
        kept = [i for i, e in enumerate(group.episodes) if not excluded(e)]
        table: dict[str, list[tuple[int, float]]] = defaultdict(list)
        for i in kept:
            for key, value in credit.values[g][i].items():
                if penalty is not None and credit.kind == "reward":
                    value = value - penalty(offset + i, key)
                table[key].append((i, float(value)))
        resolved: list[dict[str, float]] = [{} for _ in group.episodes]
        for key, entries in table.items():
            values_G = np.array([v for _, v in entries], dtype=np.float64)
            advs_G = estimator(values_G) if credit.kind == "reward" else values_G
            for (i, _), a in zip(entries, advs_G, strict=True):
                resolved[i][key] = float(a)
        for i in kept:
            episode = group.episodes[i]
            for t, _turn in enumerate(episode.turns):
                per_token = credit.tokens.get((g, i, t))
                if per_token is not None:
                    by_turn[(offset + i, t)] = list(per_token)
                    continue
                key = agent_of(episode, t)
                by_turn[(offset + i, t)] = resolved[i].get(key, resolved[i].get(BROADCAST, 0.0))
    return Advantages(by_turn)
