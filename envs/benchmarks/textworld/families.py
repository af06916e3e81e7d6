"""TextWorld's families: chains of related games with a curate turn (`env=textworld env.families=true`).

With `families: true` (off by default) the games are built by TextWorld's `GameMaker` instead of
`make_game`: one room, a few *things* on the floor and a few *places* (supporters), each named by a
colour and a noun (`red mug`, `blue stand`). A family is a hidden *recipe*: `max(quest_lengths)`
placements of a colour of thing on a colour of place (`red -> blue, green -> yellow, white ->
black`); its game of plan length L (the tier, the difficulty) is won when the first L placements
hold, each one a TextWorld quest (score +1 when it first holds; the game is won when all hold:
TextWorld's engine is the judge). Every game draws fresh nouns, a fresh room and
`family_distractors` extra things and places whose colours are in no step of the recipe, so from one
game of a family to the next only the colours carry over: an *abstract* skill ("red on blue, then
green on yellow") transfers, the *concrete* one ("mug on stand") does not. Every family of every
split has a recipe of its own (nothing can be memorized into the weights), and the objective only
says that each thing has a place (`Score: s of L` after every command). So a solver without a
document finds the recipe by trial within its `2 L + family_slack` commands (with one distractor and
slack 2, about 1/2 at L = 1 by systematic search, far less at L = 2, 3), while a right abstract
document makes every game of the chain a lookup (2 L commands, success 1): an abstract skill learned
on game 0 helps on games 1 and 2.

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
multiples of the number of tiers), each family's games one per tier in consecutive rows.

The demo split (the SFT warm start's data, `demo_size` games) holds scripted chains instead: solve 0,
curate 0, solve 1, ..., solve K-1 (`scripted_chain`), each solve row carrying the document the
scripted curator wrote so far and each curate row (`kind: curate`) the placements found before it.
The scripted demonstrator (`FamilyEpisode.expert_action`) reads only what a solver sees: it follows
the document's placements where they name things of this game and searches by elimination beyond
them (a thing not yet placed right on a place not yet tried for it), slipping to a listed command
with probability `demo_slip`. Its curator writes the colours of the placements found with
probability `demo_abstract`, their nouns with `demo_concrete` and an empty document otherwise (0.3 /
0.3 / 0.4 by default, as in skill_families), so RL has a choice of what to write. The oracle of
`python -m envs check` (`FamilyEpisode.oracle_action`) reads the hidden recipe and wins every
game in 2 L commands.

Built on `envs/benchmarks/textworld/games.py` (its package loader, configuration and rendering);
the games themselves are `family_games.py`'s, the splits and scripted chains `family_splits.py`'s.
`TextWorldEnv` uses these modules when `families` is on.
"""

from __future__ import annotations

import random
import re
from typing import Any

from common.episode import Event
from envs.api.base import EpisodeState, Observation, StepResult
from envs.benchmarks.textworld.family_games import (
    COLOURS,
    PLACE_NOUNS,
    THING_NOUNS,
    family_game_file,
    objective,
)
from envs.benchmarks.textworld.games import MAX_COMMAND_CHARS, TextWorldConfig, _textworld, render
from envs.testbeds.skill_families import (
    curate_result,  # the curate turn's outcome, as skill_families gives it
)

# words a document's kind ignores
FILLER = ("put", "the", "a", "an", "on", "onto", "to", "goes", "go", "then", "and", "first", "next", "each",
          "thing", "things", "place", "places", "take", "it", "of", "is", "in", "with", "its")
# families: the commands listed (examine, look, inventory stay admissible)
SHOWN_VERBS = ("take", "put", "drop")
_SKILL = re.compile(r"<skill>(.*?)</skill>", re.DOTALL)
_SKILL_TEXT = re.compile(r"[a-z0-9 \n\t,.;:]*")
_SKILL_WORD = re.compile(r"[a-z0-9]+")


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


_IDLE_ENGINES: dict[str, list[Any]] = {}  # game file -> loaded engines of finished episodes (families)


def _release(path: str, engine: Any) -> None:
    """Keep a finished episode's engine for the next episode of the same game (at most 16 per game, 512
    games)."""
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
        # a loaded engine no live episode uses: reset gives the game's start state (loading costs ~25 ms)
        if idle:
            self.engine = idle.pop()
        else:
            self.engine = Engine(tw.EnvInfos(admissible_commands=True, facts=True, won=True, lost=True,
                                             score=True))
            self.engine.load(self.path)
        self.state = self.engine.reset()
        self.plan = int(task["plan"])
        self.doc = str(task.get("skill", ""))[:400]
        names = {colour: f"{colour} {noun}" for colour, noun in [*task["things"], *task["places"]]}
        # hidden: the oracle's
        self.steps_right = [(names[t], names[p]) for t, p in task["recipe"][: self.plan]]
        self.things = [f"{c} {n}" for c, n in task["things"]]
        self.places = [f"{c} {n}" for c, n in task["places"]]
        # what the document says, in this game's names
        self.guide = guided_pairs(self.doc, self.things, self.places)
        # placements made that raised no score (the demonstrator's memory)
        self.tried: set[tuple[str, str]] = set()
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
        carried = ", ".join(v.name for f in self.state["facts"]
                            if f.name == "in" and f.arguments[1].name == "I"
                            for v in f.arguments[:1]) or "nothing"
        where = render(self.state["facts"]) if room else f"You carry: {carried}."
        return f"{feedback} Score: {self.score} of {self.plan}.\n{where}{commands}\n>"

    def start(self) -> Observation:
        first = f"Skill: {self.doc or 'none'}\nObjective: {objective(self.plan)}"
        return Observation("solver", self._text(first, room=True))

    def oracle_action(self) -> str:
        """The recipe's next placement not yet made (it reads the hidden recipe): take the thing, put it on
        its place. The oracle of `python -m envs check`; it wins every game in 2 L commands."""
        if self.done:
            return "look"
        facts = self._facts()
        for thing, place in self.steps_right:
            if ("on", thing, place) in facts:
                continue
            return f"put {thing} on {place}" if ("in", thing, "I") in facts else self._take(thing, facts)
        return "look"

    def expert_action(self) -> str:
        """The scripted demonstrator (the SFT warm start's data), which reads only what the solver sees: it
        follows its document's placements (`guided_pairs`: colours, or nouns that are in this game) and
        searches by elimination beyond them (a thing not yet placed right, on a place it has not yet tried
        for it, drawn uniformly); a slip plays a listed command uniformly."""
        if self.done:
            return "look"
        admissible = self.state["admissible_commands"]
        if self.rng.random() < self.cfg.demo_slip and admissible:
            return str(self.rng.choice(admissible))
        facts = self._facts()
        right = {placement(c) for c in self.found}
        held = next((t for t in self.things if ("in", t, "I") in facts), None)
        for thing, place in self.guide:
            if (thing, place) not in right | self.tried and held in (None, thing):
                return f"put {thing} on {place}" if held == thing else self._take(thing, facts)
        if held is None:
            open_things = [t for t in self.things if t not in {a for a, _ in right}]
            held = self.rng.choice(open_things or self.things)
            return self._take(held, facts)
        places = [p for p in self.places if (held, p) not in self.tried and ("on", held, p) not in facts]
        return f"put {held} on {self.rng.choice(places or self.places)}"

    def _facts(self) -> set[tuple[str, ...]]:
        return {(f.name, *(v.name for v in f.arguments)) for f in self.state["facts"]}

    def _take(self, thing: str, facts: set[tuple[str, ...]]) -> str:
        holder = next((f[2] for f in facts if f[0] == "on" and f[1] == thing), None)
        return f"take {thing} from {holder}" if holder else f"take {thing}"

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
            elif command.startswith("put ") and " on " in command:
                self.tried.add(placement(command))
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
            return StepResult(None, reward=float(won) - self.cfg.invalid_penalty * self.invalid, success=won,
                              events=events,
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
        for command in map(str, task.get("found", [])[:8]):
            thing, place = placement(command)
            if command.startswith("put ") and thing in colour_of and place in colour_of:
                self.found.append((thing, place))
        self.colour_of = colour_of

    def start(self) -> Observation:
        found = "; ".join(f"put {t} on {p}" for t, p in self.found) or "none"
        return Observation("curator", f"Skill: {self.doc or 'none'}\nRight placements in the last game: "
                                      f"{found}.\nThe next game has other things in another room. Write the "
                                      "skill for it between <skill> and </skill>:")

    def expert_action(self) -> str:
        """The scripted curator: with probability `demo_abstract` the colours of the placements found (or the
        old document when it is abstract and longer), with `demo_concrete` their nouns (which name nothing in
        the next game), otherwise an empty document."""
        u = self.rng.random()
        if u < self.cfg.demo_abstract:
            seen = " ".join(f"{self.colour_of[t]} on {self.colour_of[p]}" for t, p in self.found).split()
            old = self.doc.split()
            words = old if doc_kind(old) == "abstract" and len(old) > len(seen) else seen
        elif u < self.cfg.demo_abstract + self.cfg.demo_concrete:
            words = " ".join(f"{t.split()[-1]} on {p.split()[-1]}" for t, p in self.found).split()
        else:
            words = []
        return " <skill> " + " ".join(words[: self.cfg.max_skill_words]) + " </skill>"

    def step(self, action: str) -> StepResult:
        words = parse_skill(action, self.cfg.max_skill_words)
        why = f"expected <skill> up to {self.cfg.max_skill_words} words of letters or digits </skill>"
        return curate_result(words, doc_kind(words or []), doc_right(words or [], self.recipe),
                             self.cfg.invalid_penalty, why)


def placement(command: str) -> tuple[str, str]:
    """(thing, place) of a `put <thing> on <place>` command (names never hold " on ")."""
    thing, _, place = command[len("put "):].partition(" on ")
    return thing, place


def guided_pairs(doc: str, things: list[str], places: list[str]) -> list[tuple[str, str]]:
    """The placements a document names, in its order, as this game's (thing, place) names: its content
    words (beyond FILLER) taken in pairs, each word a colour or a noun of a thing (first) and a place
    (second) here; pairs that name nothing here are dropped."""
    words = [w for w in _SKILL_WORD.findall(doc.lower()) if w not in FILLER]

    def named(word: str, names: list[str]) -> str | None:
        return next((n for n in names if word in n.split()), None)

    pairs = [(named(a, things), named(b, places)) for a, b in zip(words[::2], words[1::2], strict=False)]
    return [(t, p) for t, p in pairs if t is not None and p is not None]
