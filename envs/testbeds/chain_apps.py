"""The apps of `chain_tasks`' miniature world, shared by its default tasks (`chain_tasks.py`) and its families
(`chain_families.py`): the words a call may use, the apps' state (`World`) and one call's effect
(`apply_call`). The calls and their errors are described in `chain_tasks.py`'s module docstring."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from envs.api.base import parse_int

ITEMS = ("tea", "rice", "soap", "milk", "eggs", "bread", "jam", "salt", "oil", "fish")
NAMES = ("ana", "bob", "eve", "kim", "lee", "max", "sam", "zoe")
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
CALL = re.compile(r"^\s*([a-z]+)((?:\s+[a-z0-9]+)*)\s*$")


@dataclass
class World:
    """The apps' state. `contact_ids` and `order_id` are drawn per episode."""

    contact_ids: dict[str, int]
    order_id: int
    cart: dict[str, int] = field(default_factory=dict)
    paid: bool = False
    mails: list[tuple[int, int]] = field(default_factory=list)  # (contact id, order id)
    meetings: list[tuple[str, int]] = field(default_factory=list)  # (day, contact id)


def apply_call(w: World, call: str) -> tuple[str, bool]:
    """Run one call on `w`; returns (reply, ok). Errors leave the state unchanged."""
    m = CALL.match(call)
    bad = "error: bad call"
    if m is None:
        return bad, False
    verb, args = m.group(1), m.group(2).split()
    numbers = [parse_int(a) for a in args]  # None: not a number (or past 18 digits: a bad call)
    ids = {cid: name for name, cid in w.contact_ids.items()}
    if verb == "done" and not args:
        return "ok", True
    if verb == "add" and len(args) == 2 and numbers[1] is not None:
        if args[0] not in ITEMS:
            return f"error: no item {args[0]}", False
        if w.paid:
            return "error: already paid", False
        w.cart[args[0]] = w.cart.get(args[0], 0) + numbers[1]
        return "ok", True
    if verb == "remove" and len(args) == 1:
        if w.paid:
            return "error: already paid", False
        if w.cart.pop(args[0], None) is None:
            return f"error: no {args[0]} in cart", False
        return "ok", True
    if verb == "pay" and not args:
        if w.paid:
            return "error: already paid", False
        if not w.cart:
            return "error: cart empty", False
        w.paid = True
        return f"ok order {w.order_id}", True
    if verb == "find" and len(args) == 1:
        if args[0] not in w.contact_ids:
            return f"error: no contact {args[0]}", False
        return f"ok {args[0]} {w.contact_ids[args[0]]}", True
    if verb == "send" and len(args) == 2 and numbers[0] is not None and numbers[1] is not None:
        contact, order = numbers[0], numbers[1]
        if contact not in ids:
            return f"error: no contact {args[0]}", False
        if not w.paid or order != w.order_id:
            return f"error: no order {args[1]}", False
        w.mails.append((contact, order))
        return f"ok {ids[contact]} {args[0]}", True
    if verb == "book" and len(args) == 2 and numbers[1] is not None:
        if args[0] not in DAYS:
            return f"error: no day {args[0]}", False
        if numbers[1] not in ids:
            return f"error: no contact {args[1]}", False
        w.meetings.append((args[0], numbers[1]))
        return "ok", True
    return bad, False
