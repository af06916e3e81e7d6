"""`toolplan`: a planner splits a question into K sub-queries, K workers each call one tool, the
planner composes the final answer (the CPU-scale planner-worker system of SHARP, arXiv 2602.08335).

A task asks for K facts, each an (attribute, entity) pair with a hidden value, e.g.
`Q: pop k ; area m` (entities and values are one-letter codes, so each is one token and the
planner's copying stays within reach of a tiny model). One episode is K + 2 turns, all of one shared model told apart by role:

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

The scripted demonstrator is deliberately imperfect (it calls the distractor with probability
`demo_distractor` and a wrong tool with `demo_wrong`), so the SFT warm start leaves a tool-choice
error for RL to remove; with K workers, broadcast credit sees each worker's choice through an
outcome that also needs the K - 1 others right.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from common.envs.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from common.episode import Event

PLACEHOLDER = "?"  # the neutral placeholder of a masked agent's output
ATTRIBUTES = ("pop", "area", "year", "temp")
RIGHT_TOOL = {"pop": "census", "area": "atlas", "year": "archive", "temp": "weather"}
DISTRACTOR_TOOL = {"pop": "almanac", "area": "almanac", "year": "wiki", "temp": "wiki"}
TOOLS = ("census", "atlas", "archive", "weather", "almanac", "wiki")
ENTITIES = "abcdefghijklmnopqrstuvwxyz"
VALUES = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"


@dataclass
class ToolPlanConfig(EnvConfig):
    name: str = "toolplan"
    k: int = 3  # sub-queries (= workers) per question, 2..5
    demo_distractor: float = 0.25  # the demonstrator calls the distractor tool with this probability
    demo_wrong: float = 0.10  # ... and a wrong tool (returns ERR) with this probability


def match(answer: list[str], truth: list[str]) -> float:
    """Soft match of a composed answer: 1/2 share of right slots + 1/2 exact match (v of a coalition)."""
    right = [a == t for a, t in zip(answer, truth, strict=False)]
    share = sum(right) / len(truth)
    exact = float(len(answer) == len(truth) and all(right))
    return 0.5 * share + 0.5 * exact


@dataclass
class Replay:
    """A counterfactual replay of one episode: what the planner saw, what it answered, the score."""

    results: list[str]  # the tool results shown to the planner (masked workers: the placeholder)
    answer: list[str]  # the composed answer (masked workers' slots: the placeholder)
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


class ToolPlanEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: ToolPlanConfig, rng: random.Random):
        self.queries: list[tuple[str, str]] = [(a, e) for a, e in task["queries"]]
        self.values: list[str] = list(task["values"])
        self.decoys: list[str] = list(task["decoys"])
        self.cfg, self.rng = cfg, rng
        self.k = len(self.queries)
        self.phase = "plan"
        self.subqueries: list[tuple[str, str]] = []
        self.results: list[str] = []
        self.tools: list[str] = []
        self.events_ok: list[str] = []  # per worker: value | distractor | error | invalid

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
    def step(self, action: str) -> StepResult:
        if self.phase == "plan":
            return self._plan(action)
        if self.phase == "work":
            return self._work(action)
        return self._answer(action)

    def _plan(self, action: str) -> StepResult:
        items = _split(action)
        if len(items) != self.k or any(a not in ATTRIBUTES for a in items):
            why = f"expected {self.k} attributes separated by spaces, one per sub-query (attributes: {', '.join(ATTRIBUTES)})"
            return self._end(None, [Event("invalid_action", 0, {"role": "planner", "why": why})], plan_ok=False)
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
            events.append(Event("invalid_action", 0, {"role": "worker", "worker": m,
                                                      "why": f"unknown tool {tool!r}; tools: {', '.join(TOOLS)}"}))
        elif slot is not None and tool == RIGHT_TOOL[sub[0]]:
            result, kind = self.values[slot], "value"
        elif slot is not None and tool == DISTRACTOR_TOOL[sub[0]]:
            result, kind = self.decoys[slot], "distractor"
        else:
            result, kind = "ERR", "error"
        events.append(Event("tool_result", 0, {"worker": m, "result": result, "kind": kind}))
        if kind == "error":
            events.append(Event("error", 0, {"worker": m, "why": f"{tool} cannot answer {sub[0]} {sub[1]}"}))
        self.results.append(result)
        self.tools.append(kind)
        if len(self.results) < self.k:
            return StepResult(self._worker_obs(), events=events)
        self.phase = "answer"
        return StepResult(self._compose_obs(), events=events)

    def _answer(self, action: str) -> StepResult:
        answer = _split(action)
        events = []
        if len(answer) != self.k or any(not a for a in answer):
            events.append(Event("invalid_action", 0, {"role": "planner", "why": f"expected {self.k} answers separated by spaces"}))
            answer = [PLACEHOLDER] * self.k
        return self._end(answer, events, plan_ok=True)

    def _end(self, answer: list[str] | None, events: list[Event], plan_ok: bool) -> StepResult:
        slots = [a == v for a, v in zip(answer, self.values, strict=True)] if answer else [False] * self.k
        exact = all(slots)
        calls = max(len(self.tools), 1)
        info = {
            "exact_match": exact,
            "slot_accuracy": sum(slots) / self.k,
            "match": match(answer or [], self.values),
            "plan_ok": plan_ok,
            "distractor_rate": self.tools.count("distractor") / calls if self.tools else 0.0,
            "tool_error_rate": (self.tools.count("error") + self.tools.count("invalid")) / calls if self.tools else 0.0,
            "right_tool_rate": self.tools.count("value") / calls if self.tools else 0.0,
            # for counterfactual replays (not a metric: evaluation averages numbers only)
            "record": {"truth": list(self.values), "results": list(self.results), "answer": answer,
                       "tool_kinds": list(self.tools)},
        }
        return StepResult(None, reward=float(exact), events=events, success=exact, info=info)


class ToolPlanEnv(Environment):
    name = "toolplan"
    roles = ("planner", "worker")
    offers = frozenset({"multi_agent_shared_outcome", "counterfactual_replay"})  # common/envs/features.py
    config_class = ToolPlanConfig
    stop = ("\n",)
    replay = staticmethod(replay)  # counterfactual re-scoring: env.replay(Episode.info["record"], masked)

    def __init__(self, cfg: ToolPlanConfig):
        if not 2 <= cfg.k <= 5:
            raise ValueError(f"env.k must be in 2..5; got {cfg.k}")
        if not (cfg.demo_distractor >= 0 and cfg.demo_wrong >= 0 and cfg.demo_distractor + cfg.demo_wrong <= 1):
            raise ValueError("need env.demo_distractor, env.demo_wrong >= 0 with a sum <= 1")
        super().__init__(cfg)
        self.cfg: ToolPlanConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return (self.cfg.k,)

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
        if variant != "main":
            raise ValueError(f"toolplan has no episode variant {variant!r}; counterfactuals use toolplan.replay()")
        return ToolPlanEpisode(task, self.cfg, rng)
