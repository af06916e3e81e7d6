"""Agent pools drawn from a declared prior (issue #42): InFlowOp's conclusions over many pools, not one
hand-set table.

The hand-set pool of `agents.py` fixes every arm's accuracy in closed form (the CARD's first
results). Here a pool is drawn afresh, seeded by its id, from `PoolPrior`, whose numbers are
declared in `conf/pool/prior.yaml` (`method.pool_prior`) and were committed with the CARD's pool
claims before any pool run. Every number is ours [I]; the hand-set table lies inside the prior's
support (its specialists err 0.03-0.04 at home and 0.20-0.45 elsewhere, its generalists 0.10 and
0.18, malformed share 0.5, handoff 0.97, composition 0.98).

A drawn pool (`draw_pool`):

- `agents` pool agents `agent-0..`: each has a *home*: 1, 2 or all 4 categories (`home_sizes` with
  `home_weights`); its true error is uniform in `home_error` at home (`generalist_error` when its
  home is every category) and in `other_error` elsewhere; its latency is uniform in `call_latency`
  per call plus uniform in `op_latency` per operation.
- Its card declares its home; with probability `overclaim` it also declares one category outside
  its home (chosen uniformly): the card overclaims it.
- One on-demand specialist per category (`new-<c>`): error uniform in `created_error` in its own
  category, `created_other` elsewhere; latency `created_call` + `created_op` per op, plus
  `creation_latency` to create it (as the hand-set pool's).
- The pool's malformed share of errors (`garbage`), and the platform facts the optimizer is told
  (`handoff`, `composition`), each uniform in its range.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from envs.testbeds.braid import CATEGORIES, BraidTask
from replications.inflowop.agents import (
    COMPOSITION,
    CREATED,
    HANDOFF,
    POOL,
    AgentCard,
    ScriptedAgent,
)

Range = tuple[float, float]


@dataclass(frozen=True)
class PoolPrior:
    """The prior over agent pools (module docstring). The defaults are the declared prior; the run's
    `method.pool_prior` (conf/pool/prior.yaml) must equal them (a test checks it)."""

    agents: int = 5
    home_sizes: tuple[int, ...] = (1, 2, 4)
    home_weights: tuple[float, ...] = (0.4, 0.4, 0.2)
    home_error: Range = (0.02, 0.12)
    generalist_error: Range = (0.05, 0.30)
    other_error: Range = (0.15, 0.50)
    overclaim: float = 0.3
    call_latency: Range = (0.4, 2.5)
    op_latency: Range = (0.1, 0.5)
    created_error: Range = (0.03, 0.10)
    created_other: float = 0.5
    created_call: float = 1.5
    created_op: float = 0.3
    creation_latency: float = 2.0
    garbage: Range = (0.2, 0.8)
    handoff: Range = (0.93, 0.995)
    composition: Range = (0.95, 0.995)

    @classmethod
    def of(cls, values: Mapping[str, Any]) -> PoolPrior:
        """From `method.pool_prior` (lists for ranges); unknown keys fail, missing ones keep the default."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"method.pool_prior: unknown key(s) {unknown}; known: {sorted(known)}")
        given: dict[str, Any] = {k: tuple(v) if isinstance(v, Sequence) and not isinstance(v, str) else v
                                 for k, v in values.items()}
        return cls(**given)

    def check(self) -> None:
        """Raise ValueError unless every probability is in range and every range is ordered."""
        ranges = {f.name: getattr(self, f.name) for f in fields(self)
                  if isinstance(getattr(self, f.name), tuple)
                  and f.name not in ("home_sizes", "home_weights")}
        bad = [k for k, (lo, hi) in ranges.items() if not 0 <= lo <= hi]
        probs = [k for k in ("home_error", "generalist_error", "other_error", "created_error", "garbage",
                             "handoff", "composition") if not 0 <= ranges[k][0] <= ranges[k][1] <= 1]
        if (bad or probs or self.agents < 1 or not 0 <= self.overclaim <= 1
                or not 0 <= self.created_other <= 1 or len(self.home_sizes) != len(self.home_weights)
                or any(not 1 <= h <= len(CATEGORIES) for h in self.home_sizes)):
            raise ValueError(f"method.pool_prior out of range: {bad + probs or 'agents, overclaim or homes'}")


@dataclass(frozen=True)
class Pool:
    """One pool: its agents (cards and hidden error rates), on-demand specialists and platform facts."""

    pool_id: int
    agents: tuple[ScriptedAgent, ...]
    created: tuple[ScriptedAgent, ...]
    handoff: float
    composition: float
    garbage: float

    def by_name(self, with_created: bool = True) -> dict[str, ScriptedAgent]:
        return {a.name: a for a in (*self.agents, *(self.created if with_created else ()))}

    def describe(self) -> dict[str, Any]:
        """The pool as plain data (hidden error rates included: for analysis, never for the optimizer)."""
        return {"pool": self.pool_id, "handoff": self.handoff, "composition": self.composition,
                "garbage": self.garbage,
                "agents": [{"name": a.name, "declares": sorted(a.card.declares), "error": a.error,
                            "call": a.card.call_latency, "op": a.card.op_latency} for a in self.agents]}


HAND_SET = Pool(-1, POOL, CREATED, HANDOFF, COMPOSITION, 0.5)  # agents.py's table, as a Pool


def pool_rng(pool_id: int) -> random.Random:
    return random.Random(f"inflowop/pool/{pool_id}")


def draw_pool(pool_id: int, prior: PoolPrior) -> Pool:
    """The pool `pool_id` drawn from `prior` (the same pool for the same id and prior, in any run)."""
    rng = pool_rng(pool_id)

    def u(r: Range) -> float:
        return rng.uniform(*r)

    garbage, handoff, composition = u(prior.garbage), u(prior.handoff), u(prior.composition)
    agents = []
    for i in range(prior.agents):
        size = rng.choices(prior.home_sizes, weights=prior.home_weights)[0]
        home = set(rng.sample(CATEGORIES, size))
        at_home = prior.generalist_error if size == len(CATEGORIES) else prior.home_error
        error = {c: round(u(at_home) if c in home else u(prior.other_error), 4) for c in CATEGORIES}
        declares = set(home)
        outside = [c for c in CATEGORIES if c not in home]
        if rng.random() < prior.overclaim and outside:
            declares.add(rng.choice(outside))
        card = AgentCard(f"agent-{i}", frozenset(declares), round(u(prior.call_latency), 3),
                         round(u(prior.op_latency), 3))
        agents.append(ScriptedAgent(card, error, garbage, composition))
    created = tuple(
        ScriptedAgent(AgentCard(f"new-{c}", frozenset({c}), prior.created_call, prior.created_op,
                                created=True, creation_latency=prior.creation_latency),
                      {d: round(u(prior.created_error), 4) if d == c else prior.created_other
                       for d in CATEGORIES},
                      garbage, composition)
        for c in CATEGORIES)
    return Pool(pool_id, tuple(agents), created, handoff, composition, garbage)


def best_single(pool: Pool, dev: Sequence[BraidTask]) -> tuple[str, dict[str, float]]:
    """The pool's best single agent, chosen on the dev split as `tune.py` chose the hand-set pool's:
    each pool agent runs every dev task alone in one call, no retry; the highest accuracy wins
    (ties: the first agent). The same choice in every arm and seed. Returns its name and every
    agent's dev accuracy."""
    from replications.inflowop.execute import Agent, Executor
    from replications.inflowop.plan import Weights, single_plan

    scores = {}
    cards = [a.card for a in pool.agents]
    agents: dict[str, Agent] = dict(pool.by_name(False))
    for a in pool.agents:
        rng = random.Random(f"inflowop/pool-{pool.pool_id}/single-dev/{a.name}")
        right = 0
        for task in dev:
            trace = Executor(task, agents, cards, lambda card, c: 0.5, Weights(0.0, 0.0), rng,
                             repair="none", handoff=pool.handoff).run(single_plan(task, a.name))
            truth = task.truth()
            right += all(trace.values.get(i) == truth[i] for i in task.sinks)
        scores[a.name] = right / max(len(dev), 1)
    return max(scores, key=lambda n: (scores[n], -list(scores).index(n))), scores
