"""`toolplan`: a planner splits a question into K sub-queries, K workers each call one tool, the
planner composes the final answer (the CPU-scale planner-worker system of SHARP, arXiv 2602.08335).

A task asks for K facts, each an (attribute, entity) pair with a hidden value, e.g.
`Q: pop k ; area m` (entities and values are one-letter codes, so each is one token and the
planner's copying stays within reach of a tiny model). One episode is K + 2 turns, all of one shared
model told apart by role:

1. planner: `Q: pop k ; area m\\nPLAN:` -> ` pop area`: the attribute of each sub-query, in
   order; sub-query m is (planned attribute m, entity m of the question).
2. worker m (a fresh context each, m = 1..K): `SUB: pop k\\nTOOL:` -> ` census`. The tool runs:
   - the right tool of the attribute returns the value (`Q`);
   - the attribute's *distractor* tool returns a plausible wrong value (`F`): it looks valid;
   - any other tool returns `ERR`; a name that is not a tool is an invalid action (`BAD`).
3. planner (its context continues): `R: Q ERR\\nANS:` -> ` Q ERR` (the composed answer, one slot
   per sub-query).

Reward (the outcome R^b): 1 if every slot of the answer is right, else 0. A malformed plan ends
the episode with reward 0; a malformed answer scores 0; both emit `invalid_action`.

Counterfactual replay (SHARP's coalition value v(S)): `replay(record, masked)` re-scores the
episode with the outputs of the masked workers replaced by the neutral placeholder `?`, without
sampling anything: the planner's composition is replayed deterministically (the answer slot of a
masked worker becomes the placeholder: the planner's slot j is composed from worker j's result
alone, which is how the observation is laid out and how the demonstrator composes). The replay
scores the answer with a soft match, v = 1/2 * (share of right slots) + 1/2 * 1[all slots right],
so that a lone worker's contribution is visible (its slot) and so is the workers' joint success
(the exact match), the part where leave-one-out and Shapley credit differ.

**Provenance events** (#46; IAPO's influence graph, `replications/iapo/graph.py`, as `chain_tasks`'s).
The turns of an episode are the plan (turn 0), worker m's call (turn m + 1) and the answer (turn N + 1,
N workers). "Used" follows what each turn's observation is built from: a worker acts on the sub-query
the plan gave it; the answer is composed from the workers' results (slot j from the results of the
workers of fact j: here worker j). Each turn j gets `Event("provenance", j, {"source": i, "kind": k})`:

- worker m from the plan: `input` (it acts on the sub-query the plan supplied); `failed_utilization`
  instead when the planned sub-query is not one of the question's facts, so that every tool errs (the
  plan's mistake is carried on);
- the answer from worker m, when the answer is well-formed (K slots): `failed_utilization` when the
  worker's result carries no value (`ERR`, `BAD`: the answer copies the invalid output or falls back
  because of it), `success_utilization` when the answer's slot is the worker's result (the planner
  combined it), no edge otherwise (the planner wrote something else). A distractor's value looks
  valid and counts as used: the events report what the players could see, never the hidden truth.

The plan itself uses no earlier turn (the question is the task, as `chain_tasks`' to-do line). The
events change no reward, observation, split or record.

The scripted demonstrator is deliberately imperfect (it calls the distractor with probability
`demo_distractor` and a wrong tool with `demo_wrong`), so the SFT warm start leaves a tool-choice
error for RL to remove; with K workers, broadcast credit sees each worker's choice through an
outcome that also needs the K - 1 others right.

The planner-and-workers frame (`PlannerWorkersConfig`, `PlannerWorkersEpisode`, `PlannerWorkersEnv`,
`match`, `Replay`: the phases, the outcome's metrics, the settings' checks) lives here and is shared
with `toolhops`, its harder variant.
"""

from __future__ import annotations

import random
from abc import abstractmethod
from dataclasses import dataclass
from typing import Any

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

PLACEHOLDER = "?"  # the neutral placeholder of a masked agent's output
NOT_FOUND = ("ERR", "BAD")  # tool results that carry no value
ATTRIBUTES = ("pop", "area", "year", "temp")
RIGHT_TOOL = {"pop": "census", "area": "atlas", "year": "archive", "temp": "weather"}
DISTRACTOR_TOOL = {"pop": "almanac", "area": "almanac", "year": "wiki", "temp": "wiki"}
TOOLS = ("census", "atlas", "archive", "weather", "almanac", "wiki")
ENTITIES = "abcdefghijklmnopqrstuvwxyz"
VALUES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class PlannerWorkersConfig(EnvConfig):
    """The settings of every planner-and-workers environment (`toolplan`, `toolhops`)."""

    k: int = 3  # facts (sub-queries) per question, 2..5
    demo_distractor: float = 0.25  # the demonstrator calls the distractor tool with this probability
    demo_wrong: float = 0.10  # ... and another tool (returns ERR) with this probability


@dataclass
class ToolPlanConfig(PlannerWorkersConfig):
    # k sub-queries = k workers; the demonstrator's error rates as in PlannerWorkersConfig
    name: str = "toolplan"


def match(answer: list[str], truth: list[str]) -> float:
    """Soft match of a composed answer: 1/2 share of right slots + 1/2 exact match (v of a coalition).

    >>> match(["A", "B"], ["A", "C"]), match(["A", "C"], ["A", "C"]), match([], ["A", "C"])
    (0.25, 1.0, 0.0)
    """
    right = [a == t for a, t in zip(answer, truth, strict=False)]
    share = sum(right) / len(truth)
    exact = float(len(answer) == len(truth) and all(right))
    return 0.5 * share + 0.5 * exact


@dataclass
class Replay:
    """A counterfactual replay of one episode: what the planner saw, what it answered, the score."""

    results: list[str]  # each worker's result as replayed (masked workers: the placeholder)
    answer: list[str]  # the replayed composition, one slot per fact
    value: float  # match(answer, truth): v(S) for S = the unmasked workers


def replay(record: dict[str, Any], masked: frozenset[int] | set[int]) -> Replay:
    """Re-score a finished episode with workers `masked` (0-based indices) replaced by the placeholder.

    `record` is `Episode.info["record"]` of a `toolplan` episode. Deterministic, no model call.
    """
    k = len(record["truth"])
    results = [PLACEHOLDER if m in masked else r for m, r in enumerate(record["results"])]
    answer = list(record["answer"]) if record["answer"] is not None else [PLACEHOLDER] * k
    answer = [PLACEHOLDER if j in masked else a for j, a in enumerate(answer)]
    return Replay(results, answer, match(answer, record["truth"]))


def _split(text: str) -> list[str]:
    return text.split()


class PlannerWorkersEpisode(EpisodeState):
    """The phases every planner-and-workers episode goes through, and its outcome.

    plan (the planner's one action) -> work (one tool call per worker) -> answer (the planner composes
    `k` slots, one per fact) -> the end: reward 1 iff every slot equals `truth`. Subclasses parse the
    plan, run the tools (`_plan`, `_work`, each call ending in `_called`), write the observations
    (`_worker_obs`, `_compose_obs`) and add their own metrics and counterfactual record to the
    outcome's info (`_more_info`).
    """

    def __init__(self, truth: list[str]):
        self.truth = truth  # the true value of each fact slot
        self.k = len(truth)
        self.phase = "plan"
        self.results: list[str] = []  # each worker's tool result, in order
        # each worker's call: value | distractor | error | invalid (toolhops: blocked too)
        self.kinds: list[str] = []

    def step(self, action: str) -> StepResult:
        if self.phase == "plan":
            return self._plan(action)
        if self.phase == "work":
            return self._work(action)
        return self._answer(action)

    @abstractmethod
    def _plan(self, action: str) -> StepResult:
        """Parse the plan; a malformed one ends the episode (`_end(None, ...)`)."""

    @abstractmethod
    def _work(self, action: str) -> StepResult:
        """Run the acting worker's tool call and return `_called(...)`."""

    @abstractmethod
    def _worker_obs(self) -> Observation:
        """The next worker's sub-query (a fresh context)."""

    @abstractmethod
    def _compose_obs(self) -> Observation:
        """The planner's view of the results, asking for the answer."""

    def _called(self, result: str, kind: str, events: list[Event], workers: int) -> StepResult:
        """Record one worker's call; the next worker acts, or after the last of `workers` the planner
        answers."""
        events = [*events, *self._worker_provenance(len(self.results), kind)]
        self.results.append(result)
        self.kinds.append(kind)
        if len(self.results) < workers:
            return StepResult(self._worker_obs(), events=events)
        self.phase = "answer"
        return StepResult(self._compose_obs(), events=events)

    @abstractmethod
    def _more_info(self, answer: list[str] | None) -> dict[str, Any]:
        """The environment's own entries of the outcome's info, after the shared metrics (`record` last)."""

    def _answer(self, action: str) -> StepResult:
        answer, events = _split(action), []
        if len(answer) != self.k:
            why = f"expected {self.k} answers separated by spaces"
            events.append(Event("invalid_action", 0, {"role": "planner", "why": why}))
            answer = [PLACEHOLDER] * self.k
        else:
            events += self._answer_provenance(answer)
        return self._end(answer, events, plan_ok=True)

    # ---- provenance events (IAPO's influence graph; the module docstring) -------------------------
    # turn indices in Episode.turns: the plan is turn 0, worker m's call turn m + 1
    def _answerable(self, m: int) -> bool:
        """Whether the plan gave worker m a query that some tool answers."""
        return True

    def _upstream(self, m: int) -> int | None:
        """The worker whose result worker m's query is built from (None: the question alone)."""
        return None

    def _slot_of(self, m: int) -> int:
        """The answer's fact slot that worker m's result is for."""
        return m

    def _worker_provenance(self, m: int, kind: str) -> list[Event]:
        """Worker m's sources: the plan, and the upstream worker whose result is its query's entity
        (`success_utilization` when its own call worked, `failed_utilization` when that result carried
        no entity, no edge when the worker's own tool choice failed on a good query)."""
        events = [Event("provenance", 0, {"source": 0,
                                          "kind": "input" if self._answerable(m) else "failed_utilization"})]
        up = self._upstream(m)
        if up is not None and self.results[up] in NOT_FOUND:
            events.append(Event("provenance", 0, {"source": up + 1, "kind": "failed_utilization"}))
        elif up is not None and kind in ("value", "distractor"):
            events.append(Event("provenance", 0, {"source": up + 1, "kind": "success_utilization"}))
        return events

    def _answer_provenance(self, answer: list[str]) -> list[Event]:
        """The workers a well-formed answer used (the module docstring)."""
        events = []
        for m, result in enumerate(self.results):
            if result in NOT_FOUND:
                events.append(Event("provenance", 0, {"source": m + 1, "kind": "failed_utilization"}))
            elif answer[self._slot_of(m)] == result:
                events.append(Event("provenance", 0, {"source": m + 1, "kind": "success_utilization"}))
        return events

    def _end(self, answer: list[str] | None, events: list[Event], plan_ok: bool) -> StepResult:
        slots = [a == v for a, v in zip(answer, self.truth, strict=True)] if answer else [False] * self.k
        exact, kinds = all(slots), self.kinds
        calls = max(len(kinds), 1)
        info = {
            "exact_match": exact,
            "slot_accuracy": sum(slots) / self.k,
            "match": match(answer or [], self.truth),
            "plan_ok": plan_ok,
            "distractor_rate": kinds.count("distractor") / calls,
            "tool_error_rate": (kinds.count("error") + kinds.count("invalid")) / calls,
            "right_tool_rate": kinds.count("value") / calls,
            **self._more_info(answer),
        }
        return StepResult(None, reward=float(exact), events=events, success=exact, info=info)


class ToolPlanEpisode(PlannerWorkersEpisode):
    def __init__(self, task: dict[str, Any], cfg: ToolPlanConfig, rng: random.Random):
        super().__init__(list(task["values"]))
        self.queries: list[tuple[str, str]] = [(a, e) for a, e in task["queries"]]
        self.decoys: list[str] = list(task["decoys"])
        self.cfg, self.rng = cfg, rng
        self.subqueries: list[tuple[str, str]] = []

    # ---- text ---------------------------------------------------------------------------
    def question(self) -> str:
        return " ; ".join(f"{a} {e}" for a, e in self.queries)

    def start(self) -> Observation:
        return Observation("planner", f"Q: {self.question()}\nPLAN:")

    def _worker_obs(self) -> Observation:
        attr, entity = self.subqueries[len(self.results)]
        return Observation("worker", f"SUB: {attr} {entity}\nTOOL:", new_context=True)

    def _compose_obs(self) -> Observation:
        return Observation("planner", f"R: {' '.join(self.results)}\nANS:")

    # ---- the demonstrator -----------------------------------------------------------------
    def expert_action(self) -> str:
        if self.phase == "plan":
            return " " + " ".join(a for a, _ in self.queries)
        if self.phase == "work":
            attr = self.subqueries[len(self.results)][0]
            u = self.rng.random()
            if u < self.cfg.demo_distractor:
                return " " + DISTRACTOR_TOOL[attr]
            if u < self.cfg.demo_distractor + self.cfg.demo_wrong:
                wrong = [t for t in TOOLS if t not in (RIGHT_TOOL[attr], DISTRACTOR_TOOL[attr])]
                return " " + self.rng.choice(wrong)
            return " " + RIGHT_TOOL[attr]
        return " " + " ".join(self.results)  # a copy of the results line: ERR/BAD slots are simply wrong

    # ---- the rules ------------------------------------------------------------------------
    def _plan(self, action: str) -> StepResult:
        items = _split(action)
        if len(items) != self.k or any(a not in ATTRIBUTES for a in items):
            why = (f"expected {self.k} attributes separated by spaces, one per sub-query "
                   f"(attributes: {', '.join(ATTRIBUTES)})")
            return self._end(None, [Event("invalid_action", 0, {"role": "planner", "why": why})],
                             plan_ok=False)
        self.subqueries = [(a, e) for a, (_, e) in zip(items, self.queries, strict=True)]
        self.phase = "work"
        return StepResult(self._worker_obs())

    def _work(self, action: str) -> StepResult:
        m = len(self.results)
        sub = self.subqueries[m]
        tool = action.strip()
        events = [Event("tool_call", 0, {"worker": m, "tool": tool, "query": f"{sub[0]} {sub[1]}"})]
        target = (sub[0], sub[1])
        slot = self.queries.index(target) if target in self.queries else None
        if tool not in TOOLS:
            result, kind = "BAD", "invalid"
            why = f"unknown tool {tool!r}; tools: {', '.join(TOOLS)}"
            events.append(Event("invalid_action", 0, {"role": "worker", "worker": m, "why": why}))
        elif slot is not None and tool == RIGHT_TOOL[sub[0]]:
            result, kind = self.truth[slot], "value"
        elif slot is not None and tool == DISTRACTOR_TOOL[sub[0]]:
            result, kind = self.decoys[slot], "distractor"
        else:
            result, kind = "ERR", "error"
        events.append(Event("tool_result", 0, {"worker": m, "result": result, "kind": kind}))
        if kind == "error":
            events.append(Event("error", 0, {"worker": m, "why": f"{tool} cannot answer {sub[0]} {sub[1]}"}))
        return self._called(result, kind, events, self.k)

    def _answerable(self, m: int) -> bool:
        return self.subqueries[m] in self.queries  # else every tool returns ERR (or BAD)

    def _more_info(self, answer: list[str] | None) -> dict[str, Any]:
        # for counterfactual replays (not a metric: evaluation averages numbers only)
        return {"record": {"truth": list(self.truth), "results": list(self.results), "answer": answer,
                           "tool_kinds": list(self.kinds)}}


class PlannerWorkersEnv(Environment):
    """What every planner-and-workers environment shares: the roles, one fact count `k` (the one tier),
    the demonstrator's error rates, and counterfactual replay (a `replay` of its own in each)."""

    roles = ("planner", "worker")
    offers = frozenset({"multi_agent_shared_outcome", "counterfactual_replay",  # envs/api/features.py
                        "provenance_events"})
    stop = ("\n",)
    oracle_settings = {"demo_distractor": 0.0, "demo_wrong": 0.0}

    def __init__(self, cfg: PlannerWorkersConfig):
        if not 2 <= cfg.k <= 5:
            raise ValueError(f"env.k must be in 2..5; got {cfg.k}")
        if not (cfg.demo_distractor >= 0 and cfg.demo_wrong >= 0
                and cfg.demo_distractor + cfg.demo_wrong <= 1):
            raise ValueError("need env.demo_distractor, env.demo_wrong >= 0 with a sum <= 1")
        super().__init__(cfg)
        self.cfg: PlannerWorkersConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return (self.cfg.k,)

    def _main_only(self, variant: str) -> None:
        if variant != "main":
            raise ValueError(f"{self.name} has no episode variant {variant!r}; counterfactuals use "
                             f"{self.name}.replay()")


class ToolPlanEnv(PlannerWorkersEnv):
    name = "toolplan"
    config_class = ToolPlanConfig
    replay = staticmethod(replay)  # counterfactual re-scoring: env.replay(Episode.info["record"], masked)

    def __init__(self, cfg: ToolPlanConfig):
        super().__init__(cfg)
        self.cfg: ToolPlanConfig = cfg

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        queries: list[tuple[str, str]] = []
        while len(queries) < tier:
            q = (rng.choice(ATTRIBUTES), rng.choice(ENTITIES))
            if q not in queries:
                queries.append(q)
        values = [rng.choice(VALUES) for _ in queries]
        decoys = [rng.choice([x for x in VALUES if x != v]) for v in values]
        return {"queries": queries, "values": values, "decoys": decoys}

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        self._main_only(variant)
        return ToolPlanEpisode(task, self.cfg, rng)

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """Planner: k attributes, each uniform; worker: a tool, uniform; answer: k value letters, each
        uniform."""
        if obs.role == "worker":
            return " " + rng.choice(TOOLS)
        return " " + " ".join(rng.choices(ATTRIBUTES if obs.text.endswith("PLAN:") else VALUES, k=self.cfg.k))
