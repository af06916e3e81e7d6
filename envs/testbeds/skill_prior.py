"""A prior over `skill_families`' orders (`env.order_prior` = q > 0; issue #41's fourth attempt).

Real related tasks share general structure as well as family-specific procedure (one reads before one
writes). Each step of a family's order is, with probability q, the successor of the step before in the
listed order of the steps (read, filter, sort, ...; the first step's successor of the start, `read`) when
that step is still free, else uniform over the free ones. Orders are then drawn independently, so families
may share one (a task never names its family). A policy can learn this prior into its weights, so RL
without a document has something to learn that transfers to held-out families; the demonstrator does not
know it (it searches uniformly by elimination), and a document still carries what the prior does not.

>>> successors(("a", "b", "c"))
{None: 'a', 'a': 'b', 'b': 'c', 'c': 'a'}
>>> import random
>>> prior_order(random.Random(0), ("a", "b", "c", "d"), 3, 1.0)
['a', 'b', 'c']
"""

from __future__ import annotations

import random


def successors(roles: tuple[str, ...]) -> dict[str | None, str]:
    """The prior's next step after each step (None: the start), the steps' listed order, cyclic."""
    return {None: roles[0], **{r: roles[(i + 1) % len(roles)] for i, r in enumerate(roles)}}


def prior_order(rng: random.Random, roles: tuple[str, ...], length: int, q: float) -> list[str]:
    """One order of `length` distinct steps drawn from the prior of strength `q` (module doc)."""
    nxt_of = successors(roles)
    order: list[str] = []
    while len(order) < length:
        nxt = nxt_of[order[-1] if order else None]
        free = [r for r in roles if r not in order]
        order.append(nxt if nxt in free and rng.random() < q else rng.choice(free))
    return order
