"""The games of TextWorld's families (`families.py` tells the whole story): each family's hidden recipe,
each game's things, places and room (`family_game`), and the game itself, built by TextWorld's
`GameMaker` and cached (`family_game_file`)."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
from pathlib import Path
from typing import Any

from envs.benchmarks.textworld.games import TextWorldConfig, _textworld

# families: a thing or place is "<colour> <noun>"; the recipe speaks of colours, every game draws fresh nouns
COLOURS = ("red", "blue", "green", "yellow", "white", "black", "brown", "pink", "grey", "orange", "purple",
           "gold")
THING_NOUNS = ("mug", "lamp", "shoe", "book", "cup", "hat", "coin", "ball", "pen", "bowl", "sock", "fork",
               "spoon", "plate", "bottle", "clock", "brush", "candle", "glove", "scarf", "bell", "jar",
               "comb", "vase")
PLACE_NOUNS = ("stand", "shelf", "desk", "table", "bench", "rack", "stool", "counter", "tray", "dresser",
               "crate", "pedestal")
ROOM_NOUNS = ("attic", "kitchen", "cellar", "study", "hall", "pantry", "workshop", "bedroom", "library",
              "garage")


@functools.cache
def _game_options() -> Any:
    """GameMaker's options with TextWorld's knowledge base loaded once per process (~1 s to parse)."""
    options = _textworld().GameOptions()
    options.kb  # noqa: B018  (loads and keeps it)
    return options


def family_game_file(cache_dir: str, task: dict[str, Any]) -> str:
    """The JSON game of a families task (module doc), built with TextWorld's GameMaker on first use and
    cached: one room, the things on its floor, the places (supporters), one quest per placement of the
    plan (`on(thing, place)`: score +1 when it first holds; won when all do)."""
    tw = _textworld()
    world = {k: task[k] for k in ("room", "things", "places", "recipe", "plan")}
    blob = json.dumps([tw.__version__, "families", world], sort_keys=True).encode()
    key = hashlib.sha256(blob).hexdigest()[:16]
    path = Path(cache_dir) / f"twf-{key}.json"
    if not path.exists():
        from textworld.generator.game import Event, Game, Quest
        from textworld.generator.world import World

        maker = tw.GameMaker(_game_options())
        room = maker.new_room(task["room"])
        maker.set_player(room)
        entity = {}
        for kind, items in (("o", task["things"]), ("s", task["places"])):
            for colour, noun in items:
                entity[f"{colour} {noun}"] = maker.new(type=kind, name=f"{colour} {noun}")
                room.add(entity[f"{colour} {noun}"])
        things, places = dict(map(reversed, task["things"])), dict(map(reversed, task["places"]))
        name_of = {colour: f"{colour} {noun}" for colour, noun in [*task["things"], *task["places"]]}
        assert len(things) == len(task["things"]) and len(places) == len(task["places"])

        def quest(thing: str, place: str) -> Any:
            """The quest of one step of the recipe: won when the thing of colour `thing` is on the place of
            colour `place`."""
            fact = maker.new_fact("on", entity[name_of[thing]], entity[name_of[place]])
            return Quest(win_events=[Event(conditions={fact})])

        maker.quests = [quest(t, p) for t, p in task["recipe"][: task["plan"]]]
        maker.validate()
        game = Game(World.from_facts(maker.facts, kb=maker._kb), quests=maker.quests)
        for k in game.infos:
            if k in maker._entities:
                game.infos[k] = maker._entities[k].infos
        game.metadata["desc"] = "a family game (envs/benchmarks/textworld/families.py)"
        game._objective = objective(task["plan"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        game.save(str(tmp))
        tmp.replace(path)
    return str(path)


def objective(plan: int) -> str:
    return (f"Put each thing on its place. {plan} of the things here {'has' if plan == 1 else 'have'} one; "
            "which goes where is for you to find. Reply with one of the listed commands.")


def new_recipe(rng: random.Random, tiers: tuple[int, ...]) -> list[list[str]]:
    """A family's hidden recipe: max(tiers) placements, thing colour -> place colour, no colour twice."""
    colours = rng.sample(COLOURS, 2 * max(tiers))
    return [[colours[2 * i], colours[2 * i + 1]] for i in range(max(tiers))]


def family_game(cfg: TextWorldConfig, rng: random.Random, family: str, recipe: list[list[str]],
                plan: int) -> dict[str, Any]:
    """One game of a family: the recipe's first `plan` placements, fresh nouns and room, distractor
    things and places whose colours are in no step of the recipe."""
    d = cfg.family_distractors
    others = rng.sample([c for c in COLOURS if all(c not in pair for pair in recipe)], 2 * d)
    thing_colours = [t for t, _ in recipe[:plan]] + others[:d]
    place_colours = [p for _, p in recipe[:plan]] + others[d:]
    things = [[c, n] for c, n in zip(thing_colours, rng.sample(THING_NOUNS, len(thing_colours)), strict=True)]
    places = [[c, n] for c, n in zip(place_colours, rng.sample(PLACE_NOUNS, len(place_colours)), strict=True)]
    rng.shuffle(things)
    rng.shuffle(places)
    return {"family": family, "recipe": recipe, "plan": plan, "room": rng.choice(ROOM_NOUNS),
            "things": things, "places": places}
