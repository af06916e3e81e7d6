"""InFlowOp's agent pool at the CPU scale: scripted agents, their cards, and their profiles.

Every choice here is ours [I]; the paper's agents are LLM backbones with role prompts.

- A **card** is what an agent declares: the operation categories of `envs.testbeds.braid` it says it
  handles, and its latency (a fixed cost per call plus a cost per operation in the call). Cards
  can overclaim: `quick` and `generalist` declare every category, `scribe` declares `cipher`.
- The **true error rates** (per category) are hidden from the optimizer: they drive the scripted
  agent's mistakes only. An error is a malformed value with probability `garbage` (a contract
  catches it), else a plausible wrong value (`braid.perturb`: a contract may miss it).
- **No single agent covers every category well**: each specialist errs 3-4% in its own category
  and 20-45% elsewhere; the generalist errs 10% (25% on cipher) and is slow; nobody is good at
  `cipher`, which is what an on-demand specialist (`created`, charged the creation cost) is for.
- **Platform facts** the optimizer is told: a value handed from one call to another arrives
  intact with probability `HANDOFF` (otherwise silently perturbed), and every operation after
  the first in one call succeeds with an extra factor `COMPOSITION` (a longer call is harder).
- A **profile** holds, per (agent, category), how many of the agent's own past runs passed their
  run-time contracts (`successes`) out of how many it made (`runs`): built from the agent's own
  runs as the contracts judge them, never from the ground truth. Reliability is the Beta-posterior
  mean with the card as prior (eq. R below).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field

from envs.testbeds.braid import CATEGORIES, OPS, Value, apply_op, perturb, read, render

HANDOFF = 0.97  # a value crossing a call boundary arrives intact with this probability [I]
COMPOSITION = 0.98  # each operation after the first in one call succeeds with this extra factor [I]


@dataclass(frozen=True)
class AgentCard:
    """What an agent declares: capabilities (categories) and latency; `created`: made on demand."""

    name: str
    declares: frozenset[str]
    call_latency: float  # seconds per call (fixed overhead) [I]
    op_latency: float  # seconds per operation in the call [I]
    created: bool = False  # an on-demand specialist: its creation is charged (gamma, creation_latency)
    creation_latency: float = 0.0  # seconds to create it, paid at every use (it is not kept)


@dataclass(frozen=True)
class ScriptedAgent:
    """A card and the hidden error rates behind it."""

    card: AgentCard
    error: dict[str, float]  # category -> probability that one operation's output is wrong (hidden)
    garbage: float = 0.5  # share of errors that are malformed values (the rest are plausible)
    composition: float = COMPOSITION  # the platform's extra factor per operation after the first in a call

    @property
    def name(self) -> str:
        return self.card.name

    def attempt(self, op: str, k: int, inputs: Sequence[Value], position: int, rng: random.Random) -> Value:
        """The agent's output for one operation, the `position`-th (0-based) of its call: right with
        probability (1 - error) * composition^[position > 0], else malformed (share `garbage`) or
        a plausible wrong value. A malformed input gives a malformed output."""
        right = apply_op(op, k, inputs)
        if right is None:
            return None
        p_right = (1.0 - self.error[OPS[op].category]) * (self.composition if position > 0 else 1.0)
        if rng.random() < p_right:
            return right
        return None if rng.random() < self.garbage else perturb(right, rng)


def _errors(own: dict[str, float], rest: float) -> dict[str, float]:
    return {c: own.get(c, rest) for c in CATEGORIES}


POOL: tuple[ScriptedAgent, ...] = (
    ScriptedAgent(AgentCard("lister", frozenset({"list"}), 1.0, 0.2),
                  _errors({"list": 0.03, "num": 0.25}, 0.40)),
    ScriptedAgent(AgentCard("numeric", frozenset({"num"}), 1.0, 0.2),
                  _errors({"num": 0.03, "list": 0.20}, 0.40)),
    ScriptedAgent(AgentCard("scribe", frozenset({"text", "cipher"}), 1.0, 0.3),
                  _errors({"text": 0.04, "cipher": 0.22, "num": 0.30}, 0.35)),
    ScriptedAgent(AgentCard("generalist", frozenset(CATEGORIES), 2.5, 0.5), _errors({"cipher": 0.25}, 0.10)),
    ScriptedAgent(AgentCard("quick", frozenset(CATEGORIES), 0.4, 0.1), _errors({"cipher": 0.35}, 0.18)),
)
# on-demand specialists, one per category: good at it, created at every use (gamma, 2 s) [I]
CREATED: tuple[ScriptedAgent, ...] = tuple(
    ScriptedAgent(AgentCard(f"new-{c}", frozenset({c}), 1.5, 0.3, created=True, creation_latency=2.0),
                  _errors({c: 0.05}, 0.50))
    for c in CATEGORIES)


def agents_by_name(with_created: bool = True) -> dict[str, ScriptedAgent]:
    """The pool (and the on-demand specialists), by name."""
    return {a.name: a for a in (*POOL, *(CREATED if with_created else ()))}


# ---- policy agents: a model of the suite behind a card (the model side is policy_agents.py) ----------
# a policy agent's card: simulated seconds, as a specialist's [I]
MODEL_CALL_LATENCY, MODEL_OP_LATENCY = 1.0, 0.2


@dataclass(frozen=True)
class ModelAgent:
    """A policy of the suite as a pool agent: a LoRA adapter warm-started on `trained_on`'s
    operation categories. Its card declares exactly those; its competence is measured
    (`policy_agents.measure_competence`), never declared. It has no hidden error rate: it computes
    an operation by generating the output text (`prompt`), which `read_output` parses and the
    executor's contracts judge like any agent's value (unreadable text is a malformed value)."""

    card: AgentCard
    adapter: str  # the peft adapter's name in the run's model
    trained_on: tuple[str, ...]

    @property
    def name(self) -> str:
        return self.card.name


def model_agent(categories: Sequence[str]) -> ModelAgent:
    """The policy agent warm-started on `categories` (named `lora-<c1>+<c2>`).

    >>> model_agent(["text", "cipher"]).card.declares == {"text", "cipher"}, model_agent(["num"]).name
    (True, 'lora-num')
    """
    unknown = sorted(set(categories) - set(CATEGORIES))
    if unknown or not categories:
        raise ValueError(f"a policy agent is trained on categories of {list(CATEGORIES)}; "
                         f"got {list(categories)}")
    name = "lora-" + "+".join(categories)
    return ModelAgent(AgentCard(name, frozenset(categories), MODEL_CALL_LATENCY, MODEL_OP_LATENCY), name,
                      tuple(categories))


@dataclass(frozen=True)
class Ask:
    """One operation a policy agent is asked to compute: the executor yields it, a driver answers
    it with the agent's generated text (batched over many runs: `execute.drive`)."""

    agent: str
    adapter: str
    prompt: str


def prompt(op: str, k: int, inputs: Sequence[Value]) -> str:
    """The operation as braid's episode shows one node (without the task header).

    >>> prompt("sort", 0, [[5, 1, 3]]), prompt("add", 4, [17])
    ('OP sort | 5 1 3\\nOUT:', 'OP add 4 | 17\\nOUT:')
    """
    head = f"{op} {k}" if k else op
    return f"OP {head} | {' | '.join(render(x) for x in inputs)}\nOUT:"


def read_output(text: str, op: str) -> Value:
    """A policy agent's generated text as a value of `op`'s output type; None (malformed) when it
    does not parse (never raises).

    >>> read_output(" 1 3 5", "sort"), read_output("one", "sum"), read_output("7", "max")
    ([1, 3, 5], None, 7)
    """
    return read(text, OPS[op].output)


@dataclass
class Profile:
    """Per (agent, category): [successes, runs] of the agent's own past runs, as the contracts judged them."""

    counts: dict[tuple[str, str], list[int]] = field(default_factory=dict)

    def record(self, agent: str, categories: Sequence[str], passed: bool) -> None:
        """One run of `agent` on a subtask touching `categories` (each counted once): passed its
        contracts or not."""
        for c in sorted(set(categories)):
            entry = self.counts.setdefault((agent, c), [0, 0])
            entry[0] += int(passed)
            entry[1] += 1

    def get(self, agent: str, category: str) -> tuple[int, int]:
        s, n = self.counts.get((agent, category), (0, 0))
        return s, n


@dataclass(frozen=True)
class Prior:
    """The card as a prior on reliability: declared categories `declared`, others `undeclared`, worth
    `strength` runs."""

    declared: float = 0.9
    undeclared: float = 0.5
    strength: float = 4.0


OPTIMISM_CAP = 0.999  # an optimistic reliability never reaches 1 (its -log stays a finite cost) [I]


def reliability(card: AgentCard, category: str, profile: Profile | None, prior: Prior,
                explore: float = 0.0) -> float:
    """The estimated probability that `card`'s agent gets one `category` operation right (eq. R, ours [I]):

        r(a, c) = (s_{a,c} + m * pi_{a,c}) / (n_{a,c} + m)

    pi = `prior.declared` when the card declares c, else `prior.undeclared`; m = `prior.strength`;
    s, n = the profile's successes and runs (none without a profile: r = pi).

    >>> card = AgentCard("x", frozenset({"list"}), 1.0, 0.1)
    >>> reliability(card, "list", None, Prior()), reliability(card, "num", None, Prior())
    (0.9, 0.5)
    >>> p = Profile(); p.record("x", ["num"], True); p.record("x", ["num"], False)
    >>> reliability(card, "num", p, Prior())  # (1 + 4 * 0.5) / (2 + 4)
    0.5

    **Exploration** (`explore` = kappa > 0; ours [I]): the planner reads an optimistic reliability,
    the posterior mean plus kappa posterior standard deviations of a Beta with n + m pseudo-runs,

        r+(a, c) = min(r + kappa * sqrt(r * (1 - r) / (n + m + 1)), OPTIMISM_CAP)

    so an agent with few own runs of c looks better than its mean and gets tried; the bonus shrinks
    as its runs accumulate (no lock-in on whoever won a category first). kappa = 0: r itself.

    >>> round(reliability(card, "list", None, Prior(), explore=1.0), 6)  # 0.9 + 0.134 > cap
    0.999
    >>> p = Profile(); p.counts[("x", "num")] = [8, 10]
    >>> round(reliability(card, "num", p, Prior(), explore=1.0), 6)  # 10/14 + sqrt(10/14 * 4/14 / 15)
    0.830928
    """
    pi = prior.declared if category in card.declares else prior.undeclared
    s, n = profile.get(card.name, category) if profile is not None else (0, 0)
    r = (s + prior.strength * pi) / (n + prior.strength)
    if explore <= 0:
        return r
    return min(r + explore * math.sqrt(r * (1.0 - r) / (n + prior.strength + 1.0)), OPTIMISM_CAP)
