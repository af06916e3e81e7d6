"""The tasks of `chain_tasks`' families (`chain_families.py` tells the whole story): the settings a family
run needs (`check`), one ticket of a family (`member`), whole families per split (`family_tasks`), the demo
split's scripted chains (`scripted_chain`) and the tokenizer's texts (`corpus`)."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, Any

from datasets import DatasetDict

from envs.api.base import Observation
from envs.api.families import family_splits
from envs.testbeds import skill_prior as prior
from envs.testbeds.chain_apps import DAYS, NAMES
from envs.testbeds.chain_families import ROLES, STEPS, CurateEpisode, FamilyEpisode
from envs.testbeds.skill_families import parse_skill

if TYPE_CHECKING:
    from envs.testbeds.chain_tasks import ChainTasksConfig


def tiers(cfg: ChainTasksConfig) -> tuple[int, ...]:
    """The plan lengths, shortest first: `family_min_plan` .. `family_steps`."""
    return tuple(range(cfg.family_min_plan, cfg.family_steps + 1))


def check(cfg: ChainTasksConfig) -> None:
    """One-line errors for family settings that cannot work."""
    if not (1 <= cfg.family_min_plan <= cfg.family_steps and cfg.family_distractors >= 0
            and cfg.family_steps + cfg.family_distractors <= len(ROLES)):
        raise ValueError("env.families=true needs 1 <= env.family_min_plan <= env.family_steps, "
                         f"env.family_distractors >= 0 and env.family_steps + env.family_distractors <= "
                         f"{len(ROLES)} (the roles); got {cfg.family_min_plan}, {cfg.family_steps}, "
                         f"{cfg.family_distractors}")
    if not 0 <= cfg.order_prior <= 1:
        raise ValueError(f"env.order_prior must be in [0, 1]; got {cfg.order_prior}")
    if cfg.max_skill_words < 1 or cfg.invalid_penalty < 0:
        raise ValueError("need env.max_skill_words >= 1 and env.invalid_penalty >= 0; "
                         f"got {cfg.max_skill_words}, {cfg.invalid_penalty}")
    if not (cfg.demo_abstract >= 0 and cfg.demo_concrete >= 0 and cfg.demo_abstract + cfg.demo_concrete <= 1):
        raise ValueError("need env.demo_abstract, env.demo_concrete >= 0 with a sum <= 1; "
                         f"got {cfg.demo_abstract}, {cfg.demo_concrete}")
    k = len(tiers(cfg))
    sizes = {key: getattr(cfg, key) for key in ("train_size", "heldout_size", "dev_size", "demo_size")}
    for key, size in sizes.items():
        if size % k:
            raise ValueError(f"env.{key} must be a multiple of {k} with env.families=true (whole families, "
                             f"one task per plan length {tiers(cfg)}); got {size}")
    if not cfg.order_prior and sum(sizes.values()) // k > math.perm(len(STEPS), cfg.family_steps):
        raise ValueError(f"{sum(sizes.values()) // k} families need as many procedures, but there are only "
                         f"{math.perm(len(STEPS), cfg.family_steps)} of env.family_steps={cfg.family_steps}")



def member(rng: random.Random, cfg: ChainTasksConfig, family: str, order: list[str], plan: int,
           earlier: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One ticket of a family: the people of the procedure's first `plan` steps and the distractors, each a
    name no earlier ticket of the family gave that role, and a day."""
    involved = list(dict.fromkeys(step.split()[1] for step in order[:plan]))
    free = [r for r in ROLES if r not in {step.split()[1] for step in order}]
    roles = involved + rng.sample(free, cfg.family_distractors)
    rng.shuffle(roles)
    held = {r: {n for task in earlier for rr, n in task["people"] if rr == r} for r in roles}
    for _ in range(100):
        names: list[str] = []
        for r in roles:
            options = [n for n in NAMES if n not in held[r] and n not in names]
            if not options:
                break
            names.append(rng.choice(options))
        if len(names) == len(roles):
            return {"family": family, "order": list(order), "plan": plan,
                    "people": [[r, n] for r, n in zip(roles, names, strict=True)], "day": rng.choice(DAYS)}
    raise ValueError(f"cannot draw fresh people for a ticket of {family}: lower env.family_steps")


def family_tasks(cfg: ChainTasksConfig) -> DatasetDict:
    """Whole families per split (train, held-out, dev, demo), each with a procedure no other family anywhere
    has; the demo split's families are scripted chains, played from a stream of their own. With
    `order_prior` = q > 0 the procedures are drawn independently from a prior every family shares
    (`skill_prior.py`: each step is the listed successor of the step before in `STEPS` with probability q),
    so families may share one."""
    rng = random.Random(f"{cfg.data_seed}/chain-families")
    play_rng = random.Random(f"{cfg.data_seed}/chain-families-demo")
    plans = tiers(cfg)
    draws = itertools.count()

    def procedure() -> list[str]:
        if not cfg.order_prior:
            return rng.sample(STEPS, cfg.family_steps)
        return prior.prior_order(rng, STEPS, cfg.family_steps, cfg.order_prior)

    def key(order: list[str]) -> Hashable:  # with the prior every draw is new (procedures may repeat)
        return tuple(order) if not cfg.order_prior else next(draws)

    def members(family: str, order: list[str]) -> list[dict[str, Any]]:
        tasks: list[dict[str, Any]] = []
        for plan in plans:
            tasks.append(member(rng, cfg, family, order, plan, tasks))
        return tasks

    return family_splits(cfg, len(plans), procedure, key, members,
                         lambda tasks: scripted_chain(cfg, tasks, play_rng))


def scripted_chain(cfg: ChainTasksConfig, tasks: list[dict[str, Any]],
                   rng: random.Random) -> list[dict[str, Any]]:
    """The rows of one scripted chain (the SFT warm start's data): solve 0, curate 0, solve 1, ..., solve K-1,
    each solve row with the document the scripted curator wrote so far, each curate row (`kind: curate`) with
    the steps the demonstrator made in the task before it."""
    rows: list[dict[str, Any]] = []
    doc = ""
    for p, task in enumerate(tasks):
        solve = {**task, "skill": doc}
        rows.append(solve)
        if p == len(tasks) - 1:
            break
        ep = FamilyEpisode(solve, cfg, rng)
        obs: Observation | None = ep.start()
        found: list[str] = []
        while obs is not None:
            result = ep.step(ep.expert_action())
            obs, found = result.next, list(result.info.get("found", found))
        curate = {**task, "kind": "curate", "skill": doc, "found": found}
        rows.append(curate)
        document = CurateEpisode(curate, cfg, rng).expert_action()
        doc = " ".join(parse_skill(document, cfg.max_skill_words) or [])
    return rows
