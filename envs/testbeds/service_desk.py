"""`service_desk`: a multi-turn customer-service agent with a growing context (IAPO's CPU scale).

A simulated customer (scripted, seeded by the task) has a hidden intent: a refund of their order to
one of three methods, or a human agent. The agent talks to the customer and to the desk's tools one
action per turn; the whole dialogue so far stays in its context (observations are appended, never
replaced). One episode, the ideal way, at delay D = 2 (each line `> ` ends an observation; the
agent's action follows it):

    tools: ask | lookup | ok | refund <card|cash|credit> <id>, e.g. refund card Q | transfer | end
    user: hello
    > ask
    user: refund to cash please
    > lookup
    tool: order K
    user: it was a gift
    > ok
    user: the box was blue
    > ok
    user: that is all
    > refund cash K
    tool: refunded
    > end                                   (episode over; reward 1)

Each action and its effect:

- `ask`: the customer states the intent (`refund to <method> please` or `i want a human`)
- `lookup`: `tool: order <id>`, the customer's order id, one capital letter (a second lookup returns
  the same id: redundant)
- `ok`: acknowledges what the customer just said (the customer goes on, or says `that is all`)
- `refund <method> <id>`: `tool: refunded` for the customer's order id; `tool: error ...` for another
  id (state unchanged)
- `transfer`: hands the customer to a human: the episode ends
- `end`: closes the conversation: the episode ends

**The trap.** The tool schema prints an example call whose id (drawn per task, a capital letter like a real
one) is not the customer's: using it errors (`tool: error: example id`). Ids are one capital letter so that
each is one token: copying it from D exchanges back is within reach of a tiny model (as `toolplan`'s
one-letter codes); pilots with two-digit ids (two tokens) left the warm start unable to copy them at any D.
**The delay knob D** (the task's tier, D in `delays`, by default {0, 2, 4}): after the first lookup the
customer makes D remarks, each acknowledged by `ok`, before `that is all`; so D exchanges separate the
lookup from the refund that uses its id. A remark not acknowledged is repeated after the next tool reply.

**Reward** (all or nothing, on the final state): 1 when the conversation ended the way the intent
asks (refund: exactly one refund, of the right order, to the right method, then `end`, after the
customer said `that is all`; human: `transfer` with no refund), within a budget of the ideal number
of actions (4 + D for a refund, 2 for a human) + `slack`; else 0. Running out of budget ends the
episode with reward 0 (`out_of_turns`). Text that is none of the actions (an unknown verb, a method
that is not one of the three, an id that is not one capital letter A-Z) is a bad call:
`error: bad call`, an `invalid_action` event, no effect (it counts against the budget).

**Provenance events** (IAPO's influence graph, built deterministically from them by
`replications/iapo/graph.py`): every action j gets `Event("provenance", j, {"source": i, "kind": k})`
for each earlier action i whose output it consumed, with kind `input` (j acts on the intent that the
`ask` i elicited: a refund to the right method, a transfer), `success_utilization` (j uses what i
produced: a refund of the id that lookup i returned first; an `end` that closes after refund i
succeeded) or `failed_utilization` (j falls back because of i's error, or repeats it: the action
right after an errored action i, when it is a lookup or a refund); `source = -1` marks direct user
input (the observation j acts on carries a customer message). An action that errored (a tool error
or a bad call) gets an `error` (or `invalid_action`) event. A `tool_result` event says which action
produced the order id. A redundant lookup produces nothing anyone consumes (no outgoing edge).

**The warm start.** The scripted demonstrator solves every task, except that with probability `demo_trap`
it first tries the schema's example id (a refund before any lookup, which errors; it then looks the id up
and goes on), and with probability `demo_repeat` it looks the order up twice in a row (a redundant
lookup). Both cost one action each; with the default `slack` = 1 both in one episode exhaust the budget.

**Probes** (the `probe` variant; held-out single-turn tool calls, "no harm to basic tool use"): one
turn, the context of a point in an ideal dialogue of the task written out as text (D = 0), and the one
right call to make there: `ask` (first turn), `lookup` (intent known), `refund <m> <id>` (after the
lookup), `transfer` (a human asked for) or `end` (after the refund). Reward 1 for exactly that call.

**The second setting** (`setting: choice`, `service_desk_choice.yaml`, env tag `service_desk-choice`, #39):
an upstream choice among 2 (or `lookups` = 4) lookup tools, decided by one word of the first user line; a
refund that binds the looked-up id and errors when the choice was wrong; entropic acknowledgements
(`service_desk_choice.py`). The settings above (`classic`, the default) and their results are unchanged.

**Defective train tasks** (`env_pool_with_audit`, River's filter; classic; 0 by default): `share_weak`,
`share_reject` and `share_unsolvable` put labelled defects into the train split (`service_desk_audit.py`).

**Splits** (the base's, all generated from `data_seed`, no task in two splits): `train` (RL), `dev`
(pilots: design and tuning, `eval.split=dev`), `heldout` (the test split: the replication's final
evaluation) and `demo` (the warm start's demonstrations, when `demo_size` > 0). Every split mixes
the delays D round-robin (the tier of a task is its D).

Provenance of the tasks: generated by this module from `data_seed` (no external data).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.testbeds.audit_pool import AuditedPool, check_shares
from envs.testbeds.service_desk_audit import DEFECTS, AuditedPlay, with_defect
from envs.testbeds.service_desk_choice import ChoiceEpisode, generate_choice_task, random_choice_action

METHODS = ("card", "cash", "credit")
IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"  # order ids: one capital letter each
REMARKS = ("it was a gift", "the box was blue", "i live far away", "my dog chewed it", "it came late",
           "i ordered two", "the size was wrong", "my sister has one")
DONE_TALKING = "that is all"
PROBES = ("ask", "lookup", "refund", "end")  # refund intent; a human intent probes `transfer`
USER = -1  # the provenance source of direct user input
_ACTION = re.compile(r"^\s*([a-z]+)((?:\s+[A-Za-z0-9]+)*)\s*$")


def schema(trap: str) -> str:
    """The tool schema line, with the trap: an example call whose id is not the customer's."""
    return (f"tools: ask | lookup | ok | refund <card|cash|credit> <id>, e.g. refund card {trap} "
            "| transfer | end")


def ideal_actions(task: dict[str, Any]) -> list[str]:
    """The ideal action sequence of a task (no trap, no repeat)."""
    if task["intent"] == "human":
        return ["ask", "transfer"]
    return ["ask", "lookup", *["ok"] * task["delay"], f"refund {task['method']} {task['order']}", "end"]


@dataclass
class ServiceDeskConfig(EnvConfig):
    name: str = "service_desk"
    # classic: the first testbed (this module's docstring) | choice: an upstream lookup choice, a consumer
    # that errors when it was wrong, entropic acknowledgements (envs/testbeds/service_desk_choice.py, #39)
    setting: str = "classic"
    # D: the tiers; remarks between lookup and refund
    delays: list[int] = field(default_factory=lambda: [0, 2, 4])
    human_rate: float = 0.2  # share of customers who want a human (transfer), not a refund
    slack: int = 1  # actions allowed beyond the ideal number
    demo_trap: float = 0.2  # the demonstrator first tries the schema's example id (errors, then looks up)
    demo_repeat: float = 0.2  # the demonstrator looks the order up twice (a redundant lookup)
    demo_right_tool: float = 0.5  # choice: the demonstrator's lookup tool is the right one (a coin)
    orders: int = 1  # choice: orders per episode, one after the other, each its own lookup choice and refund
    lookups: int = 2  # choice: lookup tools, 2 or 4 (each its deciding word: service_desk_choice.py)
    # classic: shares of defective train tasks (River's filter; service_desk_audit.py), 0 = the default pool
    share_weak: float = 0.0  # the verifier checks only that the conversation was closed
    share_reject: float = 0.0  # the ticket's record is not what the customer asks
    share_unsolvable: float = 0.0  # the records lack the customer's order (or a human agent)
    train_size: int = 2000
    heldout_size: int = 128  # the test split


class ServiceDeskEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: ServiceDeskConfig, rng: random.Random):
        self.task, self.cfg, self.rng = task, cfg, rng
        self.ideal = ideal_actions(task)
        self.budget = len(self.ideal) + cfg.slack
        self.turn = 0  # index of the next action (one role: every action is one turn)
        self.intent_asked: int | None = None  # the ask that elicited the intent
        self.looked_up: int | None = None  # the lookup that first produced the order id
        self.remarks_acked = 0  # remarks the agent acknowledged
        self.talking = False  # a customer remark is waiting for `ok`
        self.refunds: list[tuple[str, str]] = []
        self.refunded_by: int | None = None  # the action whose refund succeeded
        self.errored: int | None = None  # the previous action, if it errored
        self.user_spoke = True  # the observation the next action acts on carries a customer message
        self.trap_uses = 0
        self.lookups = 0
        self.bad_calls = 0
        # the demonstrator's injected errors, drawn once per episode from its own rng
        self.demo_trap = task["intent"] == "refund" and rng.random() < cfg.demo_trap
        self.demo_repeat = task["intent"] == "refund" and rng.random() < cfg.demo_repeat

    # ---- what the agent sees -----------------------------------------------------------------
    def start(self) -> Observation:
        return Observation("agent", f"{schema(self.task['trap'])}\nuser: hello\n> ")

    def _remark(self) -> str:
        """The customer's current line after the lookup: the next remark, or `that is all`."""
        d = self.remarks_acked
        return self.task["remarks"][d] if d < self.task["delay"] else DONE_TALKING

    # ---- the demonstrator ----------------------------------------------------------------------
    def expert_action(self) -> str:
        t = self.task
        if self.intent_asked is None:
            return "ask"
        if t["intent"] == "human":
            return "transfer"
        if self.looked_up is None:
            if self.demo_trap and self.trap_uses == 0:
                return f"refund {t['method']} {t['trap']}"
            return "lookup"
        if self.demo_repeat and self.lookups == 1:
            return "lookup"
        if self.talking:
            return "ok"
        if not self.refunds:
            return f"refund {t['method']} {t['order']}"
        return "end"

    # ---- the desk ------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        j, self.turn = self.turn, self.turn + 1
        events: list[Event] = []
        if self.user_spoke:
            events.append(Event("provenance", j, {"source": USER, "kind": "input"}))
        if self.errored is not None and action.split()[:1] in (["lookup"], ["refund"]):
            events.append(Event("provenance", j, {"source": self.errored, "kind": "failed_utilization"}))
        reply, error, done = self._apply(action, j, events)
        self.errored = j if error else None
        if error:
            bad_call = reply == "error: bad call"
            events.append(Event("invalid_action" if bad_call else "error", j, {"why": reply}))
        if done is not None:
            return self._end(done, events)
        if self.turn >= self.budget:
            return StepResult(None, reward=0.0, events=events, info={**self.summary(), "out_of_turns": True})
        if self.talking and "user:" not in reply:  # a remark not acknowledged is said again
            reply = f"{reply}\nuser: {self._remark()}"
        self.user_spoke = "user:" in reply
        return StepResult(Observation("agent", f"{reply}\n> "), events=events)

    def _apply(self, action: str, j: int, events: list[Event]) -> tuple[str, bool, bool | None]:
        """Run one action: (reply, errored, None while the episode goes on / True|False when it ended)."""
        t = self.task
        m = _ACTION.match(action)
        if m is None or len(action) > 200:
            self.bad_calls += 1
            return "error: bad call", True, None
        verb, args = m.group(1), m.group(2).split()
        if verb == "ask" and not args:
            if self.intent_asked is None:
                self.intent_asked = j
            if t["intent"] == "human":
                return "user: i want a human", False, None
            return f"user: refund to {t['method']} please", False, None
        if verb == "lookup" and not args:
            self.lookups += 1
            if self.looked_up is None:
                self.looked_up = j
                events.append(Event("tool_result", j, {"tool": "lookup", "id": t["order"]}))
                if t["intent"] == "refund":  # the customer starts the D remarks, or says that is all
                    self.talking = t["delay"] > 0
                    return f"tool: order {t['order']}\nuser: {self._remark()}", False, None
            return f"tool: order {t['order']}", False, None
        if verb == "ok" and not args:
            if not self.talking:
                return "user: yes?", False, None
            self.remarks_acked += 1
            self.talking = self.remarks_acked < t["delay"]
            return f"user: {self._remark()}", False, None
        if (verb == "refund" and len(args) == 2 and args[0] in METHODS and len(args[1]) == 1
                and args[1] in IDS):
            method, order = args[0], args[1]
            if order == t["trap"]:
                self.trap_uses += 1
                return "tool: error: example id", True, None
            if order != t["order"]:
                return f"tool: error: no order {args[1]}", True, None
            if self.refunds:
                return "tool: error: already refunded", True, None
            self.refunds.append((method, order))
            self.refunded_by = j
            if self.looked_up is not None:
                events.append(Event("provenance", j,
                                    {"source": self.looked_up, "kind": "success_utilization"}))
            if self.intent_asked is not None and t["intent"] == "refund" and method == t["method"]:
                events.append(Event("provenance", j, {"source": self.intent_asked, "kind": "input"}))
            return "tool: refunded", False, None
        if verb == "transfer" and not args:
            if self.intent_asked is not None and t["intent"] == "human":
                events.append(Event("provenance", j, {"source": self.intent_asked, "kind": "input"}))
            return "", False, t["intent"] == "human" and not self.refunds
        if verb == "end" and not args:
            if self.refunded_by is not None:
                events.append(Event("provenance", j,
                                    {"source": self.refunded_by, "kind": "success_utilization"}))
            right = self.refunds == [(t["method"], t["order"])] if t["intent"] == "refund" else False
            return "", False, right and self.looked_up is not None and self.remarks_acked >= t["delay"]
        self.bad_calls += 1
        return "error: bad call", True, None

    def _end(self, success: bool, events: list[Event]) -> StepResult:
        return StepResult(None, reward=float(success), success=success, events=events, info=self.summary())

    def summary(self) -> dict[str, Any]:
        """Per-episode numbers, reported in every episode (evaluation averages them over all episodes)."""
        return {"trap_use": self.trap_uses > 0, "redundant_lookup": self.lookups > 1,
                "redundant_lookups": max(self.lookups - 1, 0), "bad_calls": self.bad_calls,
                "actions": self.turn,
                "out_of_turns": False}


class ProbeEpisode(EpisodeState):
    """One single-turn tool call at a point of an ideal (D = 0) dialogue of the task."""

    def __init__(self, task: dict[str, Any]):
        ideal = ideal_actions({**task, "delay": 0})
        kind = "transfer" if task["intent"] == "human" else task["probe"]
        cut = {"ask": 0, "lookup": 1, "transfer": 1, "refund": 2, "end": 3}[kind]
        plain = ServiceDeskConfig(demo_trap=0.0, demo_repeat=0.0)
        ep = ServiceDeskEpisode({**task, "delay": 0}, plain, random.Random(0))
        text = ep.start().text
        for action in ideal[:cut]:
            result = ep.step(action)
            assert result.next is not None
            text += action + "\n" + result.next.text
        self.prompt, self.answer = text, ideal[cut]

    def start(self) -> Observation:
        return Observation("agent", self.prompt)

    def expert_action(self) -> str:
        return self.answer

    def step(self, action: str) -> StepResult:
        right = action.strip() == self.answer
        well_formed = _ACTION.match(action) and len(action) <= 200
        events = [] if well_formed else [Event("invalid_action", 0, {"why": "bad call"})]
        return StepResult(None, reward=float(right), success=right, events=events,
                          info={"probe_right": right})


class AuditedEpisode(AuditedPlay, ServiceDeskEpisode):
    """A classic play in a pool with defects (envs/testbeds/service_desk_audit.py)."""


class ServiceDeskEnv(AuditedPool, Environment):
    name = "service_desk"
    roles = ("agent",)
    offers = frozenset({"single_agent", "provenance_events", "env_pool_with_audit"})  # envs/api/features.py
    config_class = ServiceDeskConfig
    oracle_settings = {"demo_trap": 0.0, "demo_repeat": 0.0, "demo_right_tool": 1.0,
                       **{f"share_{d}": 0.0 for d in DEFECTS}}
    stop = ("\n",)
    DEFECTS = DEFECTS
    SHORTCUT_DEFECTS = ("weak",)  # closing the conversation at once earns its reward
    DEFECT_FIELDS = ("defect", "verifier", "missing")

    def __init__(self, cfg: ServiceDeskConfig):
        if (not cfg.delays or any(not 0 <= d <= len(REMARKS) for d in cfg.delays)
                or len(set(cfg.delays)) != len(cfg.delays)):
            raise ValueError(f"env.delays must be distinct values in 0..{len(REMARKS)}; got {cfg.delays}")
        for key in ("human_rate", "demo_trap", "demo_repeat"):
            if not 0.0 <= getattr(cfg, key) < 1.0:
                raise ValueError(f"env.{key} must be in [0, 1); got {getattr(cfg, key)}")
        if cfg.setting not in ("classic", "choice"):
            raise ValueError(f"env.setting must be classic or choice; got {cfg.setting!r}")
        if not 0.0 <= cfg.demo_right_tool <= 1.0:
            raise ValueError(f"env.demo_right_tool must be in [0, 1]; got {cfg.demo_right_tool}")
        if cfg.slack < 0:
            raise ValueError(f"env.slack must be >= 0; got {cfg.slack}")
        if cfg.orders < 1 or (cfg.orders > 1 and cfg.setting != "choice"):
            raise ValueError(f"env.orders must be >= 1, and above 1 only with env.setting=choice; got "
                             f"{cfg.orders} ({cfg.setting})")
        if cfg.lookups not in (2, 4) or (cfg.lookups == 4 and cfg.setting != "choice"):
            raise ValueError(f"env.lookups must be 2, or 4 with env.setting=choice; got {cfg.lookups}")
        if any(check_shares(cfg, DEFECTS).values()) and cfg.setting != "classic":
            raise ValueError(f"env.share_* (defective train tasks) need env.setting=classic; {cfg.setting}")
        super().__init__(cfg)
        self.cfg: ServiceDeskConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(sorted(self.cfg.delays))

    def generate_task(self, rng: random.Random, tier: int, defect: str | None = None) -> dict[str, Any]:
        """A task drawn from `rng`; with a label (`defect`), the same draw labelled, with its defect."""
        if self.cfg.setting == "choice":
            return generate_choice_task(rng, tier, REMARKS, self.cfg.orders, self.cfg.lookups)
        order, trap = rng.sample(IDS, 2)
        task = {"intent": "human" if rng.random() < self.cfg.human_rate else "refund",
                "method": rng.choice(METHODS),
                "order": order, "trap": trap, "delay": tier, "remarks": rng.sample(REMARKS, tier),
                "probe": rng.choice(PROBES)}
        return task if defect is None else with_defect(task, defect, self.defect_rng(task))

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if self.cfg.setting == "choice" and variant == "main":
            return ChoiceEpisode(task, self.cfg.slack, self.cfg.demo_right_tool, rng, self.cfg.lookups)
        if variant == "probe" and self.cfg.setting == "classic":
            return ProbeEpisode(task)
        if variant != "main":
            raise ValueError(f"service_desk has no episode variant {variant!r}; "
                             f"it has {list(self.variants())}")
        if self.audited or "defect" in task:  # a labelled task plays by its own verifier in any pool
            return AuditedEpisode(task, self.cfg, rng)
        return ServiceDeskEpisode(task, self.cfg, rng)

    def variants(self) -> tuple[str, ...]:
        return ("main", "probe") if self.cfg.setting == "classic" else ("main",)

    def provenance(self) -> dict[str, Any]:
        out = {**super().provenance(), "delays": list(self.tiers), "human_rate": self.cfg.human_rate}
        more = {"orders": self.cfg.orders} if self.cfg.orders > 1 else {}
        more.update({"lookups": self.cfg.lookups} if self.cfg.lookups != 2 else {})
        return out if self.cfg.setting == "classic" else {**out, "setting": self.cfg.setting, **more}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """A call, the verb uniform (ask, lookup, ok, refund, transfer, end); a refund's method uniform, its
        id a capital letter, uniform. The choice setting: `random_choice_action`'s."""
        if self.cfg.setting == "choice":
            return random_choice_action(rng, self.cfg.lookups)
        verb = rng.choice(["ask", "lookup", "ok", "refund", "transfer", "end"])
        return f"refund {rng.choice(METHODS)} {rng.choice(IDS)}" if verb == "refund" else verb
