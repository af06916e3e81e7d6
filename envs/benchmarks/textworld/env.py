"""`textworld`: the environment class, which plays single games (`games.py`) or chains of family
games with a curate turn (`families.py`, `env.families=true`); the module docstring of `games.py`
tells the whole story."""

from __future__ import annotations

import random
from collections.abc import Mapping
from importlib import metadata
from typing import Any, ClassVar

from datasets import DatasetDict

from envs.api.base import Environment, EpisodeState, Observation
from envs.benchmarks.textworld import families, family_splits
from envs.benchmarks.textworld.games import (
    LICENSE,
    PACKAGE,
    PLAYER,
    TextWorldConfig,
    TextWorldEpisode,
)


class TextWorldEnv(Environment):
    name = "textworld"
    roles: ClassVar[tuple[str, ...]] = (PLAYER,)
    offers = frozenset({"single_agent"})  # envs/api/features.py
    config_class = TextWorldConfig
    oracle_settings = {"demo_slip": 0.0}
    stop = ("\n",)

    @classmethod
    def offers_for(cls, settings: Mapping[str, Any]) -> frozenset[str]:
        return frozenset({"task_families"}) if settings.get("families") else cls.offers

    def __init__(self, cfg: TextWorldConfig):
        if not cfg.quest_lengths or any(q < 1 for q in cfg.quest_lengths) or cfg.rooms < 1 or cfg.objects < 0:
            raise ValueError(f"env.quest_lengths must be >= 1 each, env.rooms >= 1, env.objects >= 0; got "
                             f"{cfg.quest_lengths}, {cfg.rooms}, {cfg.objects}")
        if cfg.max_steps < 1 or not 0.0 <= cfg.demo_slip <= 1.0:
            raise ValueError("env.max_steps must be >= 1 and env.demo_slip in [0, 1]; "
                             f"got {cfg.max_steps}, {cfg.demo_slip}")
        if cfg.families:
            family_splits.check_families(cfg)
            # this instance's roles and offers (the class's are those of the default mode)
            self.roles = ("solver", "curator")  # type: ignore[misc]
            self.offers = self.offers_for({"families": True})  # type: ignore[misc]
        super().__init__(cfg)
        self.cfg: TextWorldConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(self.cfg.quest_lengths)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """A game's settings: its quest length and seed (the game itself is made on first play)."""
        return {"quest_length": tier, "seed": rng.randrange(2**31)}

    def task_set(self) -> DatasetDict:
        """The base's splits (`Environment.task_set`), each from its own seed stream (`split_rng`), no game
        seed in two splits (`task_key`). With families: whole families per split, one game per tier in
        consecutive rows (`family_tasks`)."""
        if self._tasks is None and self.cfg.families:
            self._tasks = family_splits.family_tasks(self.cfg, self.tiers)
        return super().task_set()

    def split_rng(self, split: str, stream: random.Random) -> random.Random:
        """Each split draws from its own stream, seeded by data_seed and the split's name."""
        return random.Random(f"{self.cfg.data_seed}/{split}")

    def task_key(self, task: dict[str, Any]) -> str:
        """A game is its seed."""
        return str(task["seed"])

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant not in self.variants():
            raise ValueError(f"textworld has no episode variant {variant!r}; it has {self.variants()}")
        if variant == "curate" or task.get("kind") == "curate":  # a curate row of the demo split's chains
            return families.CurateEpisode(task, self.cfg, rng)
        if self.cfg.families:
            return families.FamilyEpisode(task, self.cfg, rng)
        return TextWorldEpisode(task, self.cfg, rng)

    def variants(self) -> tuple[str, ...]:
        return ("main", "curate") if self.cfg.families else ("main",)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        return {"benchmark": "TextWorld (Côté et al. 2018, arXiv 1806.11532)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE,
                "tasks": "games made by textworld.generator.make_game from (data_seed, split) seed streams",
                "data_seed": self.cfg.data_seed, "quest_lengths": self.cfg.quest_lengths,
                "rooms": self.cfg.rooms, "objects": self.cfg.objects,
                "splits": {"train": self.cfg.train_size, "heldout": self.cfg.heldout_size,
                           "dev": self.cfg.dev_size, "demo": self.cfg.demo_size},
                **({"families": "games built by textworld.GameMaker from per-family hidden recipes "
                                "(colours of things on colours of places), fresh nouns per game, "
                                "[I] for chains with a curate turn",
                    "family_distractors": self.cfg.family_distractors} if self.cfg.families else {})}

    def oracle_action(self, state: EpisodeState, obs: Observation) -> str:
        """With `families` the hidden recipe (the demonstrator searches where it has no skill document);
        the default games' demonstrator is an oracle already."""
        return getattr(state, "oracle_action", state.expert_action)()  # type: ignore[no-any-return]

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """A verb uniform over the game's verbs, with a direction (`go`) or an entity of the game, uniform."""
        game = state.engine._game  # type: ignore[attr-defined]
        verb = rng.choice([v for v in game.verbs if v not in ("look", "inventory")] or ["go"])
        targets = ['north', 'south', 'east', 'west'] if verb == 'go' else game.entity_names or ['it']
        return f"{verb} {rng.choice(targets)}"
