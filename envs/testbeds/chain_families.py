"""`chain_tasks`' families (`env=chain_tasks env.families=true`, off by default): chains of related tickets
with a curate turn, for SkillRise (`replications/skillrise/`), on the apps of the default tasks
(`chain_apps.py`); the tickets, splits and scripted chains are `chain_family_tasks.py`'s.

A task is a *ticket*: an order (already paid), a day and the people it concerns, each named by a role
(`ticket: order 47 day fri guest eve boss ana staff kim`). A family is a hidden *procedure*: `family_steps`
distinct steps, each a verb and a role (`mail guest, book boss, mail staff, book guest`). `mail <role>` sends
the ticket's order to that person (`send <contact id> <order id>`), `book <role>` books a meeting with them on
the ticket's day (`book <day> <contact id>`); contact ids are drawn per episode and read from a `find <name>`
reply, as in the default tasks. A task of plan length L (its tier) asks for the first L steps of its family's
procedure, in order. Its ticket lists the people those steps concern and `family_distractors` people whose
roles are in no step of the procedure, in a random order. Every task of a family draws fresh people (no role
keeps a name it had in an earlier task of the family) and a fresh day, so from one task to the next only the
roles and the verbs carry over: an *abstract* document ("mail guest book boss") makes the next task a lookup,
a *concrete* one (the names found, "eve ana") names nobody right. No two families anywhere share a procedure
(12 steps: 11880 procedures of 4), so none can be memorized. The solver's context grows turn by turn:

    skill: mail guest                                       <- the document (empty at a chain's start)
    ticket: order 47 day fri guest eve boss ana staff kim
    step 1/2
    > find eve
    ok eve 18
    step 1/2
    > send 18 47                                            (the procedure's first step: done)
    ok eve 18
    step 2/2
    > send 23 47                                            (apps-valid, but not the next step: refused)
    no
    step 2/2

A call the apps would accept that is not the procedure's next step (another person, the other verb, another
day) answers `no` and changes nothing; `find` is a look-up; the apps' errors and bad calls are those of the
default tasks (a bad call costs `invalid_penalty`, default 0), and `done` gives up. The task succeeds when its
L steps are made, within 2 L + `slack` calls (busy refusals not counted; `busy_rate` and `fault_rate` work as
in the default tasks). Reward: 1 on success, else 0, minus the penalties. `info["found"]`: the steps made, as
`<verb> <name>`. Without a document the demonstrator (below) succeeds in about 0.3, 0.07 and 0.02 of the
tasks at L = 2, 3, 4 (the defaults: one distractor, slack 3; 1000 tasks each); with a right abstract one,
in all of them, in at most 2 L calls.

Variant `curate` (role `curator`): one turn after a task, seeing the old document, the ticket's people and the
steps found (`found: mail guest eve, book boss ana`), that rewrites the document between `<skill>` and
`</skill>` (at most `max_skill_words` lowercase words or numbers, as in skill_families; anything else is an
invalid action: reward -`invalid_penalty`, an empty document). Its kind (`info`): `doc_abstract` (only verbs
and roles), `doc_concrete` (only names, days or numbers: a ticket's surface), `doc_empty`, `doc_other`, and
`doc_right` (abstract, and its words in pairs are the procedure's first steps). A task's JSON: `family`,
`order` (the procedure, steps as `<verb> <role>`), `plan`, `people` ([role, name], ticket order), `day`; in a
chain also `skill` and, for a curate play, `found`.

Splits: whole families (`train_size`, `heldout_size`, `dev_size`, `demo_size` multiples of the number of
tiers), each family's tasks one per plan length in consecutive rows, from random streams of their own. The
demo split holds scripted chains (solve 0, curate 0, solve 1, ..., solve K-1). The demonstrator reads only
what the solver sees: it follows the document's steps and searches beyond them (a step of the ticket's verbs
and people not yet made nor refused at this step, uniformly), calling a random step of the ticket with
probability `demo_slip`; its curator writes the steps found abstractly with probability `demo_abstract`,
their people's names with `demo_concrete`, an empty document otherwise. The oracle of the check reads the
hidden procedure.

`order_prior` = q > 0 (#46, off by default): the procedures are drawn from a prior every family shares
(`chain_family_tasks.family_tasks`, `skill_prior.py`: each step is the successor of the step before in
`STEPS`' order, mail boss, book boss, mail client, ..., with probability q), so RL without a document has
something to learn that transfers to held-out families; the demonstrator does not know it.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from common.episode import Event
from envs.api.base import EpisodeState, Observation, StepResult, parse_int
from envs.testbeds.chain_apps import CALL, DAYS, NAMES, World, apply_call
from envs.testbeds.skill_families import curate_result, parse_skill

if TYPE_CHECKING:
    from envs.testbeds.chain_tasks import ChainTasksConfig

VERBS = ("mail", "book")  # mail: the ticket's order to the person; book: a meeting with them on its day
ROLES = ("boss", "client", "guest", "staff", "agent", "owner")
STEPS = tuple(f"{verb} {role}" for role in ROLES for verb in VERBS)
Step = tuple[str, str]  # (verb, role)


# ---- documents -----------------------------------------------------------------------------------------
def doc_kind(words: Sequence[str]) -> str:
    """`empty`, `abstract` (only verbs and roles), `concrete` (only names, days or numbers) or `other`."""
    if not words:
        return "empty"
    if all(w in VERBS or w in ROLES for w in words):
        return "abstract"
    if all(w in NAMES or w in DAYS or w.isdigit() for w in words):
        return "concrete"
    return "other"


def doc_right(words: Sequence[str], order: Sequence[str]) -> bool:
    """An abstract document whose words, in pairs, are the procedure's first steps (`order`: `<verb> <role>`
    each)."""
    pairs = [f"{v} {r}" for v, r in zip(words[::2], words[1::2], strict=False)]
    return doc_kind(words) == "abstract" and len(words) % 2 == 0 and pairs == list(order[: len(pairs)])


def doc_steps(doc: str, roles: Sequence[str]) -> list[Step | None]:
    """What a document says to do at each step on a ticket with these roles: its words in pairs, a verb and a
    role of the ticket (None for a pair that names no such step)."""
    words = doc.split()
    return [(v, r) if v in VERBS and r in roles else None
            for v, r in zip(words[::2], words[1::2], strict=False)]


def random_document(rng: random.Random) -> str:
    """`<skill>`, 0-4 words uniform over verbs, roles and names, `</skill>` (the curator's random action)."""
    return " <skill> " + " ".join(rng.choices([*VERBS, *ROLES, *NAMES], k=rng.randint(0, 4))) + " </skill>"


def new_episode(task: dict[str, Any], cfg: ChainTasksConfig, rng: random.Random,
                variant: str) -> EpisodeState:
    if variant not in ("main", "curate"):
        raise ValueError(f"chain_tasks with families has no variant {variant!r}; it has ('main', 'curate')")
    if variant == "curate" or task.get("kind") == "curate":  # a curate row of the demo split's chains
        return CurateEpisode(task, cfg, rng)
    return FamilyEpisode(task, cfg, rng)


# ---- episodes ------------------------------------------------------------------------------------------
class FamilyEpisode(EpisodeState):
    """One ticket (module doc): the default tasks' apps; the procedure's steps, in order, make it."""

    def __init__(self, task: dict[str, Any], cfg: ChainTasksConfig, rng: random.Random):
        self.cfg, self.rng = cfg, rng
        fault = rng.random() < cfg.fault_rate  # drawn first: the same episodes fault for every arm of a seed
        ids = rng.sample(range(10, 100), len(NAMES) + 1)
        self.world = World(dict(zip(NAMES, ids[:-1], strict=True)), ids[-1], paid=True)  # the ticket's order
        self.plan = int(task["plan"])
        self.steps: list[Step] = [(s.split()[0], s.split()[1]) for s in task["order"][: self.plan]]  # hidden
        self.people = [(str(r), str(n)) for r, n in task["people"]]
        self.name_of, self.role_of = dict(self.people), {n: r for r, n in self.people}
        self.day = str(task["day"])
        self.doc = str(task.get("skill", ""))[:400]
        self.fault_at = rng.randrange(2 * self.plan) if fault else -1
        self.budget = 2 * self.plan + cfg.slack
        self.found: list[str] = []  # the steps made, as "<verb> <name>"
        self.calls = self.turn = self.invalid = self.misses = 0
        self.last_busy = False
        # what the solver has seen, which the demonstrator reads: the steps its document names, the ids the
        # replies showed, the steps refused at the current step; and the step it is working on
        self.guide = doc_steps(self.doc, [r for r, _ in self.people])
        self.known: dict[str, int] = {}
        self.tried: set[Step] = set()
        self.intent: Step | None = None

    def _prompt(self) -> str:
        return f"step {len(self.found) + 1}/{self.plan}\n> "

    def start(self) -> Observation:
        people = " ".join(f"{r} {n}" for r, n in self.people)
        ticket = f"ticket: order {self.world.order_id} day {self.day} {people}"
        return Observation("solver", f"skill: {self.doc}\n{ticket}\n{self._prompt()}")

    # ---- the demonstrator and the oracle -----------------------------------------------------------------
    def _call(self, step: Step) -> str:
        """The call that makes `step`: its person looked up first when no reply has shown their id."""
        verb, role = step
        name = self.name_of[role]
        if name not in self.known:
            return f"find {name}"
        if verb == "mail":
            return f"send {self.known[name]} {self.world.order_id}"
        return f"book {self.day} {self.known[name]}"

    def oracle_action(self) -> str:
        """The procedure's next step (it reads the hidden procedure): at most 2 L calls."""
        return self._call(self.steps[min(len(self.found), self.plan - 1)])

    def expert_action(self) -> str:
        """The scripted demonstrator: the document's step where it names one not refused here, else a step of
        the ticket not yet made nor refused at this step, uniformly; with probability demo_slip any step of
        the ticket. It keeps to a step until the apps answer the call that makes it."""
        if self.intent is None:
            k = len(self.found)
            options = [(v, r) for r, _ in self.people for v in VERBS]
            made = {(v, self.role_of[n]) for v, n in (f.split() for f in self.found)}
            guided = self.guide[k] if k < len(self.guide) else None
            if self.cfg.demo_slip and self.rng.random() < self.cfg.demo_slip:
                self.intent = self.rng.choice(options)
            elif guided is not None and guided not in self.tried:
                self.intent = guided
            else:
                untried = [s for s in options if s not in made and s not in self.tried]
                self.intent = self.rng.choice(untried or options)
        return self._call(self.intent)

    # ---- the apps and the procedure --------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        turn, self.turn = self.turn, self.turn + 1
        if self.calls == self.fault_at:
            fault = Event("fault", turn, {"what": "server unavailable", "call": self.calls})
            return self._end(False, [fault], fault=True)
        if not self.last_busy and self.rng.random() < self.cfg.busy_rate:
            self.last_busy = True  # never twice in a row, so a busy spell always ends
            return StepResult(self._next("error: busy"), events=[Event("error", turn, {"busy": True})])
        self.last_busy = False
        self.calls += 1
        m = CALL.match(action)
        verb, args = (m.group(1), m.group(2).split()) if m else ("", [])
        events: list[Event] = []
        if verb in ("send", "book"):
            reply, ok = self._make(action, verb, args, turn, events)
        else:
            reply, ok = apply_call(self.world, action)
        if not ok:
            bad = reply.startswith("error: bad call")
            self.invalid += bad
            events.append(Event("invalid_action" if bad else "error", turn, {"why": reply}))
        shown = reply.split()
        if len(shown) == 3 and shown[0] == "ok" and shown[1] in NAMES and parse_int(shown[2]) is not None:
            self.known[shown[1]] = int(shown[2])
        if len(self.found) == self.plan:
            return self._end(True, events)
        if ok and verb == "done":
            return self._end(False, events)  # gave up
        if self.calls >= self.budget:
            return self._end(False, events, out_of_turns=True)
        return StepResult(self._next(reply), events=events)

    def _make(self, action: str, verb: str, args: list[str], turn: int,
              events: list[Event]) -> tuple[str, bool]:
        """A send or a book: made when it is the procedure's next step, `no` (no effect) when the apps would
        accept it but it is not, the apps' error otherwise."""
        trial = copy.deepcopy(self.world)
        reply, ok = apply_call(trial, action)
        if not ok:
            return reply, False
        self.intent = None
        contact = parse_int(args[0] if verb == "send" else args[1])
        name = next((n for n, cid in self.world.contact_ids.items() if cid == contact), "")
        step = ("mail" if verb == "send" else "book", self.role_of.get(name, ""))
        canonical = verb == "send" or args[0] == self.day  # the call that makes `step`, were it the next
        if canonical and step == self.steps[len(self.found)]:
            self.world = trial
            self.found.append(f"{step[0]} {name}")
            self.tried = set()
            return reply, True
        if canonical and step[1]:
            self.tried.add(step)
        self.misses += 1
        events.append(Event("error", turn, {"why": "not the procedure's next step"}))
        return "no", True

    def _next(self, reply: str) -> Observation:
        return Observation("solver", f"{reply}\n{self._prompt()}")

    def _end(self, success: bool, events: list[Event], fault: bool = False,
             out_of_turns: bool = False) -> StepResult:
        reward = 0.0 if fault else float(success) - self.cfg.invalid_penalty * self.invalid
        info = {"calls": self.calls, "progress": len(self.found) / self.plan, "fault": fault,
                "out_of_turns": out_of_turns, "found": list(self.found), "misses": self.misses,
                "invalid_calls": self.invalid}
        return StepResult(None, reward=reward, success=success, events=events, info=info)


class CurateEpisode(EpisodeState):
    """One curate turn after a ticket: rewrite the skill document for the chain's next ticket."""

    def __init__(self, task: dict[str, Any], cfg: ChainTasksConfig, rng: random.Random):
        self.cfg, self.rng = cfg, rng
        self.order = [str(s) for s in task["order"]]
        self.people = [(str(r), str(n)) for r, n in task["people"]]
        role_of = {n: r for r, n in self.people}
        self.doc = str(task.get("skill", ""))[:400]
        self.found: list[tuple[str, str, str]] = []  # (verb, role, name) of each step the task made
        for entry in [str(f).split() for f in task.get("found", [])[:8]]:
            if len(entry) == 2 and entry[0] in VERBS and entry[1] in role_of:
                self.found.append((entry[0], role_of[entry[1]], entry[1]))

    def start(self) -> Observation:
        people = " ".join(f"{r} {n}" for r, n in self.people)
        found = ", ".join(" ".join(step) for step in self.found)
        return Observation("curator", f"skill: {self.doc}\nticket: {people}\nfound: {found}\ncurate:")

    def scripted_doc(self, kind: str) -> list[str]:
        """What the scripted curator writes of each kind: the longer of the old abstract document and the
        steps found (both are prefixes of the same procedure), the names found, or nothing."""
        old = self.doc.split()
        if kind == "abstract":
            seen = [w for verb, role, _ in self.found for w in (verb, role)]
            return old if doc_kind(old) == "abstract" and len(old) > len(seen) else seen
        return [name for _, _, name in self.found] if kind == "concrete" else []

    def expert_action(self) -> str:
        u = self.rng.random()
        concrete_below = self.cfg.demo_abstract + self.cfg.demo_concrete
        kind = "abstract" if u < self.cfg.demo_abstract else "concrete" if u < concrete_below else "empty"
        limit = self.cfg.max_skill_words - (self.cfg.max_skill_words % 2 if kind == "abstract" else 0)
        words = self.scripted_doc(kind)[:limit]  # an abstract document keeps whole steps
        return " <skill> " + " ".join(words) + (" " if words else "") + "</skill>"

    def step(self, action: str) -> StepResult:
        words = parse_skill(action, self.cfg.max_skill_words)
        why = f"expected <skill> up to {self.cfg.max_skill_words} lowercase words or numbers </skill>"
        return curate_result(words, doc_kind(words or []), doc_right(words or [], self.order),
                             self.cfg.invalid_penalty, why)
