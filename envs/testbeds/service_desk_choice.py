"""`service_desk`'s second setting, `choice` (IAPO's second testbed, #39): an upstream decision to credit.

The first setting's reward-relevant content sat inside the final refund, which both decided and
consumed; its intervening turns had one right answer (`ok`); a wrong method raised no error. Here the
decision is upstream and binding, the consumer errors when the decision was wrong, and the turns in
between carry entropy of their own. One episode, the ideal way, at delay D = 2:

    tools: orders | archive | refund <card|cash|credit> | end; acknowledge with ok, sure, thanks or right
    user: hello, i am ann, i ordered a lamp last year
    > archive
    tool: order K
    user: it was a gift
    > sure
    user: the box was blue
    > ok
    user: that is all, please refund cash
    > refund cash
    tool: refunded order K
    > end                                   (episode over; reward 1)

- **The upstream choice.** Two lookup tools; the first user line's one salient word decides which one
  holds the order: `week` (a recent order) -> `orders`, `year` -> `archive`. The right tool answers
  `tool: order <id>`; the other answers `tool: no order found` (no error: it has no such order). Only
  the first lookup counts (a second one errors: `tool: error: one lookup per call`), so the choice binds.
- **The consumer.** `refund <method>` binds the looked-up id itself. After a wrong lookup it errors
  (`tool: error: no order id`, an `error` event) and gets a `failed_utilization` edge from the lookup
  whose invalid output it used: the failure caused upstream is flagged at the consumer. A wrong method
  errors too (`tool: error: wrong method`; state unchanged, a retry may follow); so does a refund before
  the customer's request (`tool: error: the customer is still talking`).
- **The method** is copyable: the customer's last line ends `please refund <method>`, the bigram the
  action repeats, right after its cue `refund`, in the observation the refund acts on.
- **Delay D** (the tier): after the lookup the customer makes D remarks; each is acknowledged by any of
  `ACKS` (four words: real entropy, so a broadcast advantage is noise there). A remark not acknowledged
  is repeated after the next reply.
- **Reward** 1 when the episode ends (`end`) after a refund of the right order to the right method,
  within the ideal D + 3 actions + `slack`; else 0 (running out of budget: `out_of_turns`).
- **Provenance events** (the graph IAPO builds, `replications/iapo/graph.py`): direct user input
  (source -1) for an action whose observation carries a customer line; `tool_result` for the lookup
  that returned the id; `success_utilization` lookup -> refund (the refund used its id) and refund ->
  end; `failed_utilization` lookup -> refund when the refund used a wrong lookup's (missing) id, and
  an errored action -> the lookup or refund right after it; `error` / `invalid_action` on erring
  actions. `info` events `{"decision": "lookup" | "refund", "right": bool}` mark the decisions (the
  first lookup and every refund call): hidden ground truth for IAPO's oracle-credit arm
  (`method.credit=oracle`), never read by IAPO itself.
- **Several orders** (`env.orders` = K > 1, #39's third revision): the customer brings K orders up one
  after the other (`user: also, i ordered a mug last week`), each with its own deciding word, D remarks
  and request (`user: please refund card`; the last one `that is all, please refund <method>`). A
  refund that errors for want of an id (the wrong lookup) closes its order and the customer moves on to
  the next; the reward is 1 only when every order was refunded right and the agent ended, within
  K (D + 2) + 1 actions + `slack`. So an episode holds K upstream choices, and a failure's broadcast
  blame falls on the right choices as much as on the wrong one. The decision events carry `right` (the
  lookup returned the id; the refund succeeded): hidden ground truth for the oracle arm, which blames
  a failure's wrong decisions only. The end uses every successful refund (`success_utilization`). One
  order plays, draws and reads exactly as before (a task's extra orders are in `more`).
- **Four lookups** (`env.lookups` = 4; 2 by default, which plays, draws and reads exactly as before):
  two more words and tools, `month` -> `ledger` and `night` -> `backlog` (`TOOLS4`; the schema lists
  `orders | archive | ledger | backlog`). The word is drawn uniformly among the four; the three wrong
  tools each answer `tool: no order found`, as the wrong one of two does; the demonstrator's wrong
  tool is a uniform one of the three. A chance guess is right one time in four, not two.
- **The demonstrator** (the warm start): picks the right tool with probability `demo_right_tool`
  (default 0.5: a coin, whatever the word, so the warm start does not know the mapping and RL has to
  learn it), acknowledges with a uniform one of `ACKS`, and then refunds the customer's method and ends.
"""

from __future__ import annotations

import random
from typing import Any

from common.episode import Event
from envs.api.base import EpisodeState, Observation, StepResult

METHODS = ("card", "cash", "credit")
IDS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
TOOLS = {"week": "orders", "year": "archive"}  # the salient word of the first user line -> the right tool
TOOLS4 = {**TOOLS, "month": "ledger", "night": "backlog"}  # env.lookups = 4 (a word's tool is the same)
ACKS = ("ok", "sure", "thanks", "right")
# who and what (no effect on the play: they make enough distinct tasks at D = 0 for every split)
NAMES = ("ann", "bob", "cai", "dev", "eve", "fay", "gus", "hal", "ivy", "joe", "kim", "lee")
ITEMS = ("lamp", "mug", "chair", "book", "phone", "coat", "bag", "clock", "shoe", "desk", "pen", "cup")
USER = -1
SCHEMA = ("tools: orders | archive | refund <card|cash|credit> | end; "
          "acknowledge with ok, sure, thanks or right")


def tools_for(lookups: int) -> dict[str, str]:
    """The deciding word -> its tool with `env.lookups` lookup tools: `TOOLS` (2) or `TOOLS4` (4)."""
    if lookups not in (2, 4):
        raise ValueError(f"env.lookups must be 2 or 4 (the choice setting's lookup tools); got {lookups}")
    return TOOLS if lookups == 2 else TOOLS4


def schema(lookups: int = 2) -> str:
    """The tool line the first observation opens with: `SCHEMA` (2 lookups), or listing the four."""
    return SCHEMA.replace("orders | archive", " | ".join(tools_for(lookups).values()))


def first_line(task: dict[str, Any]) -> str:
    return f"user: hello, i am {task['name']}, i ordered a {task['item']} last {task['word']}"


def final_line(method: str) -> str:
    return f"user: that is all, please refund {method}"


def orders_of(task: dict[str, Any]) -> list[dict[str, Any]]:
    """The task's orders in play order: the first line's, then `more`'s (`env.orders` > 1)."""
    return [{k: task[k] for k in ("word", "method", "order", "item", "remarks")}, *task.get("more", [])]


def intro_line(task: dict[str, Any], k: int) -> str:
    """The customer's line that brings order `k` up (its item and its deciding word)."""
    if k == 0:
        return first_line(task)
    o = orders_of(task)[k]
    return f"user: also, i ordered a {o['item']} last {o['word']}"


def request_line(task: dict[str, Any], k: int) -> str:
    """The customer's request for order `k`: `please refund <method>` (the last one: `that is all, ...`)."""
    orders = orders_of(task)
    method = orders[k]["method"]
    return final_line(method) if k == len(orders) - 1 else f"user: please refund {method}"


def ideal_choice(task: dict[str, Any], acks: list[str] | None = None) -> list[str]:
    """The ideal actions of a `choice` task (acknowledgements `ok` unless given, reused for every order;
    the right tool `TOOLS4`'s, with 2 or 4 lookups alike)."""
    acks = acks if acks is not None else ["ok"] * task["delay"]
    return [a for o in orders_of(task) for a in (TOOLS4[o["word"]], *acks, f"refund {o['method']}")] + ["end"]


def generate_choice_task(rng: random.Random, tier: int, remarks: tuple[str, ...], orders: int = 1,
                         lookups: int = 2) -> dict[str, Any]:
    """A task of `orders` orders (the first one's fields at the top level, the others in `more`; one
    order draws exactly what the one-order setting always drew); each word uniform over `lookups` words."""
    words = sorted(tools_for(lookups))
    task = {"setting": "choice", "word": rng.choice(words), "method": rng.choice(METHODS),
            "order": rng.choice(IDS), "delay": tier, "remarks": rng.sample(remarks, tier),
            "name": rng.choice(NAMES), "item": rng.choice(ITEMS)}
    if orders > 1:
        task["more"] = [{"word": rng.choice(words), "method": rng.choice(METHODS),
                         "order": rng.choice(IDS), "item": rng.choice(ITEMS),
                         "remarks": rng.sample(remarks, tier)} for _ in range(orders - 1)]
    return task


def random_choice_action(rng: random.Random, lookups: int = 2) -> str:
    """A call, the verb uniform over the `lookups` tools, an acknowledgement, `refund` and `end` (an
    acknowledgement's word uniform over `ACKS`, a refund's method uniform)."""
    verb = rng.choice([*tools_for(lookups).values(), "ack", "refund", "end"])
    if verb == "ack":
        return rng.choice(ACKS)
    return f"refund {rng.choice(METHODS)}" if verb == "refund" else verb


class ChoiceEpisode(EpisodeState):
    """One play of a `choice` task (see the module docstring): its orders one after the other."""

    def __init__(self, task: dict[str, Any], slack: int, demo_right_tool: float, rng: random.Random,
                 lookups: int = 2):
        self.task, self.rng = task, rng
        self.orders = orders_of(task)
        self.tools = tools_for(lookups)  # the deciding word -> the right tool
        if any(o["word"] not in self.tools for o in self.orders):
            raise ValueError(f"a choice task's words {[o['word'] for o in self.orders]} need env.lookups = 4 "
                             f"(this env has {lookups})")
        self.budget = len(self.orders) * (task["delay"] + 2) + 1 + slack
        self.turn = 0
        self.k = 0  # the order in play
        self.refunds: list[int] = []  # the actions whose refunds succeeded, one per order done right
        self.rights: list[bool] = []  # per order looked up: did its lookup return the id
        self.lookups = 0
        self.errored: int | None = None
        self.user_spoke = True
        self.bad_calls = 0
        self.refund_errors = 0
        self._open_order()
        self.demo_tools = []
        for o in self.orders:  # the right tool, else a uniform wrong one (no draw when one is wrong)
            right = self.tools[o["word"]]
            wrong = [t for t in self.tools.values() if t != right]
            good = rng.random() < demo_right_tool
            self.demo_tools.append(right if good else wrong[0] if len(wrong) == 1 else rng.choice(wrong))

    def _open_order(self) -> None:
        self.looked_up: int | None = None  # the order's first lookup
        self.order: str | None = None  # the id it returned (None: the wrong tool, or no lookup yet)
        self.acked = 0
        self.talking = False  # a remark waits for an acknowledgement
        self.asked = False  # the customer has made the request (`please refund <method>`)
        self.refunded_by: int | None = None
        self.closed_errors = 0  # refund errors of this order

    @property
    def last(self) -> bool:
        return self.k == len(self.orders) - 1

    def start(self) -> Observation:
        return Observation("agent", f"{schema(len(self.tools))}\n{first_line(self.task)}\n> ")

    def _line(self) -> str:
        """The customer's line after the lookup or an acknowledgement: a remark, or the request."""
        if self.acked < self.task["delay"]:
            return f"user: {self.orders[self.k]['remarks'][self.acked]}"
        return request_line(self.task, self.k)

    def expert_action(self) -> str:
        if self.looked_up is None:
            return self.demo_tools[self.k]
        if self.talking:
            return self.rng.choice(ACKS)
        if self.refunded_by is None and self.closed_errors == 0:
            return f"refund {self.orders[self.k]['method']}"
        return "end"

    def step(self, action: str) -> StepResult:
        j, self.turn = self.turn, self.turn + 1
        events: list[Event] = []
        if self.user_spoke:
            events.append(Event("provenance", j, {"source": USER, "kind": "input"}))
        words = action.split()
        if self.errored is not None and words[:1] and words[0] in (*self.tools.values(), "refund"):
            events.append(Event("provenance", j, {"source": self.errored, "kind": "failed_utilization"}))
        reply, error, done = self._apply(words, j, events)
        self.errored = j if error else None
        if error:
            bad = reply == "error: bad call"
            events.append(Event("invalid_action" if bad else "error", j, {"why": reply.split("\n", 1)[0]}))
        if done is not None:
            return StepResult(None, reward=float(done), success=done, events=events, info=self.summary())
        if self.turn >= self.budget:
            return StepResult(None, reward=0.0, events=events, info={**self.summary(), "out_of_turns": True})
        if self.talking and "user:" not in reply:
            reply = f"{reply}\n{self._line()}"
        self.user_spoke = "user:" in reply
        return StepResult(Observation("agent", f"{reply}\n> "), events=events)

    def _apply(self, words: list[str], j: int, events: list[Event]) -> tuple[str, bool, bool | None]:
        """(reply, errored, None while the episode goes on / whether it succeeded when it ended)."""
        o = self.orders[self.k]
        if len(words) == 1 and words[0] in self.tools.values():
            self.lookups += 1
            if self.looked_up is not None:
                return "tool: error: one lookup per call", True, None
            self.looked_up = j
            right = words[0] == self.tools[o["word"]]
            self.rights.append(right)
            events.append(Event("info", j, {"decision": "lookup", "right": right}))
            self.talking = self.task["delay"] > 0
            if not self.talking:
                self.asked = True
            if right:
                self.order = o["order"]
                events.append(Event("tool_result", j, {"tool": words[0], "id": o["order"]}))
                return f"tool: order {o['order']}\n{self._line()}", False, None
            return f"tool: no order found\n{self._line()}", False, None
        if len(words) == 1 and words[0] in ACKS:
            if not self.talking:
                return "user: yes?", False, None
            self.acked += 1
            self.talking = self.acked < self.task["delay"]
            self.asked = not self.talking
            return self._line(), False, None
        if len(words) == 2 and words[0] == "refund" and words[1] in METHODS:
            return self._refund(words[1], j, events)
        if words == ["end"]:
            for r in self.refunds:
                events.append(Event("provenance", j, {"source": r, "kind": "success_utilization"}))
            return "", False, len(self.refunds) == len(self.orders)
        self.bad_calls += 1
        return "error: bad call", True, None

    def _refund(self, method: str, j: int, events: list[Event]) -> tuple[str, bool, bool | None]:
        o = self.orders[self.k]
        error = None
        if self.refunded_by is not None:
            error = "tool: error: already refunded"
        elif not self.asked:
            error = "tool: error: the customer is still talking"
        elif self.order is None:
            error = "tool: error: no order id"
        elif method != o["method"]:
            error = "tool: error: wrong method"
        events.append(Event("info", j, {"decision": "refund", "right": error is None}))
        if error == "tool: error: no order id" and self.looked_up not in (None, self.errored):
            # the wrong lookup's (missing) output used
            events.append(Event("provenance", j, {"source": self.looked_up, "kind": "failed_utilization"}))
        if error is not None:
            self.refund_errors += 1
            self.closed_errors += 1
            if error == "tool: error: no order id" and not self.last:  # the customer gives it up, goes on
                return f"{error}\n{self._next_order()}", True, None
            return error, True, None
        self.refunded_by = j
        self.refunds.append(j)
        events.append(Event("provenance", j, {"source": self.looked_up, "kind": "success_utilization"}))
        done = f"tool: refunded order {self.order}"
        return done if self.last else f"{done}\n{self._next_order()}", False, None

    def _next_order(self) -> str:
        self.k += 1
        self._open_order()
        return intro_line(self.task, self.k)

    def summary(self) -> dict[str, Any]:
        info: dict[str, Any] = {
            "right_tool": self.order is not None, "redundant_lookup": self.lookups > len(self.rights),
            "refund_errors": self.refund_errors, "bad_calls": self.bad_calls, "actions": self.turn,
            "out_of_turns": False}
        if len(self.orders) > 1:  # per order: the share of orders whose lookup was right, and done right
            info["right_tool"] = sum(self.rights) / len(self.orders)
            info["orders_refunded"] = len(self.refunds) / len(self.orders)
        return info
