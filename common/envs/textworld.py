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
admissible commands (TextWorld's `admissible_commands`). The action is one command (the first
line, matched case-insensitively to TextWorld's command strings; with families, a reply that names a
listed command in its first 300 characters plays the first one named, `FamilyEpisode.command_in`);
a command the game does not admit is an `invalid_action` (TextWorld's own "Invalid command.", no effect). The episode ends when
the quest is won (reward 1) or lost, or after `max_steps` commands (reward 0).

Splits: every task is (tier, seed); each split draws its seeds from its own stream of `data_seed`,
so no game is in two splits: train, held-out and dev (and demo). Tiers are quest lengths
(`quest_lengths`, default 1, 2, 3), with `rooms` rooms and `objects` objects.

The scripted demonstrator (the SFT warm start's data; the oracle of `python -m common.envs check`)
plays TextWorld's winning policy from the current state (`policy_commands`: the game's walkthrough
when nothing went astray). Injected error: with probability `demo_slip` per turn it plays an
admissible command uniformly instead.

**Families** (`families: true`, off by default; chains of related games with a curate turn). The
games are then built by TextWorld's `GameMaker` instead of `make_game`: one room, a few *things*
on the floor and a few *places* (supporters), each named by a colour and a noun (`red mug`,
`blue stand`). A family is a hidden *recipe*: `max(quest_lengths)` placements of a colour of thing
on a colour of place (`red -> blue, green -> yellow, white -> black`); its game of plan length L (the
tier, the difficulty) is won when the first L placements hold, each one a TextWorld quest (score
+1 when it first holds; the game is won when all hold: TextWorld's engine is the judge). Every game
draws fresh nouns, a fresh room and `family_distractors` extra things and places whose colours are
in no step of the recipe, so from one game of a family to the next only the colours carry over:
an *abstract* skill ("red on blue, then green on yellow") transfers, the *concrete* one ("mug on
stand") does not. Every family of every split has a recipe of its own (nothing can be memorized
into the weights), and the objective only says that each thing has a place (`Score: s of L` after
every command). So a solver without a document finds the recipe by trial within its
`2 L + family_slack` commands (with one distractor and slack 2, about 1/2 at L = 1 by systematic
search, far less at L = 2, 3), while a right abstract document makes every game of the chain a
lookup (2 L commands, success 1): an abstract skill learned on game 0 helps on games 1 and 2.

Roles `solver` and `curator`; the solver's first observation starts with `Skill: <document>`
(the task's `skill`, written by the chain's curate turns). Variant `curate` (role `curator`): one
turn after a game, seeing the old document and the right placements of that game (the task's
`found`: the commands that raised the score), that rewrites the document between `<skill>` and
`</skill>`: at most `max_skill_words` words of letters or digits (commas and full stops allowed).
Anything else is an `invalid_action` (reward `-invalid_penalty`, the document becomes empty). The
curate episode reports the document (`info["skill"]`) and its kind: `doc_abstract` (its content
words, beyond `FILLER`, are all colours), `doc_concrete` (all nouns), `doc_empty`, `doc_other`,
and `doc_right` (abstract, and its colours are the first placements of the recipe, in order).
A solve command the game does not admit costs `invalid_penalty` too (0 by default, as without
families). Splits are whole families (`train_size`, `heldout_size`, `dev_size`, `demo_size` are
multiples of the number of tiers), each family's games one per tier in consecutive rows; the
demonstrator plays the recipe (it reads the hidden task), slipping as above; its curator writes the
colours of the placements found (an empty document with probability `demo_slip`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import re
import sys
import types
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, ClassVar

from datasets import Dataset, DatasetDict

from common.envs.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from common.envs.skill_families import curate_result  # the curate turn's outcome, as skill_families gives it
from common.episode import Event

PACKAGE, LICENSE = "textworld", "MIT"
PLAYER = "player"
MAX_COMMAND_CHARS = 200
DIRECTIONS = ("north", "south", "east", "west")
# families: a thing or place is "<colour> <noun>"; the recipe speaks of colours, every game draws fresh nouns
COLOURS = ("red", "blue", "green", "yellow", "white", "black", "brown", "pink", "grey", "orange", "purple", "gold")
THING_NOUNS = ("mug", "lamp", "shoe", "book", "cup", "hat", "coin", "ball", "pen", "bowl", "sock", "fork", "spoon",
               "plate", "bottle", "clock", "brush", "candle", "glove", "scarf", "bell", "jar", "comb", "vase")
PLACE_NOUNS = ("stand", "shelf", "desk", "table", "bench", "rack", "stool", "counter", "tray", "dresser", "crate", "pedestal")
ROOM_NOUNS = ("attic", "kitchen", "cellar", "study", "hall", "pantry", "workshop", "bedroom", "library", "garage")
FILLER = ("put", "the", "a", "an", "on", "onto", "to", "goes", "go", "then", "and", "first", "next", "each", "thing",
          "things", "place", "places", "take", "it", "of", "is", "in", "with", "its")  # words a document's kind ignores
SHOWN_VERBS = ("take", "put", "drop")  # families: the commands listed (examine, look, inventory stay admissible)
_SKILL = re.compile(r"<skill>(.*?)</skill>", re.DOTALL)
_SKILL_TEXT = re.compile(r"[a-z0-9 \n\t,.;:]*")
_SKILL_WORD = re.compile(r"[a-z0-9]+")


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
    # ---- families (chains of related games with a curate turn; see the module doc). Off: every setting below is unused.
    families: bool = False  # games built from per-family hidden recipes, roles solver and curator, a curate variant
    family_distractors: int = 1  # things and places per game whose colours are in no step of the recipe
    family_slack: int = 2  # commands beyond the 2 L a game of plan length L needs (max_steps caps it too)
    max_skill_words: int = 12  # the skill document's length limit, in words
    invalid_penalty: float = 0.0  # subtracted per command the game does not admit and per invalid curate turn


@functools.cache
def game_file(cache_dir: str, seed: int, quest_length: int, rooms: int, objects: int) -> str:
    """The JSON game of these settings, made by TextWorld's generator on first use and cached."""
    tw = _textworld()
    key = hashlib.sha256(json.dumps([tw.__version__, seed, quest_length, rooms, objects]).encode()).hexdigest()[:16]
    path = Path(cache_dir) / f"tw-{key}.json"
    if not path.exists():
        from textworld.generator import make_game

        options = tw.GameOptions()
        options.seeds = seed
        options.nb_rooms, options.nb_objects, options.quest_length = rooms, objects, quest_length
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{seed}.{os.getpid()}.tmp")  # one per process: parallel runs make the same game
        make_game(options).save(str(tmp))
        tmp.replace(path)
    return str(path)


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
    key = hashlib.sha256(json.dumps([tw.__version__, "families", world], sort_keys=True).encode()).hexdigest()[:16]
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
        maker.quests = [Quest(win_events=[Event(conditions={maker.new_fact("on", entity[name_of[t]], entity[name_of[p]])})])
                        for t, p in task["recipe"][: task["plan"]]]
        maker.validate()
        game = Game(World.from_facts(maker.facts, kb=maker._kb), quests=maker.quests)
        for k in game.infos:
            if k in maker._entities:
                game.infos[k] = maker._entities[k].infos
        game.metadata["desc"] = "a family game (common/envs/textworld.py)"
        game._objective = objective(task["plan"])
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        game.save(str(tmp))
        tmp.replace(path)
    return str(path)


def objective(plan: int) -> str:
    return (f"Put each thing on its place. {plan} of the things here {'has' if plan == 1 else 'have'} one; which goes "
            "where is for you to find. Reply with one of the listed commands.")


def parse_skill(action: str, max_words: int) -> list[str] | None:
    """The words of the text between the first `<skill>` and `</skill>` of a curate action (lowercased;
    commas and full stops dropped); None when the tags are missing, the text holds anything but ASCII
    letters, digits, spaces and `,.;:`, a word is longer than 12, or there are more than `max_words`."""
    m = _SKILL.search(action[:2000])
    if m is None:
        return None
    text = m.group(1).lower()
    if _SKILL_TEXT.fullmatch(text) is None:
        return None
    words = _SKILL_WORD.findall(text)
    if len(words) > max_words or any(len(w) > 12 for w in words):
        return None
    return words


def doc_kind(words: list[str]) -> str:
    """`empty` (no word beyond FILLER), `abstract` (only colours), `concrete` (only nouns) or `other`."""
    content = [w for w in words if w not in FILLER]
    if not content:
        return "empty"
    if all(w in COLOURS for w in content):
        return "abstract"
    if all(w in THING_NOUNS or w in PLACE_NOUNS for w in content):
        return "concrete"
    return "other"


def doc_right(words: list[str], recipe: list[list[str]]) -> bool:
    """An abstract document whose colours are the recipe's first placements, in order (thing, place, ...)."""
    colours = [w for w in words if w not in FILLER]
    steps = [c for pair in recipe for c in pair]
    return doc_kind(words) == "abstract" and len(colours) % 2 == 0 and colours == steps[: len(colours)]


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
        extra = (f" containing {', '.join(inside)}" if inside else "") + (f" with {', '.join(on)} on it" if on else "")
        return x + state + extra

    here = [thing(x) for x, r in rel.get("at", []) if r == room and x != "P"]
    exits = [d for d in DIRECTIONS for r2, r1 in rel.get(f"{d}_of", []) if r1 == room]
    carried = [o for o, c in rel.get("in", []) if c == "I"]
    return (f"You are in the {room}. Here: {'; '.join(here) or 'nothing'}. Exits: {', '.join(exits) or 'none'}. "
            f"You carry: {', '.join(carried) or 'nothing'}.")


class TextWorldEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: TextWorldConfig, rng: random.Random):
        tw = _textworld()
        from textworld.envs.tw import TextWorldEnv as Engine

        self.cfg, self.rng = cfg, rng
        self.engine = Engine(tw.EnvInfos(admissible_commands=True, facts=True, objective=True, won=True, lost=True,
                                         policy_commands=True))
        self.engine.load(game_file(cfg.cache_dir, task["seed"], task["quest_length"], cfg.rooms, cfg.objects))
        self.state = self.engine.reset()
        self.steps = 0
        self.done = False

    def _text(self, feedback: str) -> str:
        commands = f"\nCommands: {', '.join(self.state['admissible_commands'])}" if self.cfg.show_commands else ""
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


_IDLE_ENGINES: dict[str, list[Any]] = {}  # game file -> loaded engines of finished episodes (families)


def _release(path: str, engine: Any) -> None:
    """Keep a finished episode's engine for the next episode of the same game (at most 16 per game, 512 games)."""
    if path not in _IDLE_ENGINES and len(_IDLE_ENGINES) >= 512:
        _IDLE_ENGINES.pop(next(iter(_IDLE_ENGINES)))
    idle = _IDLE_ENGINES.setdefault(path, [])
    if len(idle) < 16:
        idle.append(engine)


class FamilyEpisode(EpisodeState):
    """One game of a family (module doc): TextWorld's engine plays it; the solver sees its skill document."""

    def __init__(self, task: dict[str, Any], cfg: TextWorldConfig, rng: random.Random):
        tw = _textworld()
        from textworld.envs.tw import TextWorldEnv as Engine

        self.cfg, self.rng = cfg, rng
        self.path = family_game_file(cfg.cache_dir, task)
        idle = _IDLE_ENGINES.get(self.path)
        if idle:  # a loaded engine no live episode uses: reset gives the game's start state (loading costs ~25 ms)
            self.engine = idle.pop()
        else:
            self.engine = Engine(tw.EnvInfos(admissible_commands=True, facts=True, won=True, lost=True, score=True))
            self.engine.load(self.path)
        self.state = self.engine.reset()
        self.plan = int(task["plan"])
        self.doc = str(task.get("skill", ""))[:400]
        names = {colour: f"{colour} {noun}" for colour, noun in [*task["things"], *task["places"]]}
        self.steps_right = [(names[t], names[p]) for t, p in task["recipe"][: self.plan]]  # hidden: the demonstrator's
        self.limit = min(cfg.max_steps, 2 * self.plan + cfg.family_slack)
        self.steps = self.invalid = 0
        self.found: list[str] = []  # the commands that raised the score, in order
        self.score = 0  # the engine's score: quests (placements) completed
        self.done = False

    def _text(self, feedback: str, room: bool = False) -> str:
        """The feedback and score; the room only on the first turn (later turns: what the player carries; the
        listed commands say where things are), so that a game's context stays short for a small model."""
        shown = [c for c in self.state["admissible_commands"] if c.split()[0] in SHOWN_VERBS]
        commands = f"\nCommands: {', '.join(shown)}" if self.cfg.show_commands else ""
        carried = ", ".join(v.name for f in self.state["facts"] if f.name == "in" and f.arguments[1].name == "I"
                            for v in f.arguments[:1]) or "nothing"
        where = render(self.state["facts"]) if room else f"You carry: {carried}."
        return f"{feedback} Score: {self.score} of {self.plan}.\n{where}{commands}\n>"

    def start(self) -> Observation:
        return Observation("solver", self._text(f"Skill: {self.doc or 'none'}\nObjective: {objective(self.plan)}", room=True))

    def expert_action(self) -> str:
        """The recipe's next placement not yet made (take the thing, put it on its place); a slip plays a
        listed command uniformly."""
        if self.done:
            return "look"
        admissible = self.state["admissible_commands"]
        if self.rng.random() < self.cfg.demo_slip and admissible:
            return str(self.rng.choice(admissible))
        facts = {(f.name, *(v.name for v in f.arguments)) for f in self.state["facts"]}
        for thing, place in self.steps_right:
            if ("on", thing, place) in facts:
                continue
            if ("in", thing, "I") in facts:
                return f"put {thing} on {place}"
            holder = next((f[2] for f in facts if f[0] == "on" and f[1] == thing), None)
            return f"take {thing} from {holder}" if holder else f"take {thing}"
        return "look"

    def command_in(self, action: str) -> str | None:
        """The command a reply plays: its first line when that is an admissible command (case and spacing
        aside), else the listed command the reply's first 300 characters name first (a small model wraps
        its command in prose: "Take red mug, then ..."); None when it names none."""
        admissible = {c.lower(): c for c in self.state["_valid_commands"]}
        lines = action.strip().splitlines()
        first = " ".join(lines[0].split()).lower()[:MAX_COMMAND_CHARS] if lines else ""
        if first in admissible:
            return str(admissible[first])
        text = " " + " ".join(re.sub(r"[^a-z0-9]", " ", action[:300].lower()).split()) + " "
        named = [(text.find(f" {c} "), -len(c), c) for c in map(str.lower, self.state["admissible_commands"])
                 if c.split()[0] in SHOWN_VERBS and f" {c} " in text]
        return str(admissible[min(named)[2]]) if named else None

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        command = self.command_in(action)
        events = []
        if command is not None:
            self.state, score, _ = self.engine.step(command)
            if score > self.score:
                self.found.append(command)
            self.score = int(score)
            feedback = "Done."
        else:
            self.invalid += 1
            events.append(Event("invalid_action", 0, {"why": "not an admissible command"}))
            feedback = "Invalid command."
        self.steps += 1
        won, lost = bool(self.state["won"]), bool(self.state["lost"])
        if won or lost or self.steps >= self.limit:
            self.done = True
            _release(self.path, self.engine)
            return StepResult(None, reward=float(won) - self.cfg.invalid_penalty * self.invalid, success=won, events=events,
                              info={"won": won, "lost": lost, "steps": self.steps, "score": self.score,
                                    "found": list(self.found), "invalid_calls": self.invalid})
        return StepResult(Observation("solver", self._text(feedback)), events=events)


class CurateEpisode(EpisodeState):
    """One curate turn after a game of a family: rewrite the skill document for the chain's next game."""

    def __init__(self, task: dict[str, Any], cfg: TextWorldConfig, rng: random.Random):
        self.cfg, self.rng = cfg, rng
        self.doc = str(task.get("skill", ""))[:400]
        self.recipe: list[list[str]] = [list(pair) for pair in task["recipe"]]
        colour_of = {f"{colour} {noun}": colour for colour, noun in [*task["things"], *task["places"]]}
        self.found: list[tuple[str, str]] = []  # (thing, place) of each right placement the game reported
        for command in task.get("found", [])[:8]:
            words = str(command).split()
            for cut in range(2, len(words)):  # "put <thing> on <place>"
                thing, place = " ".join(words[1:cut]), " ".join(words[cut + 1:])
                if words[0] == "put" and words[cut] == "on" and thing in colour_of and place in colour_of:
                    self.found.append((thing, place))
        self.colour_of = colour_of

    def start(self) -> Observation:
        found = "; ".join(f"put {t} on {p}" for t, p in self.found) or "none"
        return Observation("curator", f"Skill: {self.doc or 'none'}\nRight placements in the last game: {found}.\n"
                                      "The next game has other things in another room. Write the skill for it between "
                                      "<skill> and </skill>:")

    def expert_action(self) -> str:
        """The colours of the placements found (or the old document when it is abstract and longer); an
        empty document with probability demo_slip."""
        if self.rng.random() < self.cfg.demo_slip:
            return " <skill> </skill>"
        steps = [f"{self.colour_of[t]} on {self.colour_of[p]}" for t, p in self.found]
        old = self.doc.split()
        seen = " ".join(steps).split()
        words = old if doc_kind(old) == "abstract" and len(old) > len(seen) else seen
        return " <skill> " + " ".join(words[: self.cfg.max_skill_words]) + " </skill>"

    def step(self, action: str) -> StepResult:
        words = parse_skill(action, self.cfg.max_skill_words)
        return curate_result(words, doc_kind(words or []), doc_right(words or [], self.recipe), self.cfg.invalid_penalty,
                             f"expected <skill> up to {self.cfg.max_skill_words} words of letters or digits </skill>")


class TextWorldEnv(Environment):
    name = "textworld"
    roles: ClassVar[tuple[str, ...]] = (PLAYER,)
    offers = frozenset({"single_agent"})  # common/envs/features.py
    config_class = TextWorldConfig
    stop = ("\n",)

    def __init__(self, cfg: TextWorldConfig):
        if not cfg.quest_lengths or any(q < 1 for q in cfg.quest_lengths) or cfg.rooms < 1 or cfg.objects < 0:
            raise ValueError(f"env.quest_lengths must be >= 1 each, env.rooms >= 1, env.objects >= 0; got "
                             f"{cfg.quest_lengths}, {cfg.rooms}, {cfg.objects}")
        if cfg.max_steps < 1 or not 0.0 <= cfg.demo_slip <= 1.0:
            raise ValueError(f"env.max_steps must be >= 1 and env.demo_slip in [0, 1]; got {cfg.max_steps}, {cfg.demo_slip}")
        if cfg.families:
            _check_families(cfg)
            # this instance's roles and offers (the class's are those of the default mode)
            self.roles = ("solver", "curator")  # type: ignore[misc]
            self.offers = frozenset({"task_families"})  # type: ignore[misc]
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
            self._tasks = self.family_tasks()
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
        if variant == "curate":
            return CurateEpisode(task, self.cfg, rng)
        return FamilyEpisode(task, self.cfg, rng) if self.cfg.families else TextWorldEpisode(task, self.cfg, rng)

    def variants(self) -> tuple[str, ...]:
        return ("main", "curate") if self.cfg.families else ("main",)

    # ---- families ----------------------------------------------------------------------
    def new_recipe(self, rng: random.Random) -> list[list[str]]:
        """A family's hidden recipe: max(tiers) placements, thing colour -> place colour, no colour twice."""
        colours = rng.sample(COLOURS, 2 * max(self.tiers))
        return [[colours[2 * i], colours[2 * i + 1]] for i in range(max(self.tiers))]

    def family_game(self, rng: random.Random, family: str, recipe: list[list[str]], plan: int) -> dict[str, Any]:
        """One game of a family: the recipe's first `plan` placements, fresh nouns and room, distractor
        things and places whose colours are in no step of the recipe."""
        d = self.cfg.family_distractors
        others = rng.sample([c for c in COLOURS if all(c not in pair for pair in recipe)], 2 * d)
        thing_colours = [t for t, _ in recipe[:plan]] + others[:d]
        place_colours = [p for _, p in recipe[:plan]] + others[d:]
        things = [[c, n] for c, n in zip(thing_colours, rng.sample(THING_NOUNS, len(thing_colours)), strict=True)]
        places = [[c, n] for c, n in zip(place_colours, rng.sample(PLACE_NOUNS, len(place_colours)), strict=True)]
        rng.shuffle(things)
        rng.shuffle(places)
        return {"family": family, "recipe": recipe, "plan": plan, "room": rng.choice(ROOM_NOUNS), "things": things,
                "places": places}

    def family_tasks(self) -> DatasetDict:
        """Whole families per split (train, held-out, dev, demo), each a recipe no other family anywhere has."""
        rng = random.Random(f"{self.cfg.data_seed}/families")
        used: set[str] = set()
        splits: dict[str, Dataset] = {}
        for split, size in [("train", self.cfg.train_size), ("heldout", self.cfg.heldout_size), ("dev", self.cfg.dev_size),
                            ("demo", self.cfg.demo_size)]:
            if not size:
                continue
            rows: dict[str, list[Any]] = {"id": [], "tier": [], "task": []}
            while len(rows["id"]) < size:
                recipe = self.new_recipe(rng)
                if json.dumps(recipe) in used:
                    continue
                used.add(json.dumps(recipe))
                family = f"{split}-f{len(rows['id']) // len(self.tiers):04d}"
                for plan in self.tiers:
                    rows["id"].append(f"{split}-{len(rows['id']):05d}")
                    rows["tier"].append(plan)
                    rows["task"].append(json.dumps(self.family_game(rng, family, recipe, plan), sort_keys=True))
            splits[split] = Dataset.from_dict(rows)
        return DatasetDict(splits)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        return {"benchmark": "TextWorld (Côté et al. 2018, arXiv 1806.11532)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE,
                "tasks": "games made by textworld.generator.make_game from (data_seed, split) seed streams",
                "data_seed": self.cfg.data_seed, "quest_lengths": self.cfg.quest_lengths, "rooms": self.cfg.rooms,
                "objects": self.cfg.objects,
                "splits": {"train": self.cfg.train_size, "heldout": self.cfg.heldout_size, "dev": self.cfg.dev_size,
                           "demo": self.cfg.demo_size},
                **({"families": "games built by textworld.GameMaker from per-family hidden recipes (colours of things "
                                "on colours of places), fresh nouns per game, [I] for chains with a curate turn",
                    "family_distractors": self.cfg.family_distractors} if self.cfg.families else {})}


def _check_families(cfg: TextWorldConfig) -> None:
    """One-line errors for family settings that cannot work."""
    k, longest, d = len(cfg.quest_lengths), max(cfg.quest_lengths), cfg.family_distractors
    if len(set(cfg.quest_lengths)) != k:
        raise ValueError(f"env.quest_lengths must be distinct with env.families=true (one game per plan length); got {cfg.quest_lengths}")
    if d < 0 or 2 * longest + 2 * d > len(COLOURS) or longest + d > min(len(THING_NOUNS), len(PLACE_NOUNS)):
        raise ValueError(f"env.families=true needs 2 * max(env.quest_lengths) + 2 * env.family_distractors <= {len(COLOURS)} "
                         f"colours and env.family_distractors >= 0; got {cfg.quest_lengths}, {d}")
    if cfg.family_slack < 0 or cfg.max_skill_words < 1 or cfg.invalid_penalty < 0:
        raise ValueError("need env.family_slack >= 0, env.max_skill_words >= 1 and env.invalid_penalty >= 0")
    for key in ("train_size", "heldout_size", "dev_size", "demo_size"):
        if getattr(cfg, key) % k:
            raise ValueError(f"env.{key} must be a multiple of {k} with env.families=true (whole families, one game per "
                             f"plan length {cfg.quest_lengths}); got {getattr(cfg, key)}")
