"""SkillRise's chain credit as plain functions (no torch): the curate reward and the advantage.

A chain plays K related tasks in order, solve(0) -> curate(0) -> solve(1) -> ... -> solve(K-1);
the policy's curate turn p rewrites the skill document that solve(p+1) will read. N chains of the
same K tasks form a *chain group*.

- Solve reward: r_p, the task's own reward (success minus the invalid-action penalty).
- Curate reward (the official code's `skillrise_credit_assignment`; `decay` is its `traj_gamma`):

      R_p = sum_{j>p} decay^(j-p) * r_j,        p = 0 .. K-2                         (curate)

  the discounted success of every *later* task, the only place credit crosses tasks.
- Advantage: one score per trajectory (a solve or a curate episode), grouped by
  (chain group, position, role), minus the group's mean, no division by its std; curate
  advantages are multiplied by `curate_loss_weight` (1 in the paper).
"""

from __future__ import annotations

import json  # noqa: F401  (the doctest of chains_of)
from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from common.credit import grpo
from common.episode import Episode, Group, Task
from common.rollout import PlaySpec

if TYPE_CHECKING:
    from common.rollout import Rollout


def curate_rewards(solve_rewards: Sequence[float], decay: float = 0.6) -> list[float]:
    """The K - 1 curate rewards of one chain from its K solve rewards: R_p = sum_{j>p} decay^(j-p) r_j.

    >>> curate_rewards([1.0, 0.0, 1.0])  # R_0 = 0.6*0 + 0.36*1, R_1 = 0.6*1
    [0.36, 0.6]
    >>> curate_rewards([0.0, 1.0, 1.0, 1.0], decay=0.5)
    [0.875, 0.75, 0.5]
    """
    if not 0.0 <= decay <= 1.0:
        raise ValueError(f"decay must be in [0, 1]; got {decay}")
    r = [float(x) for x in solve_rewards]
    return [sum(decay ** (j - p) * r[j] for j in range(p + 1, len(r))) for p in range(len(r) - 1)]


def current_task_rewards(solve_rewards: Sequence[float]) -> list[float]:
    """The control's curate rewards: the curate step after task p earns r_p, the reward of the task it
    just watched (nothing it writes can change it)."""
    return [float(x) for x in solve_rewards[:-1]]


def grouped_advantages(scores: Sequence[float], keys: Sequence[Hashable],
                       weights: Sequence[float] | None = None, std: bool = False) -> list[float]:
    """A_i = w_i * (s_i - mean of the scores that share key_i): mean-centered within each key, no std
    division (the key is (chain group, position, role)); `weights` scale each advantage (the curate
    loss weight), 1 by default. `std`: divided by the key's sample std (ddof 1) + 1e-6 as well, GRPO's
    normalization (`common.credit.grpo`; a key of one score gets 0).

    >>> grouped_advantages([1, 0, 0.5, 0.5], ["a", "a", "b", "b"])
    [0.5, -0.5, 0.0, 0.0]
    >>> [round(a, 4) for a in grouped_advantages([1, 0, 0, 0], ["a"] * 4, std=True)]  # std 0.5
    [1.5, -0.5, -0.5, -0.5]
    """
    if len(scores) != len(keys) or (weights is not None and len(weights) != len(scores)):
        raise ValueError(f"scores, keys and weights must have one entry per trajectory; got {len(scores)}, "
                         f"{len(keys)}, {len(weights) if weights is not None else '-'}")
    members: dict[Hashable, list[int]] = defaultdict(list)
    for i, key in enumerate(keys):
        members[key].append(i)
    out = [0.0] * len(scores)
    for idx in members.values():
        x = np.array([float(scores[i]) for i in idx])
        centred = grpo(x) if std else x - x.mean()
        for i, c in zip(idx, centred, strict=True):
            out[i] = (1.0 if weights is None else float(weights[i])) * float(c)
    return out


def role_token_scales(groups: list[Group], slots: list[list[Slot]],
                      excluded: Callable[[Episode], bool]) -> dict[str, float]:
    """Per-role token normalization: the factor N / N_role for each role's advantages, N the step's trained
    action tokens and N_role those of the role's turns (counted as `common.batch.build_rows` makes rows).
    The trainer's token mean divides every token's loss by N; times N / N_role, each role's tokens average
    over that role alone, so a solve token weighs what it weighs in an arm without curate turns (GRPO) and
    the curate turns no longer dilute it. Exact with one minibatch (`trainer.minibatches=1`).

    >>> from common.episode import Episode, Turn
    >>> turn = lambda role, n: Turn(role, "policy", [0], [1] * n, [0.0] * n, "")
    >>> s, c = Episode("a", 2, [turn("solver", 3), turn("solver", 3)]), Episode("a", 2, [turn("curator", 2)])
    >>> role_token_scales([Group("a", 2, [s]), Group("a/curate", 2, [c])],
    ...                   [[Slot(0, 0, "solve", 0)], [Slot(0, 0, "curate", 0)]], lambda e: False)
    {'solve': 1.3333333333333333, 'curate': 4.0}
    """
    tokens: dict[str, int] = defaultdict(int)
    for g, ss in zip(groups, slots, strict=True):
        for e, slot in zip(g.episodes, ss, strict=True):
            if not e.counts_for_training or excluded(e):
                continue
            trained = [t for t in e.turns if t.trainable and t.adapter is not None]
            tokens[slot.role] += sum(len(t.action_ids) for t in trained)
    total = sum(tokens.values())
    return {role: total / n for role, n in tokens.items() if n}


DOC_KINDS = ("abstract", "concrete", "empty", "other")


@dataclass
class Slot:
    """Where an episode sits in a step's chains: family index, chain position, role, chain index."""

    family: int
    position: int
    role: Literal["solve", "curate"]
    chain: int


def chains_of(tasks: list[Task]) -> list[list[Task]]:
    """Consecutive tasks of one family in rising plan length form one chain; a task of another family, or
    one whose plan is not longer than the last, starts the next chain (the same family may come twice).

    >>> fam = lambda f, t: Task(f"{f}{t}", t, json.dumps({"family": f}))
    >>> [[t.id for t in c]
    ...  for c in chains_of([fam("a", 2), fam("a", 3), fam("b", 2), fam("b", 3), fam("b", 2)])]
    [['a2', 'a3'], ['b2', 'b3'], ['b2']]
    """
    chains: list[list[Task]] = []
    last: tuple[str, int] | None = None
    for task in tasks:
        family = task.data["family"]
        if last is None or family != last[0] or task.tier <= last[1]:
            chains.append([])
        chains[-1].append(task)
        last = (family, task.tier)
    return chains


def family_indices(pool: Sequence[Task]) -> list[list[int]]:
    """Indices of each family's tasks in `pool` (families in order of first appearance), each family's
    by plan length."""
    by_family: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for i, task in enumerate(pool):
        by_family[task.data["family"]].append((task.tier, i))
    return [[i for _, i in sorted(v)] for v in by_family.values()]


def play_metrics(groups: list[Group], tiers: Sequence[int]) -> dict[str, float]:
    """Solve success overall and per plan length (`tiers`), and what the curate turns wrote (shares)."""
    solve = [e for g in groups for e in g.episodes if e.tag == "main"]
    cur = [e for g in groups for e in g.episodes if e.tag == "curate"]
    out = {"solve_success_rate": float(np.mean([e.success for e in solve])) if solve else 0.0}
    for tier in tiers:
        eps = [e for g in groups if g.tier == tier for e in g.episodes if e.tag == "main"]
        if eps:
            out[f"success_tier{tier}"] = float(np.mean([e.success for e in eps]))
    if cur:
        for kind in (*DOC_KINDS, "right"):
            out[f"doc_{kind}"] = float(np.mean([bool(e.info.get(f"doc_{kind}", False)) for e in cur]))
    return out


def chain_slots(groups: list[Group]) -> list[tuple[int, int, Literal["solve", "curate"]]]:
    """(family, position, role) of each group of a training step, read from the groups themselves as
    `SkillRise.play_chains` lays them out: per chain group, solve 0, curate 0, solve 1, ..., solve K-1
    (a curate group's task id ends with `/curate`); a solve group that no curate group follows ends its
    family's chain. No state is kept between the play and the credit, so any instance can credit them.

    >>> g = lambda task_id: Group(task_id, 1, [])
    >>> chain_slots([g("a2"), g("a2/curate"), g("a3"), g("b2"), g("b2/curate"), g("b3")])
    [(0, 0, 'solve'), (0, 0, 'curate'), (0, 1, 'solve'), (1, 0, 'solve'), (1, 0, 'curate'), (1, 1, 'solve')]
    """
    out: list[tuple[int, int, Literal["solve", "curate"]]] = []
    family, position = 0, 0
    for i, group in enumerate(groups):
        if group.task_id.endswith("/curate"):
            out.append((family, position, "curate"))
            position += 1
            continue
        out.append((family, position, "solve"))
        if i + 1 == len(groups) or not groups[i + 1].task_id.endswith("/curate"):
            family, position = family + 1, 0
    return out


def chain_scores(groups: list[Group], slots: list[list[Slot]],
                 curate_of: Callable[[list[float]], list[float]], excluded: Callable[[Episode], bool],
                 curate_weight: float
                 ) -> tuple[list[tuple[int, int]], list[float], list[tuple[int, int, str]], list[float]]:
    """Every kept episode's chain score, its normalization key and its weight, over a step's chain groups:
    a solve turn scores its own reward r_p; a curate turn `curate_of(r)[p]` (R_p, or r_p in the control)
    plus its own reward (the invalid-action penalty), weighted `curate_weight`. Key: (family, position,
    role). Returns (group index, episode index), scores, keys, weights, in step order."""
    solve_reward: dict[tuple[int, int, int], float] = {}  # (family, chain, position) -> r_p
    for g, ss in zip(groups, slots, strict=True):
        for e, s in zip(g.episodes, ss, strict=True):
            if s.role == "solve":
                solve_reward[s.family, s.chain, s.position] = e.reward
    curate_reward: dict[tuple[int, int, int], float] = {}
    for f, c in {(f, c) for f, c, _ in solve_reward}:
        r = [solve_reward[f, c, p] for p in sorted(p for ff, cc, p in solve_reward if (ff, cc) == (f, c))]
        for p, value in enumerate(curate_of(r)):
            curate_reward[f, c, p] = value
    flat: list[tuple[int, int]] = []
    scores: list[float] = []
    keys: list[tuple[int, int, str]] = []
    weights: list[float] = []
    for gi, (g, ss) in enumerate(zip(groups, slots, strict=True)):
        for i, (e, s) in enumerate(zip(g.episodes, ss, strict=True)):
            if excluded(e):
                continue
            is_curate = s.role == "curate"
            flat.append((gi, i))
            scores.append(curate_reward[s.family, s.chain, s.position] + e.reward if is_curate else e.reward)
            keys.append((s.family, s.position, s.role))
            weights.append(curate_weight if is_curate else 1.0)
    return flat, scores, keys, weights


def oracle_doc(task: Task) -> str:
    """The right abstract document after `task`: the first `plan` steps of its family's hidden order (what
    a perfect curator could know having solved it; `skill_families` tasks).

    >>> oracle_doc(Task("a", 2, json.dumps({"order": ["read", "sort", "check"], "plan": 2})))
    'read sort'
    """
    if "order" not in task.data or "plan" not in task.data:
        raise ValueError("method.arm=oracle needs tasks that carry their hidden order and plan "
                         "(env=skill_families)")
    return " ".join(task.data["order"][: task.data["plan"]])


def chain_spec(task: Task, mode: str, variant: str, **extra: Any) -> PlaySpec:
    """One play of a chain position: the task with what the chain hands it (`extra`: the document, what
    was found), tagged for compute accounting (solve or curate, training or evaluation)."""
    task = task.with_data(**extra)
    tag = (("eval" if variant == "main" else "eval/curate") if mode == "eval"
           else ("main" if variant == "main" else "curate"))
    return PlaySpec(task, variant, tag, trainable=mode == "train")


def play_specs(rollout: Rollout, specs: list[PlaySpec], step: int, mode: str, what: str) -> list[Episode]:
    """`Rollout.play` with the seeds `play_groups` would use, one salt per chain position and role."""
    salt = ("eval/main/chain/" if mode == "eval" else "train/chain/") + what + rollout.rank_salt
    return rollout.play(specs, -1 if mode == "eval" else step, salt=salt)
