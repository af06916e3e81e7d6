"""`textworld`: text games generated offline by TextWorld's own generator, played on its own engine.

Provenance: TextWorld (Côté et al. 2018, arXiv 1806.11532), the PyPI package `textworld` (1.7.0; MIT),
installed without its dependencies (`pip install --no-deps`; its generator and logic engine need
tatsu 5.8.3, hashids, mementos, networkx, numpy, more-itertools, termcolor, prompt-toolkit). Its
`jericho` dependency (a Z-machine interpreter, built from source, pulling in spaCy) only plays
compiled `.z8` games; it is never used here, so a placeholder module stands in for it when it is
absent (`_textworld`). Games are made by `textworld.generator.make_game` from a seed and the tier's
settings (rooms, objects, quest length), saved as TextWorld's JSON games under `cache_dir`
(`.cache/textworld/`, ignored; made once, on first play) and played by TextWorld's JSON backend
(`textworld.envs.tw.TextWorldEnv`: its logic engine, the game's rules, quests and win/lose
conditions). Nothing is downloaded. `TextWorldEnv.provenance()` gives the same facts for a manifest.

One role (`player`). The JSON backend has no narrative text (that needs the compiled game), so the
observation is rendered from the game's own state facts: the objective (first turn), the feedback
(`Invalid command.` or the effect), where the player is, what is here (open containers' and
supporters' contents included), the exits, what the player carries and, with `show_commands`, the
admissible commands (TextWorld's `admissible_commands`). The action is one command (the first line,
matched case-insensitively to TextWorld's command strings; with families, a reply that names a
listed command in its first 300 characters plays the first one named, `FamilyEpisode.command_in`); a
command the game does not admit is an `invalid_action` (TextWorld's own "Invalid command.", no
effect). The episode ends when the quest is won (reward 1) or lost, or after `max_steps` commands
(reward 0).

Splits: every task is (tier, seed); each split draws its seeds from its own stream of `data_seed`,
so no game is in two splits: train, held-out and dev (and demo). Tiers are quest lengths
(`quest_lengths`, default 1, 2, 3), with `rooms` rooms and `objects` objects.

The scripted demonstrator (the SFT warm start's data; the oracle of `python -m envs check`)
plays TextWorld's winning policy from the current state (`policy_commands`: the game's walkthrough
when nothing went astray). Injected error: with probability `demo_slip` per turn it plays an
admissible command uniformly instead.

**Families** (`families: true`, off by default): chains of related games with a curate turn, built by
TextWorld's `GameMaker` from per-family hidden recipes; `envs/benchmarks/textworld/families.py` has them
(its module doc describes the design, the demonstrator and the curate turn).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common.episode import Event
from envs.api.base import EnvConfig, EpisodeState, Observation, StepResult

PACKAGE, LICENSE = "textworld", "MIT"
PLAYER = "player"
MAX_COMMAND_CHARS = 200
DIRECTIONS = ("north", "south", "east", "west")


def _textworld() -> Any:
    """The textworld package; a placeholder `jericho` (only its two warning classes are read at import)
    when the real one is not installed: the JSON backend never touches it."""
    try:
        import jericho  # noqa: F401
    except ImportError:
        stub = types.ModuleType("jericho")
        for name in ("UnsupportedGameWarning", "TruncatedInputActionWarning"):
            setattr(stub, name, type(name, (UserWarning,), {}))
        sys.modules.setdefault("jericho", stub)
    import textworld

    return textworld


@dataclass
class TextWorldConfig(EnvConfig):
    name: str = "textworld"
    train_size: int = 96
    heldout_size: int = 48
    dev_size: int = 24
    quest_lengths: list[int] = field(default_factory=lambda: [1, 2, 3])  # tiers
    rooms: int = 3
    objects: int = 5
    max_steps: int = 20  # commands per episode
    show_commands: bool = True  # list the admissible commands in every observation
    demo_slip: float = 0.0  # the demonstrator plays a uniformly drawn admissible command instead, per turn
    cache_dir: str = ".cache/textworld"  # generated games (relative to the working directory)
    # ---- families (chains of related games with a curate turn; see the module doc). Off: every setting
    # below is unused.
    # games built from per-family hidden recipes, roles solver and curator, a curate variant
    families: bool = False
    family_distractors: int = 1  # things and places per game whose colours are in no step of the recipe
    family_slack: int = 2  # commands beyond the 2 L a game of plan length L needs (max_steps caps it too)
    max_skill_words: int = 12  # the skill document's length limit, in words
    invalid_penalty: float = 0.0  # subtracted per command the game does not admit and per invalid curate turn
    demo_abstract: float = 0.3  # the scripted curator writes the colours of the placements found ...
    demo_concrete: float = 0.3  # ... or their nouns; otherwise an empty document (the demo split's chains)


@functools.cache
def game_file(cache_dir: str, seed: int, quest_length: int, rooms: int, objects: int) -> str:
    """The JSON game of these settings, made by TextWorld's generator on first use and cached."""
    tw = _textworld()
    blob = json.dumps([tw.__version__, seed, quest_length, rooms, objects]).encode()
    key = hashlib.sha256(blob).hexdigest()[:16]
    path = Path(cache_dir) / f"tw-{key}.json"
    if not path.exists():
        from textworld.generator import make_game

        options = tw.GameOptions()
        options.seeds = seed
        options.nb_rooms, options.nb_objects, options.quest_length = rooms, objects, quest_length
        path.parent.mkdir(parents=True, exist_ok=True)
        # one per process: parallel runs make the same game
        tmp = path.with_suffix(f".{seed}.{os.getpid()}.tmp")
        make_game(options).save(str(tmp))
        tmp.replace(path)
    return str(path)



def render(facts: list[Any]) -> str:
    """Where the player is, what is here, exits and inventory, from the game's (human-readable) facts."""
    rel: dict[str, list[tuple[str, ...]]] = {}
    for f in facts:
        rel.setdefault(f.name, []).append(tuple(v.name for v in f.arguments))
    room = next((r for p, r in rel.get("at", []) if p == "P"), "?")
    closed = {a[0] for a in rel.get("closed", [])}
    locked = {a[0] for a in rel.get("locked", [])}

    def thing(x: str) -> str:
        state = " (locked)" if x in locked else " (closed)" if x in closed else ""
        inside = [o for o, c in rel.get("in", []) if c == x] if x not in closed else []
        on = [o for o, s in rel.get("on", []) if s == x]
        extra = ((f" containing {', '.join(inside)}" if inside else "")
                 + (f" with {', '.join(on)} on it" if on else ""))
        return x + state + extra

    here = [thing(x) for x, r in rel.get("at", []) if r == room and x != "P"]
    exits = [d for d in DIRECTIONS for r2, r1 in rel.get(f"{d}_of", []) if r1 == room]
    carried = [o for o, c in rel.get("in", []) if c == "I"]
    return (f"You are in the {room}. Here: {'; '.join(here) or 'nothing'}. "
            f"Exits: {', '.join(exits) or 'none'}. "
            f"You carry: {', '.join(carried) or 'nothing'}.")


class TextWorldEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: TextWorldConfig, rng: random.Random):
        tw = _textworld()
        from textworld.envs.tw import TextWorldEnv as Engine

        self.cfg, self.rng = cfg, rng
        self.engine = Engine(tw.EnvInfos(admissible_commands=True, facts=True, objective=True, won=True,
                                         lost=True,
                                         policy_commands=True))
        self.engine.load(game_file(cfg.cache_dir, task["seed"], task["quest_length"], cfg.rooms, cfg.objects))
        self.state = self.engine.reset()
        self.steps = 0
        self.done = False

    def _text(self, feedback: str) -> str:
        commands = (f"\nCommands: {', '.join(self.state['admissible_commands'])}" if self.cfg.show_commands
                    else "")
        return f"{feedback}\n{render(self.state['facts'])}{commands}\n>"

    def start(self) -> Observation:
        return Observation(PLAYER, self._text(f"Objective: {self.state['objective']}"))

    def expert_action(self) -> str:
        if self.done:
            return "look"
        if self.rng.random() < self.cfg.demo_slip and self.state["admissible_commands"]:
            return str(self.rng.choice(self.state["admissible_commands"]))
        policy = self.state["policy_commands"] or ["look"]
        return str(policy[0])

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        lines = action.strip().splitlines()
        command = " ".join(lines[0].split()).lower()[:MAX_COMMAND_CHARS] if lines else ""
        admissible = {c.lower(): c for c in self.state["_valid_commands"]}
        events = []
        if command in admissible:
            self.state, _, _ = self.engine.step(admissible[command])
            feedback = "Done."
        else:
            events.append(Event("invalid_action", 0, {"why": "not an admissible command"}))
            feedback = "Invalid command."
        self.steps += 1
        won, lost = bool(self.state["won"]), bool(self.state["lost"])
        if won or lost or self.steps >= self.cfg.max_steps:
            self.done = True
            return StepResult(None, reward=float(won), success=won, events=events,
                              info={"won": won, "lost": lost, "steps": self.steps})
        return StepResult(Observation(PLAYER, self._text(feedback)), events=events)
