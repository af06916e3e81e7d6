"""SHARP's formulas, as plain functions (no torch): exact and Monte-Carlo Shapley values,
leave-one-out credit, the local arm's own-slot signal, each agent's reward and its per-agent
normalization (arXiv 2602.08335).
Each is tested against hand-computed cases (tests/replications/test_sharp.py)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Hashable, Sequence
from itertools import combinations
from typing import Any, TypeVar

import numpy as np

from common.credit import Estimator, normalize_by_key

Player = TypeVar("Player", bound=Hashable)  # any hashable player; each function returns the type it was given
Value = Callable[[frozenset], float]


def shapley_values(players: Sequence[Player], value: Value) -> dict[Player, float]:
    """Exact Shapley values (Shapley 1953):

        phi_m = sum_{S subset of M minus m} |S|! (|M| - |S| - 1)! / |M|! * (v(S + m) - v(S)).

    `value` maps a frozenset of players to a float (v of the empty set included). Evaluates v on
    all 2^|M| coalitions, each once.
    """
    players = list(players)
    n = len(players)
    cache: dict[frozenset, float] = {}

    def v(s: frozenset) -> float:
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    phi: dict[Player, float] = {}
    for m in players:
        others = [p for p in players if p != m]
        total = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for subset in combinations(others, size):
                s = frozenset(subset)
                total += weight * (v(s | {m}) - v(s))
        phi[m] = total
    return phi


def shapley_values_mc(players: Sequence[Player], value: Value, permutations: int,
                      seed: int) -> tuple[dict[Player, float], dict[Player, float]]:
    """Monte-Carlo Shapley values over random orderings (Castro et al. 2009).

    For each of `permutations` uniformly random orderings, player m's marginal contribution is
    v(players before m, plus m) - v(players before m); phi_m is their mean. Returns (phi, stderr),
    stderr_m = sample std of m's marginal contributions / sqrt(permutations): the estimate's
    standard error (0 when every ordering gives m the same contribution).
    """
    if permutations < 2:
        raise ValueError("permutations must be >= 2 (the standard error needs two orderings); "
                         f"got {permutations}")
    players = list(players)
    rng = random.Random(seed)
    cache: dict[frozenset, float] = {}

    def v(s: frozenset) -> float:
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    contributions: dict[Player, list[float]] = {m: [] for m in players}
    for _ in range(permutations):
        order = players[:]
        rng.shuffle(order)
        before: frozenset = frozenset()
        for m in order:
            after = before | {m}
            contributions[m].append(v(after) - v(before))
            before = after
    phi = {m: float(np.mean(c)) if c else 0.0 for m, c in contributions.items()}
    stderr = {m: float(np.std(c, ddof=1) / math.sqrt(len(c))) for m, c in contributions.items()}
    return phi, stderr


def leave_one_out(players: Sequence[Player], value: Value) -> dict[Player, float]:
    """Leave-one-out credit: Delta_m = v(M) - v(M minus m) (|M| + 1 evaluations)."""
    grand = frozenset(players)
    full = float(value(grand))
    return {m: full - float(value(grand - {m})) for m in players}


def own_slot(record: dict[str, Any], n_workers: int) -> dict[int, float]:
    """The `local` arm's per-worker signal: 1 if worker m's tool result is the true value of the fact
    it was sent for (`record["worker_truth"][m]`; environments without it, like `toolplan`, send
    worker m to fact m), else 0. A downstream worker of a broken chain gets 0 however it chose."""
    truth = record.get("worker_truth", record["truth"])
    results = record["results"]
    return {m: float(m < len(results) and m < len(truth) and results[m] == truth[m])
            for m in range(n_workers)}


def matched_credit(credits: list[list[dict[int, float]]]) -> list[list[dict[int, float]]]:
    """Weights matched (#37): each worker m's credit standardized over one step's batch (every group's
    episodes pooled), c'_{i,m} = (c_{i,m} - mean_m) / sd_m (population SD), so that every credit (exact,
    MC, leave-one-out, own-slot) enters R_m with the same per-worker variance and lambda_s is the same
    weight in every arm. A worker whose credit does not vary over the batch gets 0 (no signal).
    `credits[g][i]`: worker -> credit of episode i of group g; the same shape comes back."""
    pooled: dict[int, list[float]] = {}
    for group in credits:
        for episode in group:
            for m, c in episode.items():
                pooled.setdefault(m, []).append(c)
    stats = {m: (float(np.mean(c)), float(np.std(c))) for m, c in pooled.items()}
    return [[{m: (c - stats[m][0]) / stats[m][1] if stats[m][1] > 1e-12 else 0.0 for m, c in episode.items()}
             for episode in group] for group in credits]


def agent_rewards(outcome: float, contribution: dict[Player, float], tool: dict[Player, float],
                  lambda_s: float, lambda_p: float) -> dict[Player, float]:
    """R_m = R^b + lambda_s * phi_m + lambda_p * R^tool_m for every player m (the card's sum)."""
    return {m: outcome + lambda_s * contribution[m] + lambda_p * tool.get(m, 0.0) for m in contribution}


def per_agent_advantages(rewards_G: list[dict[str, float]], estimator: Estimator) -> list[dict[str, float]]:
    """Normalize each agent's reward within one query's G rollouts (an agent absent from a rollout,
    e.g. no workers after a malformed plan, is left out of that agent's statistics)."""
    flat = [(i, agent, r) for i, rewards in enumerate(rewards_G) for agent, r in rewards.items()]
    advs = normalize_by_key(np.array([r for _, _, r in flat]), [agent for _, agent, _ in flat], estimator)
    out: list[dict[str, float]] = [{} for _ in rewards_G]
    for (i, agent, _), a in zip(flat, advs, strict=True):
        out[i][agent] = float(a)
    return out
