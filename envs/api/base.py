"""The text-environment API: multi-role, multi-turn, text in and text out.

An `Environment` owns a task set (a `datasets.DatasetDict` with `train` and `heldout` splits,
each row `id`, `tier`, `task` (a JSON string)) and makes one `EpisodeState` per play. An episode
tells which role acts next and what text to *append* to that role's context; the rollout keeps
each role's context as token ids (prompt tokens + the role's own sampled tokens + appended
observations), so nothing a model sampled is ever re-tokenized.

Rules every environment keeps:
- Any action text is legal input. A malformed action yields an `invalid_action` event and an
  observation saying what was wrong; it never raises. Numbers in action text are read with
  `parse_int` only (ASCII digits, bounded length), never with `int()`.
- The episode ends in finitely many turns (each environment caps its own turns).
- A step takes at most `step_cpu_s` seconds of CPU time (`EnvConfig`, default 30): the rollout runs
  each step under `cpu_time_limit`, and a step past it is a faulted invalid action. An environment
  bounds its own inputs where one C operation could run longer (bfcl's `GUARDS`): the limit
  interrupts Python code, not a single C call.
- `expert_action()` is the scripted demonstrator (it may read hidden task state); it provides the
  SFT warm-start data and scripted actors.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import re
import signal
import string
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from datasets import Dataset, DatasetDict

from common.episode import Event


def parse_int(text: str, max_digits: int = 18) -> int | None:
    """The integer `text` spells in ASCII digits (an optional sign, 1..`max_digits` digits), else None.

    Model text is hostile input. Python's `int()` reads Unicode digits (`int("١٦") == 16`),
    underscores and surrounding whitespace, and raises past 4300 digits; the environments' stated
    format is plain ASCII digits, so anything else is not a number here (an invalid action).

    >>> parse_int("-42"), parse_int("+7"), parse_int("007")
    (-42, 7, 7)
    >>> parse_int("١٦"), parse_int("1_000"), parse_int(" 1"), parse_int("9" * 19), parse_int("")
    (None, None, None, None, None)
    """
    if len(text) > max_digits + 1 or re.fullmatch(rf"[-+]?[0-9]{{1,{max_digits}}}", text) is None:
        return None
    return int(text)


class StepTimeLimit(BaseException):
    """An environment step used more CPU time than its limit (`cpu_time_limit`). A BaseException, as
    KeyboardInterrupt is, so that an environment's own `except Exception` does not swallow it."""


@contextlib.contextmanager
def cpu_time_limit(seconds: float) -> Iterator[None]:
    """Raise StepTimeLimit in the block once it has used `seconds` of this process's CPU time.

    Enforced by a signal timer (`setitimer(ITIMER_PROF)`: the process's CPU time, all its threads;
    sleeping and waiting for a child, e.g. a sandbox, cost nothing) when the block runs in the main
    thread and no other ITIMER_PROF is set: SIGPROF's handler raises in the block, and again every
    50 ms should the block swallow it. Python runs signal handlers between bytecodes, so a single C
    call (a huge integer power, a regex) is interrupted only when it returns. Whatever the case (a
    non-main thread, which cannot set signal handlers; a timer already in use; a C call; a swallowed
    interruption), a block that returns having used more than `seconds` raises StepTimeLimit then.
    Costs a few microseconds: two timer and two handler calls.
    """
    start = time.process_time()
    armed = [False]  # the handler raises only while the block runs (a signal may arrive as it ends)
    fired = [False]  # the timer went off: the step is over its limit, whatever it swallowed

    def interrupt(signum: int, frame: Any) -> None:
        if armed[0]:
            fired[0] = True
            signal.setitimer(signal.ITIMER_PROF, 0.05)
            raise StepTimeLimit(f"the step used more than {seconds:g} s of CPU time (env.step_cpu_s)")

    previous: Any = None
    if (threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
            and signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0)):
        previous = signal.signal(signal.SIGPROF, interrupt)
        armed[0] = True
        signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        if armed[0]:
            armed[0] = False
            signal.setitimer(signal.ITIMER_PROF, 0)
            signal.signal(signal.SIGPROF, previous)
    used = time.process_time() - start
    if fired[0] and used <= seconds:  # the kernel's timer and the process clock round differently
        raise StepTimeLimit(f"the step used more than {seconds:g} s of CPU time (env.step_cpu_s)")
    if used > seconds:
        raise StepTimeLimit(f"the step used {used:.1f} s of CPU time, more than its {seconds:g} s "
                            "(env.step_cpu_s)")


@dataclass
class Observation:
    """Text for the role that acts next.

    `text` is appended to that role's running context. `new_context=True` drops the role's
    earlier context first (e.g. a fresh sub-task for a worker).
    """

    role: str
    text: str
    new_context: bool = False


@dataclass
class StepResult:
    """What the environment says after one action."""

    next: Observation | None  # None: the episode is over
    reward: float = 0.0  # terminal reward when `next is None`; otherwise an optional turn reward
    events: list[Event] = field(default_factory=list)
    success: bool = False  # meaningful when the episode is over
    info: dict[str, Any] = field(default_factory=dict)
    # Events returned here belong to the action just taken: the rollout sets their `turn` to that
    # action's index in `Episode.turns` (every action, scripted ones included, is a turn).


class EpisodeState(ABC):
    """One play of one task."""

    @abstractmethod
    def start(self) -> Observation:
        """The first observation (which role acts first, and its prompt)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply the acting role's action text; never raises on malformed text."""

    @abstractmethod
    def expert_action(self) -> str:
        """The scripted demonstrator's action for the role that acts now."""

    def summary(self) -> dict[str, Any]:
        """The episode's info so far (behaviour figures such as `right_tool`), which the rollout records
        when it cuts the episode short (its context ran out), so that those figures average over every
        episode, not only the ones that ended; {} by default. An environment whose last step reports
        `{**self.summary(), ...}` overrides it."""
        return {}


@dataclass
class EnvConfig:
    """Settings every environment has. Subclasses add their own fields."""

    name: str = ""
    tag: str = ""  # directory name of this environment setting in results/ (default: name)
    train_size: int = 512  # tasks in the train split
    heldout_size: int = 128  # tasks in the held-out split
    demo_size: int = 0  # tasks in a separate split for the SFT warm start's demonstrations (0: use train)
    # tasks in the dev split: design, tuning and pilots evaluate here (eval.split=dev), never on held-out
    dev_size: int = 64
    data_seed: int = 1234  # seed of the task generator (independent of the run seed)
    # CPU seconds one step may take (the rollout's `cpu_time_limit`; past it: a faulted invalid action).
    # Steps take microseconds; paper_math's math-verify may take 3 x 5 s of its own timeouts
    step_cpu_s: float = 30.0

    def check(self) -> None:
        """Raise ValueError (one line: the setting and how to fix it) on a setting that cannot work."""
        for key in ("train_size", "heldout_size"):
            if getattr(self, key) < 1:
                raise ValueError(f"env.{key} must be >= 1 (an empty split has nothing to train on or "
                                 f"evaluate); got {getattr(self, key)}")
        if self.demo_size < 0:
            raise ValueError(f"env.demo_size must be >= 0 (0: demonstrate train tasks); got {self.demo_size}")
        if self.dev_size < 0:
            raise ValueError("env.dev_size must be >= 0 (0: no dev split, so eval.split=dev is refused); "
                             f"got {self.dev_size}")


class Environment(ABC):
    """A family of tasks and the rules to play them."""

    name: ClassVar[str]
    roles: ClassVar[tuple[str, ...]]
    config_class: ClassVar[type[EnvConfig]] = EnvConfig
    stop: ClassVar[tuple[str, ...]] = ("\n",)  # stop strings for generation
    # what it offers methods (envs/api/features.py: the vocabulary); `make compare` runs a method on it when
    # the method's `needs` are a subset
    offers: ClassVar[frozenset[str]] = frozenset()
    # the settings that make the scripted demonstrator an oracle (its injected errors switched off), for
    # `python -m envs check` (envs/api/check.py); empty: the demonstrator injects none
    oracle_settings: ClassVar[Mapping[str, Any]] = {}

    @classmethod
    def offers_for(cls, settings: Mapping[str, Any]) -> frozenset[str]:
        """What an instance with these settings (the resolved `env` config of a run) offers: the class's
        `offers`, unless a setting changes what its tasks are (textworld's and chain_tasks' `families`,
        a generated pool's defects); `make compare` asks this of each column's home arm."""
        return cls.offers

    def __init__(self, cfg: EnvConfig):
        cfg.check()
        # here: every environment's check, overridden or not
        if not (cfg.step_cpu_s > 0 and math.isfinite(cfg.step_cpu_s)):
            raise ValueError("env.step_cpu_s must be a number of seconds > 0 (default 30); "
                             f"got {cfg.step_cpu_s}")
        self.cfg = cfg
        self._tasks: DatasetDict | None = None

    # ---- tasks -------------------------------------------------------------------------
    @abstractmethod
    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """One task as a JSON-serializable dict (an override may take further keyword arguments:
        `split_plan`'s)."""

    @property
    @abstractmethod
    def tiers(self) -> tuple[int, ...]:
        """Difficulty tiers, easiest first."""

    def task_set(self) -> DatasetDict:
        """Train, held-out, dev (and optional demo) splits, generated deterministically from `data_seed`.

        No two splits share a task (by `task_key`), so the warm start never saw the tasks RL trains on
        (when `demo_size` > 0) and neither saw the held-out tasks. Design and tuning evaluate on dev;
        held-out is the test split, touched only by the final evaluations. Dev is generated last, from
        the same stream, so adding it left every other split exactly as it was. What each split's rows
        are made of is `split_plan`'s, from the stream `split_rng` gives; a drawn task already in a
        split is drawn again for the same row.
        """
        if self._tasks is None:
            stream = random.Random(self.cfg.data_seed)
            seen: set[str] = set()
            splits: dict[str, Dataset] = {}
            sizes = [("train", self.cfg.train_size), ("heldout", self.cfg.heldout_size)]
            if self.cfg.demo_size:
                sizes.append(("demo", self.cfg.demo_size))
            if self.cfg.dev_size:
                sizes.append(("dev", self.cfg.dev_size))
            for split, size in sizes:
                rng = self.split_rng(split, stream)
                plan = self.split_plan(split, size, rng)
                rows: dict[str, list[Any]] = {"id": [], "tier": [], "task": []}
                attempts = 0
                while len(rows["id"]) < size:
                    attempts += 1
                    if attempts > 50 * size + 1000:
                        raise ValueError(f"{self.name}: cannot generate {size} distinct {split} tasks; "
                                         f"lower env.{split}_size")
                    tier, extra = plan[len(rows["id"])]
                    task = self.generate_task(rng, tier, **extra)
                    key = self.task_key(task)
                    if key in seen:
                        continue
                    seen.add(key)
                    rows["id"].append(f"{split}-{len(rows['id']):05d}")
                    rows["tier"].append(tier)
                    rows["task"].append(json.dumps(task, sort_keys=True))
                splits[split] = Dataset.from_dict(rows)
            self._tasks = DatasetDict(splits)
        return self._tasks

    def split_rng(self, split: str, stream: random.Random) -> random.Random:
        """The random stream `split`'s tasks are drawn from. Default: one stream from `data_seed` runs
        through the splits in order (train, heldout, demo, dev); an environment may give each split a
        stream of its own (textworld)."""
        return stream

    def split_plan(self, split: str, size: int, rng: random.Random) -> list[tuple[int, dict[str, Any]]]:
        """Each row of `split` in order: its tier and the further keyword arguments of `generate_task`.
        Default: the tiers in turn, no further arguments. An environment whose splits differ in kind
        overrides it (terminal: defects in train only, a composition tier in dev and held-out); it may
        draw from `rng`, the split's stream, before the first task is drawn."""
        return [(self.tiers[i % len(self.tiers)], {}) for i in range(size)]

    def task_key(self, task: dict[str, Any]) -> str:
        """What makes two tasks the same (no split holds a task of another): by default the whole task."""
        return json.dumps(task, sort_keys=True)

    # ---- episodes ----------------------------------------------------------------------
    @abstractmethod
    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        """A fresh episode of `task`. `variant` names counterfactual plays an env supports."""

    def variants(self) -> tuple[str, ...]:
        """Episode variants this environment supports (counterfactual plays)."""
        return ("main",)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from (package, version, license, task counts); every run's manifest
        records it. The suite's own environments generate their tasks from `data_seed`."""
        return {"source": f"generated by {type(self).__module__}", "data_seed": self.cfg.data_seed,
                "train": self.cfg.train_size, "heldout": self.cfg.heldout_size, "dev": self.cfg.dev_size}

    def check_context(self, count_tokens: Callable[[str], int], max_length: int, max_new_tokens: int) -> None:
        """Raise ValueError (one line) when a first observation and one turn do not fit in `max_length`
        tokens.

        Run once the tokenizer exists (a tiny model's is trained on `corpus()`); the config check can only
        require `max_length > max_new_tokens`. Every variant's first observation of every train and held-out
        task is counted; later turns that overflow end their episode (the rollout's `context_overflow`).
        """
        longest, text = 0, ""
        tasks = self.task_set()
        for split in ("train", "heldout", "dev"):
            for row in tasks.get(split, []):
                for variant in self.variants():
                    obs = self.new_episode(json.loads(row["task"]), random.Random(0), variant).start()
                    n = count_tokens(obs.text)
                    if n > longest:
                        longest, text = n, obs.text
        if longest + max_new_tokens > max_length:
            raise ValueError(f"model.max_length={max_length} is too short for {self.name}: its longest "
                             f"prompt is {longest} tokens ({text[:40]!r}...) + "
                             f"trainer.max_new_tokens={max_new_tokens}; "
                             f"raise model.max_length to at least {longest + max_new_tokens}")

    def corpus_splits(self) -> tuple[str, ...]:
        """The splits whose scripted episodes train the tokenizer, in order (families: the demo split's
        chains, whose curate rows only it holds, then train)."""
        return ("train",)

    def corpus(self, n: int = 400) -> Iterator[str]:
        """Texts for training a tokenizer: full expert episodes of the first `n` tasks of each of
        `corpus_splits` present, one random stream across them."""
        tasks = self.task_set()
        rng = random.Random(0)
        for split in [s for s in self.corpus_splits() if s in tasks]:
            rows = tasks[split]
            for row in rows.select(range(min(n, len(rows)))):
                ep = self.new_episode(json.loads(row["task"]), rng)
                obs: Observation | None = ep.start()
                while obs is not None:
                    action = ep.expert_action()
                    yield obs.text + action
                    obs = ep.step(action).next

    # ---- the check: `python -m envs check` (envs/api/check.py) --------------------------------------------
    @classmethod
    def settings_for_check(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings the check builds this environment with, from those of its config file: by default
        `oracle_settings` laid over them. An environment that needs more to run on a machine without its
        data overrides it (paper_math: sample rows in the data sets' layouts)."""
        return {**settings, **cls.oracle_settings}

    def oracle_action(self, state: EpisodeState, obs: Observation) -> str:
        """The oracle's action for the role that acts now (`obs`'s). Default: the scripted demonstrator's,
        which `oracle_settings` make an oracle. An environment whose demonstrator lacks information
        rather than making a mistake overrides it (voting: the voters not shown the asked fact guess, so
        the oracle answers the hidden value for every voter)."""
        return state.expert_action()

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """A uniformly random action of the form the environment expects, so that the verifier, not the
        parser, has to reject it (the check fails an environment whose random policy wins too often).
        Every environment of the suite says what random means for it in its override's docstring; this
        default: 0 to 12 characters, uniform over letters, digits, space, `#` and `=`."""
        return "".join(rng.choices(string.ascii_letters + string.digits + " #=", k=rng.randint(0, 12)))
