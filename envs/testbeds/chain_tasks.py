"""`chain_tasks`: long-horizon tool use in a miniature app world (AppWorld in miniature).

Four stateful apps answer one call per turn: a shop (cart, checkout), contacts, mail and a
calendar. A task is a chain of steps (buy items, pay, mail the order to someone, book a meeting
with them); the agent works through it call by call and ends with `done`. The reward is sparse and
all-or-nothing: 1 when the final state of every app is exactly what the task asks, else 0.

Each turn the agent sees the apps' reply to its last call and its to-do line (the task's next
step, with what the apps have revealed so far filled in), in a fresh context:

    ready / todo: buy tea 2          > add tea 2
    ok / todo: buy rice 1            > add rice 1
    error: busy / todo: buy rice 1   > add rice 1       (a recoverable error: call again)
    ok / todo: pay                   > pay
    ok order 47 / todo: mail 47 to ana                  > find ana
    ok ana 18 / todo: mail 47 to ana                    > send 18 47
    ok ana 18 / todo: book fri with ana                 > book fri 18
    ok / todo: done                  > done             (episode over; reward 1)

(shown here on one line each; the observation is `<reply>\\ntodo: <step>\\n> `). The contact id
(18) is drawn per episode and appears only in a reply, so `send` and `book` must read it from the
last reply, and look it up again when that reply does not show it (after a busy refusal, say).

Each call (app: effect; errors, which leave the state unchanged so that the agent can recover):

- `add <item> <qty>`: shop: qty of item into the cart; unknown item, order already paid
- `remove <item>`: shop: the item out of the cart; not in the cart, order already paid
- `pay`: shop: check out, `ok order <id>`; cart empty, already paid
- `find <name>`: contacts: `ok <name> <id>`; unknown name
- `send <contact id> <order id>`: mail: mails the order, `ok <name> <id>`; unknown contact id, unknown
  order
- `book <day> <contact id>`: calendar: books a meeting; unknown day, unknown contact id
- `done`: ends the episode; the final state is checked

A call that fits none of these (a number that is not 1 to 18 ASCII digits included) is a bad call:
`error: bad call`, an `invalid_action` event, no effect.

The to-do line moves to the next step when the agent makes the step's call (`add` of the step's
item, `pay`, `send`, `book`), right or wrong: a wrong quantity or recipient is not flagged, it
fails the task at the end, as in a real app. Tiers, by length of the solution: tier 1 buys two
items and pays (4 calls with `done`); tier 2 buys three, pays and mails the order (7); tier 3 buys
five, pays, mails the order and books a meeting with the same contact (10).

Failures that are not the agent's own:
- `busy_rate`: a call is refused with `error: busy` (no effect, not counted against the turn
  budget); a good agent repeats it (looking the id up again if the call needs one).
- `fault_rate`: an infrastructure fault. With this probability per episode the world crashes at
  a random call within the solution's length (`error: server unavailable`): the episode ends with
  reward 0 and a `fault` event, so the rollout marks it `faulted` and a method can quarantine it.
  The fault is drawn first from the episode's seed, so the same episodes fault for every arm of a
  seed (held-out evaluation included, where a faulted episode counts as a failure: a small
  ceiling shared by every arm).

**Provenance events** (#46; IAPO's influence graph, `replications/iapo/graph.py`, as `service_desk`'s):
each successful call j gets `Event("provenance", j, {"source": i, "kind": "success_utilization"})` for
the earlier turns i whose output it used: `pay` the adds (and removes) that built the cart, `send` the
reply that last showed its contact id (a `find` or an earlier `send`) and the `pay` that made the order,
`book` the reply that last showed its contact id, `done` the last call that changed a state. The call
right after an errored turn i (a busy refusal included) gets `failed_utilization` from i. The events
change no reward, observation or split.

**Families** (`families: true`, off by default): tickets in families that share a hidden procedure of
`mail` and `book` steps over the people's roles, with a curate turn between tasks, for SkillRise's chains
(roles solver and curator, variant `curate`, tiers = plan lengths); `envs/testbeds/chain_families.py` tells
that story. Off, no family setting is read and every split, observation and reward is as before (pinned by
tests/envs/testbeds/test_chain_tasks_default_pins.py). The apps themselves are `chain_apps.py`'s.

**Defective train tasks** (`env_pool_with_audit`, River's filter; the default tasks; 0 by default):
`share_weak`, `share_reject` and `share_unsolvable` put labelled defects into the train split
(`chain_tasks_audit.py`; `audit_pool.py`: how, leaving every stream as it was).

The scripted demonstrator (SFT warm start) solves every task, except that with probability
`demo_slip` it misreads a quantity (`add`) or a day (`book`), as a weak agent's demonstrations
would: the warm start inherits that error rate, which compounds over a long task (2, 3 and 6 such
values in tiers 1, 2 and 3), and RL has to train it away. Ids and names are always copied right
in the demonstrations, so reading them is a skill the warm start has. A turn budget of the solution's length
+ `slack` calls (busy refusals not counted) ends every episode.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from datasets import DatasetDict

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult, parse_int
from envs.testbeds import chain_families, chain_family_tasks
from envs.testbeds.audit_pool import AuditedPool, check_shares
from envs.testbeds.chain_apps import DAYS, ITEMS, NAMES, World, apply_call  # importable from here as before
from envs.testbeds.chain_tasks_audit import DEFECTS, AuditedPlay, with_defect

ITEMS_PER_TIER = {1: 2, 2: 3, 3: 5}


@dataclass
class ChainTasksConfig(EnvConfig):
    name: str = "chain_tasks"
    busy_rate: float = 0.1  # chance that a call is refused with "error: busy" (recoverable)
    fault_rate: float = 0.0  # chance per episode of an infrastructure fault (episode flagged `faulted`)
    demo_slip: float = 0.0  # chance that the demonstrator gets a quantity or a day wrong (families: any step)
    slack: int = 3  # calls allowed beyond the solution's length (busy refusals not counted)
    # shares of defective train tasks (River's filter; chain_tasks_audit.py), 0 = the default pool
    share_weak: float = 0.0  # the verifier checks only that the episode ended with `done`
    share_reject: float = 0.0  # the recorded cart differs from the to-do lines' (one quantity by one)
    share_unsolvable: float = 0.0  # the shop does not stock one of the task's items
    train_size: int = 1500
    heldout_size: int = 150
    # families (SkillRise's chains with a curate turn: envs/testbeds/chain_families.py). Off: the settings
    # below are unused and every task, observation and reward is as without them
    families: bool = False
    family_steps: int = 4  # steps of a family's hidden procedure = the longest plan
    family_min_plan: int = 2  # the shortest plan; tiers (= plan lengths): family_min_plan .. family_steps
    family_distractors: int = 1  # people per ticket whose roles are in no step of the procedure
    max_skill_words: int = 8  # the skill document's length limit, in words
    invalid_penalty: float = 0.0  # subtracted per bad call and per invalid curate turn
    demo_abstract: float = 0.3  # the demo split's scripted curator: the steps found, abstractly ...
    demo_concrete: float = 0.3  # ... or their people's names; otherwise an empty document
    order_prior: float = 0.0  # > 0: procedures drawn from a prior all families share (skill_prior.py)


def task_steps(task: dict[str, Any]) -> list[tuple[str, ...]]:
    """The task as steps: ("buy", item, qty), ("pay",), ("mail", name), ("book", day, name), ("done",)."""
    steps: list[tuple[str, ...]] = [("buy", item, str(qty)) for item, qty in task["items"]]
    steps.append(("pay",))
    if task.get("contact"):
        steps.append(("mail", task["contact"]))
        if task.get("day"):
            steps.append(("book", task["day"], task["contact"]))
    return [*steps, ("done",)]


class ChainEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: ChainTasksConfig, rng: random.Random):
        self.task, self.cfg, self.rng = task, cfg, rng
        fault = rng.random() < cfg.fault_rate  # drawn first: the same episodes fault for every arm of a seed
        ids = rng.sample(range(10, 100), len(NAMES) + 1)
        self.world = World(dict(zip(NAMES, ids[:-1], strict=True)), ids[-1])
        self.steps = task_steps(task)
        self.fault_at = rng.randrange(len(self.steps)) if fault else -1
        self.budget = len(self.steps) + cfg.slack
        self.cursor = 0  # the to-do step
        self.calls = 0  # calls the world answered (busy refusals excluded)
        self.turn = 0  # every action, busy refusals included (the index in Episode.turns)
        self.reply = "ready"
        self.last_busy = False
        # provenance (which earlier turn produced what a call uses): contact id -> the turn whose reply
        # showed it last, the adds in the cart, the pay, the last state-changing call, the last error
        self.shown_by: dict[int, int] = {}
        self.cart_turns: list[int] = []
        self.paid_turn: int | None = None
        self.last_change: int | None = None
        self.errored: int | None = None

    # ---- what the agent sees -----------------------------------------------------------------
    def todo(self) -> str:
        step = self.steps[self.cursor]
        if step[0] == "buy":
            return f"buy {step[1]} {step[2]}"
        if step[0] == "mail":
            return f"mail {self.world.order_id} to {step[1]}"
        if step[0] == "book":
            return f"book {step[1]} with {step[2]}"
        return step[0]

    def observation(self) -> Observation:
        return Observation("agent", f"{self.reply}\ntodo: {self.todo()}\n> ", new_context=True)

    def start(self) -> Observation:
        return self.observation()

    # ---- the demonstrator ----------------------------------------------------------------------
    def expert_action(self) -> str:
        step, w = self.steps[self.cursor], self.world
        if step[0] == "buy":
            return f"add {step[1]} {self._slip(step[2], [str(q) for q in range(1, 6)])}"
        if step[0] in ("mail", "book"):
            name = step[-1]
            shown = self.reply.split()
            if shown[:2] != ["ok", name] or len(shown) != 3:  # the id is not on screen: look it up
                return f"find {name}"
            if step[0] == "mail":
                return f"send {shown[2]} {w.order_id}"
            return f"book {self._slip(step[1], list(DAYS))} {shown[2]}"
        return step[0]

    def _slip(self, value: str, choices: list[str]) -> str:
        """With probability demo_slip, a wrong value in place of the right one."""
        if self.cfg.demo_slip and self.rng.random() < self.cfg.demo_slip:
            return self.rng.choice([c for c in choices if c != value])
        return value

    # ---- the world -----------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        turn, self.turn = self.turn, self.turn + 1
        if self.calls == self.fault_at:
            return StepResult(None, reward=0.0, success=False, info={**self.summary(), "fault": True},
                              events=[Event("fault", turn,
                                            {"what": "server unavailable", "call": self.calls})])
        if not self.last_busy and self.rng.random() < self.cfg.busy_rate:
            self.last_busy = True  # never twice in a row, so a busy spell always ends
            self.reply = "error: busy"
            events = self._after_error(turn)
            self.errored = turn
            return StepResult(self.observation(), events=[*events, Event("error", turn, {"busy": True})])
        self.last_busy = False
        self.calls += 1
        verb = action.split()[0] if action.split() else ""
        events = self._after_error(turn)
        self.reply, ok = self.apply(action)
        bad_call = self.reply.startswith("error: bad call")
        if ok:
            events += self._provenance(turn, verb, action.split()[1:])
        else:
            events.append(Event("invalid_action" if bad_call else "error", turn, {"why": self.reply}))
        self.errored = None if ok else turn
        step = self.steps[self.cursor]
        addresses_step = (verb, step[0]) in (("add", "buy"), ("pay", "pay"), ("send", "mail"),
                                             ("book", "book"))
        if ok and addresses_step and (verb != "add" or action.split()[1] == step[1]):
            self.cursor += 1
        if ok and verb == "done":
            success = self.solved()
            return StepResult(None, reward=float(success), success=success, events=events,
                              info=self.summary())
        if self.calls >= self.budget:
            return StepResult(None, reward=0.0, success=False, events=events,
                              info={**self.summary(), "out_of_turns": True})
        return StepResult(self.observation(), events=events)

    # ---- provenance events (IAPO's influence graph; replications/iapo/graph.py) -----------------
    def _after_error(self, turn: int) -> list[Event]:
        """The call right after an errored one (a busy refusal included) falls back because of it."""
        if self.errored is None:
            return []
        return [Event("provenance", turn, {"source": self.errored, "kind": "failed_utilization"})]

    def _provenance(self, turn: int, verb: str, args: list[str]) -> list[Event]:
        """A successful call's sources: `pay` uses the adds in the cart, `send` the reply that showed its
        contact id and the pay that made the order, `book` the reply that showed its contact id, `done`
        the last call that changed a state; a reply that shows a contact id is remembered as its source."""
        sources: list[int | None] = []
        if verb in ("add", "remove"):
            self.cart_turns.append(turn)
        elif verb == "pay":
            sources, self.paid_turn = list(self.cart_turns), turn
        elif verb in ("send", "book"):
            contact = parse_int(args[0] if verb == "send" else args[1])
            sources = [self.shown_by.get(contact or -1), *([self.paid_turn] if verb == "send" else [])]
        elif verb == "done":
            sources = [self.last_change]
        if verb in ("find", "send"):
            shown = parse_int(self.reply.split()[-1])
            if shown is not None:
                self.shown_by[shown] = turn
        if verb in ("add", "remove", "pay", "send", "book"):
            self.last_change = turn
        return [Event("provenance", turn, {"source": i, "kind": "success_utilization"})
                for i in dict.fromkeys(sources) if i is not None]

    def apply(self, call: str) -> tuple[str, bool]:
        """Run one call; returns (reply, ok). Errors leave the state unchanged (`chain_apps.apply_call`)."""
        return apply_call(self.world, call)

    def solved(self, task: dict[str, Any] | None = None) -> bool:
        """The final state is exactly what the task (or `task`) asks (nothing missing, nothing extra)."""
        t, w = self.task if task is None else task, self.world
        cid = w.contact_ids.get(t.get("contact") or "", -1)
        return (w.cart == {item: qty for item, qty in t["items"]} and w.paid
                and w.mails == ([(cid, w.order_id)] if t.get("contact") else [])
                and w.meetings == ([(t["day"], cid)] if t.get("day") else []))

    def summary(self) -> dict[str, Any]:
        """Per-episode numbers (held-out evaluation averages them under `metrics`)."""
        return {"calls": self.calls, "progress": self.cursor / (len(self.steps) - 1), "fault": False,
                "out_of_turns": False}


class AuditedEpisode(AuditedPlay, ChainEpisode):
    """A default play in a pool with defects (envs/testbeds/chain_tasks_audit.py)."""


class ChainTasksEnv(AuditedPool, Environment):
    name = "chain_tasks"
    roles: ClassVar[tuple[str, ...]] = ("agent",)
    # envs/api/features.py; an instance's: `offers_for` its settings (the audit with defects only; families)
    offers = frozenset({"single_agent", "provenance_events", "env_pool_with_audit"})
    config_class = ChainTasksConfig
    oracle_settings = {"demo_slip": 0.0, "fault_rate": 0.0, **{f"share_{d}": 0.0 for d in DEFECTS}}
    stop = ("\n",)
    DEFECTS = DEFECTS
    SHORTCUT_DEFECTS = ("weak",)  # `done` at once earns its reward
    DEFECT_FIELDS = ("defect", "verifier", "missing")

    @classmethod
    def offers_for(cls, settings: Mapping[str, Any]) -> frozenset[str]:
        return frozenset({"task_families"}) if settings.get("families") else super().offers_for(settings)

    def __init__(self, cfg: ChainTasksConfig):
        for key in ("busy_rate", "fault_rate", "demo_slip"):
            if not 0.0 <= getattr(cfg, key) < 1.0:
                raise ValueError(f"env.{key} must be in [0, 1); got {getattr(cfg, key)}")
        if cfg.slack < 0:
            raise ValueError(f"env.slack must be >= 0; got {cfg.slack}")
        shares = check_shares(cfg, DEFECTS)
        if cfg.families:
            if any(shares.values()):
                raise ValueError(f"env.share_* (defective train tasks) need env.families=false; {shares}")
            chain_family_tasks.check(cfg)
            # this instance's roles (the class's are those of the default tasks), as textworld's
            self.roles = ("solver", "curator")  # type: ignore[misc]
        settings = {"families": cfg.families, **{f"share_{d}": v for d, v in shares.items()}}
        self.offers = self.offers_for(settings)  # type: ignore[misc]
        super().__init__(cfg)
        self.cfg: ChainTasksConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return chain_family_tasks.tiers(self.cfg) if self.cfg.families else (1, 2, 3)

    def variants(self) -> tuple[str, ...]:
        return ("main", "curate") if self.cfg.families else ("main",)

    def task_set(self) -> DatasetDict:
        """The base's splits; with families, whole families per split (`chain_family_tasks.family_tasks`)."""
        if self._tasks is None and self.cfg.families:
            self._tasks = chain_family_tasks.family_tasks(self.cfg)
        return super().task_set()

    def generate_task(self, rng: random.Random, tier: int, defect: str | None = None) -> dict[str, Any]:
        """A task drawn from `rng`; with a label (`defect`), the same draw labelled, with its defect."""
        items = rng.sample(ITEMS, ITEMS_PER_TIER[tier])
        task: dict[str, Any] = {"items": [[item, rng.randint(1, 5)] for item in items]}
        if tier >= 2:
            task["contact"] = rng.choice(NAMES)
        if tier >= 3:
            task["day"] = rng.choice(DAYS)
        return task if defect is None else with_defect(task, defect, self.defect_rng(task))

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if self.cfg.families:
            return chain_families.new_episode(task, self.cfg, rng, variant)
        if variant != "main":
            raise ValueError(f"chain_tasks has no episode variant {variant!r}")
        if self.audited or "defect" in task:  # a labelled task plays by its own verifier in any pool
            return AuditedEpisode(task, self.cfg, rng)
        return ChainEpisode(task, self.cfg, rng)

    def corpus_splits(self) -> tuple[str, ...]:
        return ("demo", "train") if self.cfg.families else ("train",)

    def provenance(self) -> dict[str, Any]:
        if not self.cfg.families:
            return super().provenance()
        return {**super().provenance(), "demo": self.cfg.demo_size,
                "families": "hidden procedures of verbs and roles, fresh people per ticket "
                            "(envs/testbeds/chain_families.py, [I] for SkillRise's chains)"}

    def oracle_action(self, state: EpisodeState, obs: Observation) -> str:
        """With families, the hidden procedure's next step (the demonstrator searches without a document);
        the default tasks' demonstrator is an oracle under `oracle_settings` already."""
        return getattr(state, "oracle_action", state.expert_action)()  # type: ignore[no-any-return]

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """A call: the verb uniform, its arguments uniform (items, names, days, quantities 1-5, ids 1-99);
        with families, the curator's: `<skill>`, 0-4 words uniform over verbs, roles and names, `</skill>`."""
        if obs.role == "curator":
            return chain_families.random_document(rng)

        def number() -> str:
            return str(rng.randint(1, 99))

        calls = {"add": lambda: [rng.choice(ITEMS), str(rng.randint(1, 5))],
                 "remove": lambda: [rng.choice(ITEMS)],
                 "pay": list, "find": lambda: [rng.choice(NAMES)], "send": lambda: [number(), number()],
                 "book": lambda: [rng.choice(DAYS), number()], "done": list}
        verb = rng.choice(sorted(calls))
        return " ".join([verb, *calls[verb]()])
