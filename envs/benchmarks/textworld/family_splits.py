"""The splits of TextWorld's families (`families.py` tells the whole story): whole families per split,
each with a recipe of its own (`family_tasks`), the demo split's scripted chains (`scripted_chain`),
and the settings a family run needs (`check_families`)."""

from __future__ import annotations

import json
import random
from typing import Any

from datasets import DatasetDict

from envs.api.base import Observation
from envs.api.families import family_splits
from envs.benchmarks.textworld.families import CurateEpisode, FamilyEpisode, parse_skill
from envs.benchmarks.textworld.family_games import COLOURS, PLACE_NOUNS, THING_NOUNS, family_game, new_recipe
from envs.benchmarks.textworld.games import TextWorldConfig


def family_tasks(cfg: TextWorldConfig, tiers: tuple[int, ...]) -> DatasetDict:
    """Whole families per split (train, held-out, dev, demo), each a recipe no other family anywhere has;
    the demo split's families are scripted chains (`scripted_chain`), played with their own random stream
    so that the other splits do not depend on it."""
    rng = random.Random(f"{cfg.data_seed}/families")
    play_rng = random.Random(f"{cfg.data_seed}/demo-chains")
    return family_splits(cfg, len(tiers), lambda: new_recipe(rng, tiers), json.dumps,
                         lambda name, recipe: [family_game(cfg, rng, name, recipe, plan) for plan in tiers],
                         lambda games: scripted_chain(cfg, games, play_rng))


def scripted_chain(cfg: TextWorldConfig, games: list[dict[str, Any]],
                   rng: random.Random) -> list[dict[str, Any]]:
    """The rows of one scripted chain (the SFT warm start's data): solve 0, curate 0, solve 1, ..., solve
    K-1. Each solve row carries the document the scripted curator wrote so far; each curate row
    (`kind: curate`) the placements the demonstrator found in the game before it."""
    rows: list[dict[str, Any]] = []
    doc = ""
    for p, game in enumerate(games):
        solve = {**game, "skill": doc}
        rows.append(solve)
        if p == len(games) - 1:
            break
        ep = FamilyEpisode(solve, cfg, rng)
        obs: Observation | None = ep.start()
        result = None
        while obs is not None:
            result = ep.step(ep.expert_action())
            obs = result.next
        found = list(result.info["found"]) if result else []
        curate = {**game, "kind": "curate", "skill": doc, "found": found}
        rows.append(curate)
        document = CurateEpisode(curate, cfg, rng).expert_action()
        doc = " ".join(parse_skill(document, cfg.max_skill_words) or [])
    return rows


def check_families(cfg: TextWorldConfig) -> None:
    """One-line errors for family settings that cannot work."""
    k, longest, d = len(cfg.quest_lengths), max(cfg.quest_lengths), cfg.family_distractors
    if len(set(cfg.quest_lengths)) != k:
        raise ValueError("env.quest_lengths must be distinct with env.families=true (one game per plan "
                         f"length); got {cfg.quest_lengths}")
    if d < 0 or 2 * longest + 2 * d > len(COLOURS) or longest + d > min(len(THING_NOUNS), len(PLACE_NOUNS)):
        raise ValueError("env.families=true needs 2 * max(env.quest_lengths) + 2 * env.family_distractors "
                         f"<= {len(COLOURS)} colours and env.family_distractors >= 0; "
                         f"got {cfg.quest_lengths}, {d}")
    if cfg.family_slack < 0 or cfg.max_skill_words < 1 or cfg.invalid_penalty < 0:
        raise ValueError("need env.family_slack >= 0, env.max_skill_words >= 1 and env.invalid_penalty >= 0")
    if not (cfg.demo_abstract >= 0 and cfg.demo_concrete >= 0 and cfg.demo_abstract + cfg.demo_concrete <= 1):
        raise ValueError("need env.demo_abstract, env.demo_concrete >= 0 with a sum <= 1")
    for key in ("train_size", "heldout_size", "dev_size", "demo_size"):
        if getattr(cfg, key) % k:
            raise ValueError(f"env.{key} must be a multiple of {k} with env.families=true (whole families, "
                             f"one game per plan length {cfg.quest_lengths}); got {getattr(cfg, key)}")
