"""River's repetition penalty: a process-level regularizer against command loops (torch-free).

A terminal agent that repeats a command and gets the same output back is looping. River adds a
per-turn term to the episode's group-normalized advantage A_i:

    Ã_{i,t} = A_i + s_{i,t}
    s_{i,t} = -delta  if there is an earlier turn u < t of episode i with
                      J(cmd_t, cmd_u) > threshold and J(obs_t, obs_u) > threshold,
              0       otherwise,
    while the episode's total penalty stays within `cap` (no partial penalty past it),

with J the Jaccard similarity of the sets of whitespace-separated tokens (two empty texts are
identical: J = 1). The paper's values: threshold 0.8, delta 0.05, cap 0.15 (at most three
penalized turns per episode). The term applies to that turn's tokens only; the rest of the
episode keeps A_i (`replications/river/method.py` routes it through `Credit.tokens`).
"""

from __future__ import annotations

from collections.abc import Sequence


def jaccard(a: str, b: str) -> float:
    """|A ∩ B| / |A ∪ B| over the sets of whitespace-separated tokens of `a` and `b`; 1.0 for two empty texts.

    >>> jaccard("cat a", "cat a"), jaccard("cat a", "cat b"), jaccard("", ""), jaccard("", "ls")
    (1.0, 0.3333333333333333, 1.0, 0.0)
    """
    sa, sb = set(a.split()), set(b.split())
    if not sa and not sb:
        return 1.0
    return len(sa & sb) / len(sa | sb)


def repeated_turns(turns: Sequence[tuple[str, str]], threshold: float = 0.8) -> list[bool]:
    """Per turn: whether its command and its observation are both more than `threshold` similar
    (Jaccard) to those of one and the same earlier turn of the episode."""
    flags = []
    for t, (cmd, obs) in enumerate(turns):
        flags.append(any(jaccard(cmd, c) > threshold and jaccard(obs, o) > threshold for c, o in turns[:t]))
    return flags


def repetition_penalty(turns: Sequence[tuple[str, str]], threshold: float = 0.8, delta: float = 0.05,
                       cap: float = 0.15) -> list[float]:
    """River's repetition penalty s_{i,t}: one value per turn of an episode.

    `turns` are the episode's (command, observation) pairs in order. A turn whose command and
    observation both have Jaccard similarity above `threshold` with those of some earlier turn gets
    -`delta`, for as long as the episode's total penalty stays within `cap`; a repeat that would take
    the total past `cap` gets 0 (no partial penalty). Every other turn gets 0.

    >>> repetition_penalty([("cat a", "k1 5"), ("cat a", "k1 5"), ("ls", "a b"), ("cat a", "k1 5")])
    [0.0, -0.05, 0.0, -0.05]
    >>> repetition_penalty([("ls", "a")] * 6)  # five repeats; the cap 0.15 allows three
    [0.0, -0.05, -0.05, -0.05, 0.0, 0.0]
    """
    if not 0.0 <= threshold <= 1.0:
        raise ValueError(f"threshold is a Jaccard similarity in [0, 1]; got {threshold}")
    if delta < 0 or cap < 0:
        raise ValueError(f"delta and cap are magnitudes (>= 0); got delta={delta}, cap={cap}")
    out, total = [], 0.0
    for repeated in repeated_turns(turns, threshold):
        # a small tolerance so that 3 x 0.05 counts as within 0.15 despite floating point
        if repeated and total + delta <= cap + 1e-12:
            total += delta
            out.append(-delta)
        else:
            out.append(0.0)
    return out
