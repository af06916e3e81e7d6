"""InFlowOp's cost and its decomposition planners: COALESCE, the greedy split, the fixed template,
the single agent. Torch-free; every function is pure.

A **plan** is a list of subtasks in an order that respects the data flow; a subtask is a set of
task nodes run by one agent in one call. The paper states the cost only in words
("reliability cost + beta * latency + gamma * creation cost"); the concrete forms are ours [I]:

    cost(S, a) = rel(S, a) + beta * lat(S, a) + gamma * [a is created on demand]          (eq. C)
    rel(S, a)  = - sum_{v in S} log r(a, cat(v)) - (|S| - 1) log COMPOSITION - h(S) log HANDOFF
    lat(S, a)  = call_latency(a) + |S| * op_latency(a) + creation_latency(a)

r is the profile's reliability (`agents.reliability`, eq. R), h(S) the number of data edges that
enter S from other task nodes (each is a handoff between calls). Summed over a plan's subtasks,
rel is -log of the plan's success probability under independence (the platform's HANDOFF and
COMPOSITION factors included), so minimizing the summed cost trades success against time.

**COALESCE** (the paper's name; our procedure): split top-down to atomic steps (on a DAG of typed
operations the top-down split bottoms out at one node per subtask), assign each its cheapest
agent, then merge bottom-up: among pairs of subtasks joined by a data edge whose merge keeps the
subtask graph acyclic, merge the pair whose best single agent lowers the summed cost the most;
stop when no merge lowers it. Merging saves handoffs and call overhead and costs the composition
factor and the chance to pick a different agent for each part. **Greedy split**: the same atomic
split and per-step cheapest agent, no merging (granularity not weighed by the cost).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from envs.testbeds.braid import OPS, BraidTask
from replications.inflowop.agents import COMPOSITION, HANDOFF, AgentCard

Reliability = Callable[[AgentCard, str], float]  # (card, category) -> probability an operation is right


@dataclass(frozen=True)
class Subtask:
    """Task nodes run by one agent in one call."""

    nodes: frozenset[int]
    agent: str

    def __repr__(self) -> str:
        return f"{self.agent}{sorted(self.nodes)}"


@dataclass(frozen=True)
class Weights:
    """The cost's trade-offs (eq. C): beta per second of latency, gamma per created specialist; and the
    platform facts the optimizer is told (the hand-set pool's `HANDOFF`, `COMPOSITION` by default; a
    pool drawn from the prior, `pools.py`, has its own)."""

    beta: float
    gamma: float
    handoff: float = HANDOFF
    composition: float = COMPOSITION


def handoffs_in(task: BraidTask, nodes: Iterable[int]) -> int:
    """h(S): data edges from task nodes outside S into S (sources are given, not handed off)."""
    inside = set(nodes)
    return sum(1 for v in inside for a in task.nodes[v].args if isinstance(a, int) and a not in inside)


def reliability_cost(task: BraidTask, nodes: Iterable[int], card: AgentCard, rel: Reliability,
                     handoff: float = HANDOFF, composition: float = COMPOSITION) -> float:
    """rel(S, a) of eq. C: -log of the probability that S's call and its incoming handoffs go right."""
    nodes = sorted(nodes)
    steps = -sum(math.log(max(rel(card, OPS[task.nodes[v].op].category), 1e-9)) for v in nodes)
    return steps - (len(nodes) - 1) * math.log(composition) - handoffs_in(task, nodes) * math.log(handoff)


def latency(card: AgentCard, size: int) -> float:
    """lat(S, a) of eq. C: one call of `size` operations, plus the creation of an on-demand specialist."""
    return card.call_latency + size * card.op_latency + card.creation_latency


def cost(task: BraidTask, nodes: Iterable[int], card: AgentCard, rel: Reliability, w: Weights) -> float:
    """cost(S, a) = rel(S, a) + beta * lat(S, a) + gamma * [a is created] (eq. C)."""
    nodes = sorted(nodes)
    return (reliability_cost(task, nodes, card, rel, w.handoff, w.composition)
            + w.beta * latency(card, len(nodes))
            + w.gamma * card.created)


def can_run(card: AgentCard, task: BraidTask, nodes: Iterable[int]) -> bool:
    """An on-demand specialist takes atomic steps of its own category only; pool agents take anything."""
    nodes = list(nodes)
    return not card.created or (len(nodes) == 1 and OPS[task.nodes[nodes[0]].op].category in card.declares)


def best_agent(task: BraidTask, nodes: Iterable[int], cards: Sequence[AgentCard], rel: Reliability,
               w: Weights, exclude: Iterable[str] = ()) -> tuple[str, float]:
    """The cheapest agent for S among `cards` (not in `exclude`), and its cost; ties: the first card."""
    nodes = sorted(nodes)
    excluded = set(exclude)
    options = [(cost(task, nodes, c, rel, w), i, c.name) for i, c in enumerate(cards)
               if c.name not in excluded and can_run(c, task, nodes)]
    if not options:
        raise ValueError(f"no agent left for nodes {nodes} (excluded: {sorted(excluded)})")
    c, _, name = min(options)
    return name, c


def split_atomic(task: BraidTask) -> list[frozenset[int]]:
    """The top-down split of a task to atomic steps: one node per subtask, in node order."""
    return [frozenset({n.index}) for n in task.nodes]


def _edges(task: BraidTask, groups: Sequence[frozenset[int]]) -> set[tuple[int, int]]:
    """Data edges between groups (i -> j: a node of j reads a node of i)."""
    where = {v: g for g, nodes in enumerate(groups) for v in nodes}
    return {(where[a], where[n.index]) for n in task.nodes for a in n.args
            if isinstance(a, int) and where[a] != where[n.index]}


def _reaches(edges: set[tuple[int, int]], start: int, goal: int, skip: tuple[int, int]) -> bool:
    """Whether goal is reachable from start without the edge `skip`."""
    todo, seen = [start], {start}
    while todo:
        u = todo.pop()
        for a, b in edges:
            if a == u and (a, b) != skip and b not in seen:
                if b == goal:
                    return True
                seen.add(b)
                todo.append(b)
    return False


def order(task: BraidTask, subtasks: Sequence[Subtask]) -> list[Subtask]:
    """The subtasks in an order that respects the data flow (Kahn's algorithm; ties: the smallest node
    first)."""
    groups = [s.nodes for s in subtasks]
    edges = _edges(task, groups)
    indeg = {g: sum(1 for _, b in edges if b == g) for g in range(len(groups))}
    ready = sorted((min(groups[g]), g) for g, d in indeg.items() if d == 0)
    out: list[Subtask] = []
    while ready:
        _, g = ready.pop(0)
        out.append(subtasks[g])
        for a, b in sorted(edges):
            if a == g:
                indeg[b] -= 1
                if indeg[b] == 0:
                    ready = sorted([*ready, (min(groups[b]), b)])
    if len(out) != len(subtasks):
        raise ValueError(f"the subtasks {list(subtasks)} form a cycle")
    return out


def greedy_split(task: BraidTask, cards: Sequence[AgentCard], rel: Reliability, w: Weights) -> list[Subtask]:
    """The greedy split: atomic steps, each to its cheapest agent; no merging."""
    return [Subtask(g, best_agent(task, g, cards, rel, w)[0]) for g in split_atomic(task)]


def coalesce(task: BraidTask, cards: Sequence[AgentCard], rel: Reliability, w: Weights) -> list[Subtask]:
    """COALESCE: the greedy split, then bottom-up merges while a merge lowers the summed cost (eq. C)."""
    plan = greedy_split(task, cards, rel, w)
    costs = [cost(task, s.nodes, next(c for c in cards if c.name == s.agent), rel, w) for s in plan]
    while True:
        groups = [s.nodes for s in plan]
        edges = _edges(task, groups)
        best: tuple[float, int, int, str] | None = None
        for a, b in sorted(edges):
            if _reaches(edges, a, b, skip=(a, b)):
                continue  # a path through a third subtask: merging a and b would make a cycle
            merged = groups[a] | groups[b]
            agent, c = best_agent(task, merged, cards, rel, w)
            delta = c - costs[a] - costs[b]
            if delta < -1e-12 and (best is None or delta < best[0]):
                best = (delta, a, b, agent)
        if best is None:
            return order(task, plan)
        delta, a, b, agent = best
        merged = groups[a] | groups[b]
        keep = [i for i in range(len(plan)) if i not in (a, b)]
        plan = [plan[i] for i in keep] + [Subtask(merged, agent)]
        costs = [costs[i] for i in keep] + [costs[a] + costs[b] + delta]
        plan = order(task, plan)
        costs = [cost(task, s.nodes, next(c for c in cards if c.name == s.agent), rel, w) for s in plan]


def template_plan(task: BraidTask, cards: Sequence[AgentCard]) -> list[Subtask]:
    """The fixed template: atomic steps, each to the first pool card declaring its category (no cost, no
    profile); none declares it: the first card that does (an on-demand specialist), else the first card."""
    out = []
    for g in split_atomic(task):
        category = OPS[task.nodes[min(g)].op].category
        declared = [c for c in cards if not c.created and category in c.declares]
        # a drawn pool (pools.py) may have no card declaring it: then the on-demand specialist, or the
        # first card
        fallback = [c for c in cards if category in c.declares] or list(cards)
        out.append(Subtask(g, (declared or fallback)[0].name))
    return out


def single_plan(task: BraidTask, agent: str) -> list[Subtask]:
    """One agent runs the whole task in one call."""
    return [Subtask(frozenset(n.index for n in task.nodes), agent)]


def plan_cost(task: BraidTask, plan: Sequence[Subtask], cards: Sequence[AgentCard], rel: Reliability,
              w: Weights) -> float:
    """The summed cost of a plan (eq. C over its subtasks)."""
    by_name = {c.name: c for c in cards}
    return sum(cost(task, s.nodes, by_name[s.agent], rel, w) for s in plan)
