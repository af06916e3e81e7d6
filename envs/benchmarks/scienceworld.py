"""`scienceworld`: ScienceWorld's elementary-science tasks, played on its own simulator (a JVM), scored by it.

Provenance: ScienceWorld (Wang et al. 2022, EMNLP, arXiv 2203.07540), the PyPI package `scienceworld`
(1.2.3; Apache-2.0), which ships the simulator as a jar run by Java 17 (Debian's `openjdk-17-jre-headless`)
through py4j; nothing is downloaded. 30 task types (boiling, growing plants, circuits, ...), each in
many variations, split by the benchmark itself into train / dev / test variations.
`ScienceWorldEnv.provenance()` gives the same facts for a run's manifest.

One role (`agent`). The first observation is the task description and what the agent sees; each
action is one command (the first line, at most 200 characters, control characters removed), run by
the simulator; the next observation is its reply. A command the simulator does not parse ("No known
action matches that input.") is an `invalid_action` (no effect). The episode ends when the task is
completed or failed (ScienceWorld's own flags) or after `max_steps` commands (0, the default: the
variation's gold sequence's length + 10, so the budget never cuts the gold path short); the reward is
ScienceWorld's score at the end, / 100, clipped to [0, 1] (it gives partial credit for sub-goals;
a failed task scores 0); `success` is a score of 100.

Splits: held-out = each task's test variations, dev = its dev variations, train = its train
variations (ScienceWorld's own), each split round robin over `task_names` (all 30 by default); a
task's tier is its task type's position + 1. The variation lists are read from the simulator once and
cached in `cache_dir`.

Simulators: one JVM per live episode, from a pool kept per process (an episode takes one at its
start and gives it back when it ends or is dropped); `simplification` is ScienceWorld's
simplification string ("easy" by default: teleporting, doors open, no electrical actions, self-watering
flower pots, as in its paper's easy setting).

The scripted demonstrator (the SFT warm start's data; the oracle of `python -m envs check`)
plays ScienceWorld's gold action sequence for the variation. Injected error: with probability
`demo_slip` per turn it skips the next gold action.
"""

from __future__ import annotations

import functools
import json
import random
import re
import weakref
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict

from common.episode import Event
from common.records import atomic_write_text
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

PACKAGE, LICENSE = "scienceworld", "Apache-2.0"
AGENT = "agent"
MAX_COMMAND_CHARS = 200
UNKNOWN = "No known action matches that input."
_IDLE: list[Any] = []  # simulators not used by a live episode


def _simulator() -> Any:
    if _IDLE:
        return _IDLE.pop()
    from scienceworld import ScienceWorldEnv as Simulator  # optional dependency: make setup

    return Simulator("", envStepLimit=10**6)  # this module counts steps itself


def _give_back(sim: Any) -> None:
    _IDLE.append(sim)


@functools.cache
def variations(cache_dir: str, simplification: str) -> dict[str, dict[str, list[int]]]:
    """Task name -> {train, dev, test} variation indices, as ScienceWorld splits them (cached on disk)."""
    path = Path(cache_dir) / f"variations-{metadata.version(PACKAGE)}.json"
    if path.exists():
        return dict(json.loads(path.read_text()))
    sim = _simulator()
    try:
        out = {}
        for name in sim.get_task_names():
            sim.load(name, 0, simplification)
            out[name] = {"train": list(sim.get_variations_train()), "dev": list(sim.get_variations_dev()),
                         "test": list(sim.get_variations_test())}
    finally:
        _give_back(sim)
    atomic_write_text(path, json.dumps(out))  # whole or not at all: parallel runs read it
    return out


@dataclass
class ScienceWorldConfig(EnvConfig):
    name: str = "scienceworld"
    task_names: list[str] = field(default_factory=list)  # [] = all 30; tier = position + 1
    train_size: int = 256
    heldout_size: int = 128
    dev_size: int = 64
    simplification: str = "easy"
    max_steps: int = 0  # commands per episode; 0: the gold sequence's length + 10 (4 to 194 commands long)
    demo_slip: float = 0.0  # the demonstrator skips the next gold action with this probability, per turn
    cache_dir: str = ".cache/scienceworld"


class ScienceWorldEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: ScienceWorldConfig, rng: random.Random):
        self.task, self.cfg, self.rng = task, cfg, rng
        self.sim = _simulator()
        self._release = weakref.finalize(self, _give_back, self.sim)
        self.sim.load(task["task_name"], task["variation"], cfg.simplification, generateGoldPath=True)
        self.gold = [a for a in self.sim.get_gold_action_sequence() if not a.startswith("ERROR")]
        self.next_gold = 0
        self.first, _ = self.sim.reset()
        self.steps, self.score = 0, 0
        self.limit = cfg.max_steps or len(self.gold) + 10
        self.done = False

    def start(self) -> Observation:
        return Observation(AGENT, f"{self.sim.get_task_description()}\n{self.first}\n>")

    def expert_action(self) -> str:
        if self.done or self.next_gold >= len(self.gold):
            return "look around"
        if self.rng.random() < self.cfg.demo_slip and self.next_gold + 1 < len(self.gold):
            self.next_gold += 1
        return str(self.gold[self.next_gold])

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        lines = action.strip().splitlines()
        command = re.sub(r"[\x00-\x1f\x7f]", " ", lines[0] if lines else "")[:MAX_COMMAND_CHARS].strip()
        if self.next_gold < len(self.gold) and command == self.gold[self.next_gold]:
            self.next_gold += 1
        try:
            reply, _, ended, info = self.sim.step(command)
            self.score = int(info["score"])
        except Exception as e:  # the simulator choking on odd text: the command had no effect
            reply, ended = f"{UNKNOWN} ({type(e).__name__})", False
        self.steps += 1
        unknown = {"why": "the simulator does not know this command"}
        events = [Event("invalid_action", 0, unknown)] if reply.startswith(UNKNOWN) else []
        if ended or self.steps >= self.limit:
            self.done = True
            self._release()
            reward = min(max(self.score, 0), 100) / 100
            return StepResult(None, reward=reward, success=self.score >= 100, events=events,
                              info={"score": self.score, "steps": self.steps})
        return StepResult(Observation(AGENT, f"{reply}\n>"), events=events)


class ScienceWorldEnv(Environment):
    name = "scienceworld"
    roles = (AGENT,)
    offers = frozenset({"single_agent"})  # envs/api/features.py
    config_class = ScienceWorldConfig
    oracle_settings = {"demo_slip": 0.0}
    stop = ("\n",)

    def __init__(self, cfg: ScienceWorldConfig):
        if cfg.max_steps < 0 or not 0.0 <= cfg.demo_slip <= 1.0:
            raise ValueError("env.max_steps must be >= 0 and env.demo_slip in [0, 1]; "
                             f"got {cfg.max_steps}, {cfg.demo_slip}")
        super().__init__(cfg)
        self.cfg: ScienceWorldConfig = cfg

    @property
    def names(self) -> list[str]:
        known = sorted(variations(self.cfg.cache_dir, self.cfg.simplification))
        unknown = [n for n in self.cfg.task_names if n not in known]
        if unknown:
            raise ValueError(f"unknown ScienceWorld task(s) {unknown}; it has {known}")
        return list(self.cfg.task_names) or known

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.names) + 1))

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """A train variation of the tier's task type, drawn at random (the splits are fixed: see
        `task_set`)."""
        name = self.names[tier - 1]
        train = variations(self.cfg.cache_dir, self.cfg.simplification)[name]["train"]
        return {"task_name": name, "variation": rng.choice(train)}

    def task_set(self) -> DatasetDict:
        """Each split round robin over the task types, in variation order: ScienceWorld's own train / dev /
        test."""
        if self._tasks is None:
            table = variations(self.cfg.cache_dir, self.cfg.simplification)
            c = self.cfg

            def round_robin(split: str, skip: int, size: int) -> list[dict[str, Any]]:
                queues = [[{"task_name": n, "variation": v} for v in table[n][split]] for n in self.names]
                out: list[dict[str, Any]] = []
                while any(queues) and len(out) < skip + size:
                    for q in queues:
                        if q and len(out) < skip + size:
                            out.append(q.pop(0))
                return out[skip:]

            chosen = {"train": round_robin("train", 0, c.train_size),
                      "heldout": round_robin("test", 0, c.heldout_size)}
            if c.demo_size:
                chosen["demo"] = round_robin("train", c.train_size, c.demo_size)
            if c.dev_size:
                chosen["dev"] = round_robin("dev", 0, c.dev_size)
            for split, rows in chosen.items():
                want = {"train": c.train_size, "heldout": c.heldout_size, "demo": c.demo_size,
                        "dev": c.dev_size}[split]
                if len(rows) < want:
                    raise ValueError(f"scienceworld has {len(rows)} {split} variations of {len(self.names)} "
                                     f"task types: lower env.{split}_size; got {want}")
            self._tasks = DatasetDict({
                split: Dataset.from_dict({"id": [f"{t['task_name']}/{t['variation']}" for t in rows],
                                          "tier": [self.names.index(t["task_name"]) + 1 for t in rows],
                                          "task": [json.dumps(t, sort_keys=True) for t in rows]})
                for split, rows in chosen.items()})
        return self._tasks

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"scienceworld has no episode variant {variant!r}")
        return ScienceWorldEpisode(task, self.cfg, rng)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        table = variations(self.cfg.cache_dir, self.cfg.simplification)
        return {"benchmark": "ScienceWorld (Wang et al. 2022, arXiv 2203.07540)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE,
                "tasks": {n: sum(len(v) for v in table[n].values()) for n in self.names},
                "splits": {"train": self.cfg.train_size, "heldout": self.cfg.heldout_size,
                           "dev": self.cfg.dev_size, "demo": self.cfg.demo_size},
                "heldout_ids": "ScienceWorld's test variations", "dev_ids": "its dev variations",
                "simplification": self.cfg.simplification}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """One of the simulator's action templates, uniform, its object slots filled uniformly from its
        possible objects."""
        sim = state.sim  # type: ignore[attr-defined]
        objects = sim.get_possible_objects() or ["it"]
        template = rng.choice(sim.get_possible_actions() or ["look around"])
        return re.sub(r"OBJ\d?", lambda m: rng.choice(objects), template)
