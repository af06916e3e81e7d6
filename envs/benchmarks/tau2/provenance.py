"""`tau2`'s provenance events (#46): which earlier turn's output each tool call used, for IAPO's influence
graph (`replications/iapo/graph.py`, `provenance_annotator`), read from the text of the episode alone. The
machinery is `bfcl`'s (`envs/api/provenance.py`); what follows is what it reads in tau2.

**Values.** The values a tool call writes are the values of its `arguments` object as JSON decodes them:
strings and finite numbers, nested ones included (in lists and in objects' values; keys and the tool's
name are the agent's vocabulary, not data; booleans and null are left out), and strings without a letter
or a digit are left out.

**Tokens and matching.** As `bfcl`'s: the tokens of a text are its maximal runs of letters, digits, `_`,
`.` and `-`, a trailing `.` removed, that hold a letter or a digit. A string that is one token
(`yusuf_rossi_9620`, `1656367028`, `2024-05-15`) appears in a text when it is one of its tokens; another
string (`#W2378156`, `Google Home`), when it is a substring of the text; a number, when it equals a token
that is a numeral (`50`, `50.0` and `50.00` are equal; the string `'19122'` is a string). Case counts.

**Where a value comes from.** The episode is read in the order the agent saw and wrote it, and a value's
origin is the first of these texts it appears in:

- the user's input, source -1: the agent's first observation (τ²'s agent prompt with the domain's policy,
  the tools and the format note, then `User: ` and the user's first message) and each later user message
  as the agent is shown it (`User: ...`), whoever plays the user (the `user` role or an endpoint);
- the tool result of call step i (its content as τ² returns it: JSON, a plain string, or `Error: ...`;
  not the `Tool result: ` in front): turn i;
- an agent action (its text as written: tool calls, messages, invalid ones): the agent's own, no source.

Not among them: the user's own observations (its guidelines and scenario, which the agent never sees) and
the environment's note after an invalid action (`Error: <why>. To call a tool, ...`).

**Events.** Turn j is the action's index in the episode: every action of either role is one turn, as the
rollout numbers them (a user behind an endpoint takes none). An agent's tool call is failed when τ²'s tool
response is an error (the tool raised: a wrong id, a wrong type; τ² shows `Error: ...`); an invalid action
(a malformed tool call, a tool the domain lacks, a refused `calculate`, an empty message) is failed too. A
tool call that is not failed gets one `Event("provenance", j, {"source": s, "kind": k})` per distinct
origin s of its values: `input` for s = -1, `success_utilization` for an earlier turn s. A failed action j
right after a failed action gets `failed_utilization` from it, and nothing else (after a failed action
the agent acts again, so that action is j - 1). A message to the user (`###STOP###` included) gets none and
is not failed; the user's actions get none.

    retail task 0 (a user: "You received your order #W2378156 ... You are Yusuf Rossi in zip code 19122.")
    0 user: You received your order #W2378156 and wish to exchange ... in zip code 19122.           none
    1 find_user_id_by_name_zip(first_name="Yusuf", last_name="Rossi", zip="19122")
        -> yusuf_rossi_9620                                                                   source -1
    2 get_user_details(user_id="yusuf_rossi_9620")
        -> {..., "payment_methods": {"credit_card_9513926": ...}, "orders": [..., "#W2378156"]}   turn 1
    3 get_order_details(order_id="#W2378156")  -> {..., "item_id": "1151293680", "product_id": "1656367028",
        ...}                                             source -1 (the user said it before 2 showed it)
    4 get_product_details(product_id="1656367028")  -> {..., "7706410293": {...}, ...}              turn 3
    5 get_product_details(product_id="W2378156")  -> Error: Product not found             none (failed)
    6 get_order_details(order_id="2378156")  -> Error: Order not found       turn 5 (failed_utilization)
    7 Which keyboard would you like?                                                               none
    8 user: You are Yusuf Rossi in zip code 19122. Yes, please go ahead.                           none
    9 exchange_delivered_order_items(order_id="#W2378156", item_ids=["1151293680"],
        new_item_ids=["7706410293"], payment_method_id="credit_card_9513926")    source -1, turns 2, 3, 4

The events change no observation, reward, info, split or the demonstrator's plays (pinned by
tests/envs/benchmarks/test_tau2_pins.py).
"""

from __future__ import annotations

from typing import Any

from common.episode import Event
from envs.api.provenance import USER, Provenance

__all__ = ["USER", "Tau2Provenance"]


class Tau2Provenance(Provenance):
    """One tau2 episode's texts as the agent saw and wrote them, and the events of the agent's actions."""

    def user(self, shown: str) -> None:
        """A user message as the agent is shown it (the first one with the agent prompt in front)."""
        self.see(shown, USER)

    def tool_call(self, turn: int, action: str, arguments: dict[str, Any], error: bool,
                  result: str) -> list[Event]:
        """The events of tool call `turn` (its `arguments`; `error`: τ²'s response is an error); then its
        `result` (the response's content) is turn `turn`'s."""
        events = self.step(turn, action, [arguments], failed=error)
        self.see(result, turn)
        return events

    def invalid(self, turn: int, action: str) -> list[Event]:
        """The events of invalid action `turn` (failed)."""
        return self.step(turn, action, [], failed=True)

    def message(self, turn: int, action: str) -> None:
        """The agent's message `turn` to the user: no events, not failed."""
        self.step(turn, action, [], failed=False)
