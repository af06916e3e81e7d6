"""Running a plan: contract checks at run time, fault classification, in-flow repair with a cache.

Every choice here is ours [I] (the paper describes repair in words only).

**Execution.** Subtasks run one at a time in plan order (latency adds up: one coordinator). A
subtask's inputs from other subtasks cross a call boundary (a *handoff*: intact with probability
`agents.HANDOFF`). The coordinator checks, at run time and without the right answers,
- the **input contract** of every node whose input comes from outside the subtask, on the value
  as it arrived (`braid.input_contract`);
- the **output contract** of every node whose value leaves the subtask (consumed elsewhere, or a
  sink): in full when the coordinator knows all the node's inputs (they came from outside the
  call), else its type only (the inside of a merged call is not observed: the price of merging).

**Faults.** A broken output contract is a fault of the subtask itself; a broken input contract is
blamed on the subtask that produced the input (local fault localization: its direct producer). A
fault of subtask S run by agent a is classified as
- a **decomposition fault** when S has several steps and a's profile rates it competent at every
  one of them (reliability >= `tau` for each category): the agent is fit, the granularity is not;
- an **assignment fault** otherwise (an atomic subtask is always one).

**Repair** (`repair="local"`) re-assigns first, then re-decomposes: an assignment fault of S
re-assigns S to the cheapest agent not yet tried on it (eq. C); a decomposition fault, or a second
fault of a merged S, splits S into atomic steps, each to its cheapest agent. Only S (or its
pieces) and the subtasks downstream of it that already ran are re-run; every other finished
subtask keeps its cached outputs. `repair="rerun"` re-runs the whole plan from scratch on any
fault (the paper's re-run-everything baseline); `repair="none"` keeps going with what it has. At
most `max_repairs` repairs (or re-runs) per task; after that the run goes on without repair.

**Policy agents** (`agents.ModelAgent`) compute an operation by generating text: the run is a
generator that yields an `Ask` for each such operation and resumes with the text. `drive` runs many
tasks' runs side by side and answers the pending asks of all of them with one `answer` call per
round (one batched generate: `policy_agents.Answerer`); a run with scripted agents only never
yields, and `Executor.run` is exactly the old one-task loop.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from envs.testbeds.braid import OPS, BraidTask, Value, input_contract, is_type, output_contract, perturb
from replications.inflowop.agents import (
    HANDOFF,
    AgentCard,
    Ask,
    ModelAgent,
    Profile,
    ScriptedAgent,
    prompt,
    read_output,
)
from replications.inflowop.plan import Reliability, Subtask, Weights, best_agent, latency, order

RepairMode = Literal["local", "rerun", "none"]
FaultKind = Literal["assignment", "decomposition"]
Agent = ScriptedAgent | ModelAgent
Answer = Callable[[list[Ask]], list[str]]  # a batch of policy agents' operations -> their generated texts


@dataclass
class Trace:
    """What one run of a plan did and cost."""

    values: dict[int, Value] = field(default_factory=dict)  # the final value of every node that ran
    latency: float = 0.0  # seconds, every call (first runs and repairs)
    repair_latency: float = 0.0  # seconds spent on repair calls (re-assigned, re-decomposed, re-run)
    calls: int = 0
    repair_calls: int = 0
    violations: int = 0  # broken contracts seen (repaired or not)
    faults: Counter[str] = field(default_factory=Counter)  # assignment | decomposition
    executions: Counter[int] = field(default_factory=Counter)  # node -> how many calls computed it
    log: list[str] = field(default_factory=list)  # one line per call and repair, for tests and debugging
    plan: list[Subtask] = field(default_factory=list)  # the plan as it finished (after repairs)


def classify(subtask: Subtask, card: AgentCard, task: BraidTask, rel: Reliability, tau: float) -> FaultKind:
    """Decomposition fault when a multi-step subtask's agent is rated competent (>= tau) at every step,
    else assignment.

    >>> from replications.inflowop.agents import AgentCard
    >>> from envs.testbeds.braid import BraidTask, Node
    >>> t = BraidTask(0, ([1, 2],), (Node(0, "sort", 0, ("x0",)), Node(1, "sum", 0, (0,))))
    >>> card = AgentCard("x", frozenset({"list"}), 1.0, 0.1)
    >>> classify(Subtask(frozenset({0, 1}), "x"), card, t, lambda c, cat: 0.95, 0.9)
    'decomposition'
    >>> classify(Subtask(frozenset({0}), "x"), card, t, lambda c, cat: 0.95, 0.9)
    'assignment'
    >>> classify(Subtask(frozenset({0, 1}), "x"), card, t, lambda c, cat: 0.5, 0.9)
    'assignment'
    """
    if len(subtask.nodes) == 1:
        return "assignment"
    fit = all(rel(card, OPS[task.nodes[v].op].category) >= tau for v in subtask.nodes)
    return "decomposition" if fit else "assignment"


class Executor:
    """Runs one task's plan with the given agents, contract checks and repair policy."""

    def __init__(self, task: BraidTask, agents: dict[str, Agent], cards: Sequence[AgentCard],
                 rel: Reliability, w: Weights, rng: random.Random, repair: RepairMode = "local",
                 max_repairs: int = 4, tau: float = 0.85, profile: Profile | None = None,
                 handoff: float | None = None):
        self.task, self.agents, self.cards, self.rel, self.w = task, agents, list(cards), rel, w
        # the platform's: a value crossing a call boundary arrives intact with this probability
        self.handoff = HANDOFF if handoff is None else handoff
        (self.rng, self.repair, self.max_repairs, self.tau,
         self.profile) = rng, repair, max_repairs, tau, profile

    # ---- one call -------------------------------------------------------------------------------
    def _call(self, s: Subtask, done: dict[Subtask, dict[int, Value]], trace: Trace, is_repair: bool,
              may_repair: bool) -> Generator[Ask, str, tuple[dict[int, Value], Subtask | None, bool]]:
        """Run subtask s: (its exit values, the producer blamed for a broken input contract, whether
        its output contracts hold). A broken input contract stops the call before it runs when
        `may_repair` (the producer is to be repaired), else the call runs on what arrived."""
        task, agent = self.task, self.agents[s.agent]
        produced = {v: val for outs in done.values() for v, val in outs.items()}
        owner = {v: p for p, outs in done.items() for v in outs}
        arrived: dict[int, Value] = {}
        for v in sorted(s.nodes):
            for a in task.nodes[v].args:
                if isinstance(a, int) and a not in s.nodes and a not in arrived:
                    val = produced.get(a)
                    arrived[a] = perturb(val, self.rng) if self.rng.random() > self.handoff else val
        for v in sorted(s.nodes):  # input contracts on what arrived, before the call
            node = task.nodes[v]
            external = [a for a in node.args if isinstance(a, int) and a not in s.nodes]
            if external and not input_contract(node.op, node.k, task.inputs_of(node, arrived)):
                trace.violations += 1
                malformed = [a for a in external if not is_type(arrived[a], OPS[task.nodes[a].op].output)]
                blamed = owner[(malformed or external)[0]]
                trace.log.append(f"input contract of node {v} broken: blame {blamed}")
                if may_repair:
                    return {}, blamed, False
                break
        values: dict[int, Value] = dict(arrived)
        for position, v in enumerate(sorted(s.nodes)):
            node = task.nodes[v]
            inputs = task.inputs_of(node, values)
            if isinstance(agent, ModelAgent):  # inside a merged call the model reads its own earlier outputs
                text = yield Ask(agent.name, agent.adapter, prompt(node.op, node.k, inputs))
                values[v] = read_output(text, node.op)
            else:
                values[v] = agent.attempt(node.op, node.k, inputs, position, self.rng)
            trace.executions[v] += 1
        seconds = latency(agent.card, len(s.nodes))
        trace.calls += 1
        trace.latency += seconds
        if is_repair:
            trace.repair_calls += 1
            trace.repair_latency += seconds
        exits = [v for v in sorted(s.nodes)
                 if not task.consumers(v) or any(c not in s.nodes for c in task.consumers(v))]
        ok = True
        for v in exits:
            node = task.nodes[v]
            # every input known to the coordinator
            seen = all(isinstance(a, str) or a not in s.nodes for a in node.args)
            inputs = task.inputs_of(node, values)
            ok &= (output_contract(node.op, node.k, inputs, values[v]) if seen
                   else is_type(values[v], OPS[node.op].output))
        if self.profile is not None:
            self.profile.record(s.agent, [OPS[task.nodes[v].op].category for v in s.nodes], ok)
        trace.log.append(f"call {s} {'ok' if ok else 'output contract broken'}"
                         f"{' (repair)' if is_repair else ''}")
        if not ok:
            trace.violations += 1
        return {v: values[v] for v in exits}, None, ok

    # ---- repair ---------------------------------------------------------------------------------
    def _downstream(self, plan: Sequence[Subtask], s: Subtask) -> set[Subtask]:
        """Subtasks that read s's outputs, directly or through others."""
        reached = set(s.nodes)
        for n in self.task.nodes:
            if any(isinstance(a, int) and a in reached for a in n.args):
                reached.add(n.index)
        return {t for t in plan if t != s and t.nodes & reached}

    def _repair(self, plan: list[Subtask], s: Subtask, tried: dict[frozenset[int], set[str]],
                faults: Counter[frozenset[int]], trace: Trace) -> list[Subtask]:
        """Re-assign s (assignment fault, first fault of a merged s) or re-decompose it; the new plan."""
        card = next(c for c in self.cards if c.name == s.agent)
        kind = classify(s, card, self.task, self.rel, self.tau)
        trace.faults[kind] += 1
        faults[s.nodes] += 1
        tried.setdefault(s.nodes, set()).add(s.agent)
        rest = [t for t in plan if t != s]
        left = [c for c in self.cards if c.name not in tried[s.nodes]]
        if kind == "assignment" and (len(s.nodes) == 1 or faults[s.nodes] == 1) and left:
            agent, _ = best_agent(self.task, s.nodes, self.cards, self.rel, self.w, exclude=tried[s.nodes])
            trace.log.append(f"repair {s}: {kind} fault, re-assign to {agent}")
            return order(self.task, [*rest, Subtask(s.nodes, agent)])
        if len(s.nodes) == 1:  # an atomic subtask every agent failed: try them again from the cheapest
            tried[s.nodes] = set()
            agent, _ = best_agent(self.task, s.nodes, self.cards, self.rel, self.w, exclude={s.agent})
            trace.log.append(f"repair {s}: {kind} fault, every agent tried, re-assign to {agent}")
            return order(self.task, [*rest, Subtask(s.nodes, agent)])
        pieces = [Subtask(frozenset({v}), best_agent(self.task, [v], self.cards, self.rel, self.w)[0])
                  for v in sorted(s.nodes)]
        trace.log.append(f"repair {s}: {kind} fault, re-decompose into {pieces}")
        return order(self.task, [*rest, *pieces])

    # ---- the run ----------------------------------------------------------------------------------
    def run(self, plan: Sequence[Subtask], answer: Answer | None = None) -> Trace:
        """Run `plan` to the end, repairing as `repair` says; the trace of what happened. `answer`
        computes policy agents' operations (needed only when the pool has some)."""
        return drive([self.steps(plan)], answer)[0]

    def steps(self, plan: Sequence[Subtask]) -> Generator[Ask, str, Trace]:
        """`run` as a generator: yields each policy agent's operation, returns the trace."""
        trace = Trace()
        plan = list(plan)
        done: dict[Subtask, dict[int, Value]] = {}
        first_pass = set(plan)
        tried: dict[frozenset[int], set[str]] = {}
        faults: Counter[frozenset[int]] = Counter()
        repairs = 0
        i = 0
        while i < len(plan):
            s = plan[i]
            if s in done:
                i += 1
                continue
            is_repair = s not in first_pass
            first_pass.discard(s)
            may_repair = self.repair != "none" and repairs < self.max_repairs
            outs, blamed, ok = yield from self._call(s, done, trace, is_repair, may_repair)
            culprit = blamed if blamed is not None else (None if ok else s)
            if culprit is None or not may_repair:
                done[s] = outs
                i += 1
                continue
            repairs += 1
            if self.repair == "rerun":
                trace.log.append(f"fault at {culprit}: re-run everything")
                done.clear()
                i = 0
                continue
            stale = self._downstream(plan, culprit)
            for t in [culprit, *stale]:
                done.pop(t, None)
            plan = self._repair(plan, culprit, tried, faults, trace)
            i = 0
        trace.values = {v: val for outs in done.values() for v, val in outs.items()}
        trace.plan = plan
        return trace


def drive(runs: Sequence[Generator[Ask, str, Trace]], answer: Answer | None) -> list[Trace]:
    """Run many tasks' runs side by side: advance each to its next policy-agent operation, answer
    all pending operations with one `answer` call (a batch), resume, until every run has finished.
    Runs that never ask (scripted agents only) finish in their first advance, in order."""
    traces: list[Trace | None] = [None] * len(runs)
    pending: dict[int, Ask] = {}

    def advance(i: int, text: str | None) -> None:
        try:
            pending[i] = next(runs[i]) if text is None else runs[i].send(text)
        except StopIteration as stop:
            pending.pop(i, None)
            traces[i] = stop.value

    for i in range(len(runs)):
        advance(i, None)
    while pending:
        if answer is None:
            raise ValueError("the plan gives operations to a policy agent, but no answer function computes "
                             "them")
        ids = sorted(pending)
        texts = answer([pending[i] for i in ids])
        if len(texts) != len(ids):
            raise ValueError(f"answer returned {len(texts)} texts for {len(ids)} operations")
        for i, text in zip(ids, texts, strict=True):
            advance(i, text)
    return [t for t in traces if t is not None]
