"""`paper_math` and `paper_math_team`: the papers' math data (GSM8K, MATH, MATH500, AIME, AMC, ...)
read from local disk, answers checked with math-verify.

The tasks are the rows of the data sets staged under `path` (`envs/benchmarks/paper_math/data.py`: one folder
per data set, its files as published; at `scale=paper` the path is `method.paper_data`). Training
reads each `train` data set's own train split; held-out evaluation each `heldout` data set's own
test split, so nothing evaluated was trained on (a train question whose text is also a held-out
question is dropped, and counted in `provenance()`). A task's tier is its data set's position in
`train + heldout` (from 1), so evaluation reports one row per benchmark. `train_size` and
`heldout_size` cap the splits (0: every row), taking rows round robin over the data sets, each in
an order shuffled with `data_seed`.

Answers: the model's action is parsed by math-verify (`parse`, LaTeX and plain expressions, the last
`\\boxed{}` preferred) and compared with the gold by `verify` (Hugging Face's Math-Verify, as used
by open-r1). The gold is the data set's answer column (`\\boxed{<answer>}`), GSM8K's `#### <n>` line,
or for MATH the worked solution itself, whose `\\boxed{}` math-verify reads. Only the last
`MAX_ANSWER_CHARS` characters of an action are parsed (the answer is at the end; sympy on 100 kB of
hostile text could run for minutes), with math-verify's own timeout in the main thread. Reward 1
for a verified answer, else 0; an action in which math-verify finds no answer at all is an
`invalid_action`. No stop string: a turn ends at the model's EOS.

Two environments, one task logic:
- `paper_math`: one role (`solver`), one turn: the question and `instruction` (DeepSeekMath's
  chain-of-thought prompt by default [P: Shao et al. 2024]).
- `paper_math_team` (CCPO's Think-Reason dyad [I: the prompts are ours]): the Thinker sees the
  question and writes guidance; the Solver sees the question, the guidance and `instruction`, and
  answers. Variants as `thinker_solver`'s: `solo` (the Solver alone, the guidance "(none)"),
  `empty_guidance` (the Thinker writes, the Solver gets "(none)"), `paired` (the Solver alone first,
  then the Thinker, then the Solver again in a fresh context; `info` has `solo_correct`,
  `joint_correct`, `help`, `hurt`, `contribution`). Every episode the Thinker played has `msg_silent`
  (an empty message) and `msg_chars`.

The demonstrator answers with the data set's worked solution where it has one (else
`The final answer is $\\boxed{<answer>}$`); the demonstrator Thinker gives the solution's first
sentence. It is the oracle of `python -m envs check`, which plays hand-written sample rows
in the published layouts (`paper_data.write_samples`) when no data is staged.
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar, NamedTuple

from datasets import Dataset, DatasetDict

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.benchmarks.paper_math.data import DATASETS, check_staged, split_files
from envs.benchmarks.paper_math.loading import load_split
from envs.benchmarks.paper_math.samples import sample_data

THINKER, SOLVER = "thinker", "solver"
MAX_ANSWER_CHARS = 2000  # the tail of an action that math-verify parses
NO_GUIDANCE = "(none)"


@dataclass
class PaperMathConfig(EnvConfig):
    name: str = "paper_math"
    # the staged data's folder, one subfolder per data set (scale=paper: ${method.paper_data})
    path: str | None = None
    train: list[str] = field(default_factory=lambda: ["gsm8k", "math"])  # data sets whose train split trains
    # data sets whose own test split evaluates
    heldout: list[str] = field(default_factory=lambda: ["gsm8k", "math"])
    # DeepSeekMath's CoT prompt
    instruction: str = "Please reason step by step, and put your final answer within \\boxed{}."
    # paper_math_team: what the Thinker is asked to write
    thinker_instruction: str = ("You are the Thinker of a two-agent team. Write brief guidance for the "
                                "Solver: the key idea and the steps to take. Do not give the final answer.")
    train_size: int = 0  # at most this many train tasks (0: every row)
    heldout_size: int = 0  # at most this many held-out tasks (0: every row)
    dev_size: int = 64  # train rows set aside (from the end of the shuffled pool) for design and tuning

    def check(self) -> None:
        for key in ("train_size", "heldout_size", "demo_size", "dev_size"):
            if getattr(self, key) < 0:
                raise ValueError(f"env.{key} must be >= 0 (0: every row); got {getattr(self, key)}")
        if not self.train or not self.heldout:
            raise ValueError("env.train and env.heldout each need at least one data set, e.g. [gsm8k, math]")
        for name in (*self.train, *self.heldout):
            if name not in DATASETS or DATASETS[name].kind != "math":
                maths = [n for n, s in DATASETS.items() if s.kind == "math"]
                raise ValueError(f"paper_math reads math data sets ({', '.join(maths)}); got {name!r} in "
                                 "env.train/heldout")


class Verdict(NamedTuple):
    answered: bool  # math-verify found an answer in the action
    correct: bool  # and it equals the gold
    # math-verify found the gold in the data set's row (False: the row cannot be scored; counted in info)
    gold: bool


@functools.lru_cache(maxsize=65536)
def _gold(truth: str, timeout: int | None) -> tuple[Any, ...]:
    from math_verify import parse

    return tuple(parse(truth, parsing_timeout=timeout))


def check_answer(truth: str, action: str) -> Verdict:
    """Whether math-verify finds an answer in `action`, and whether it equals the gold `truth` (text
    math-verify parses: `\\boxed{42}` or a worked solution ending in one).

    >>> check_answer("\\\\boxed{\\\\frac{1}{2}}", "so it is $\\\\boxed{0.5}$")
    Verdict(answered=True, correct=True, gold=True)
    """
    from math_verify import parse, verify

    # math-verify's timeout is signal.alarm, which only the main thread may set
    timeout = 5 if threading.current_thread() is threading.main_thread() else None
    try:
        gold = list(_gold(truth, timeout))
        answer = parse(action[-MAX_ANSWER_CHARS:], parsing_timeout=timeout)
        if not answer:
            return Verdict(False, False, bool(gold))
        return Verdict(True, bool(gold) and bool(verify(gold, answer, timeout_seconds=timeout)), bool(gold))
    except Exception:  # math-verify on hostile text: no credit, never a crash
        return Verdict(True, False, True)


class PaperMathEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], env: PaperMathEnv, variant: str):
        self.task, self.env, self.variant = task, env, variant
        team = env.team
        # the turns of this episode, in order: `solo` plays the Solver alone, `paired` adds a solo answer
        # first
        self.plan = {"main": [THINKER, SOLVER] if team else [SOLVER], "solo": [SOLVER],
                     "empty_guidance": [THINKER, SOLVER], "paired": [SOLVER, THINKER, SOLVER]}[variant]
        self.turn = 0
        self.message: str | None = None  # the Thinker's guidance, once written
        self.solo_correct: bool | None = None

    def _solver_prompt(self, guidance: str | None) -> str:
        q, c = self.task["question"].strip(), self.env.cfg
        if not self.env.team:
            return f"{q}\n{c.instruction}"
        shown = guidance.strip() if guidance and guidance.strip() else NO_GUIDANCE
        return f"{q}\n\nGuidance from the Thinker:\n{shown}\n\n{c.instruction}"

    def _observation(self) -> Observation:
        role = self.plan[self.turn]
        if role == THINKER:
            return Observation(THINKER,
                               f"{self.task['question'].strip()}\n\n{self.env.cfg.thinker_instruction}")
        shown = self.message if self.variant in ("main", "paired") and self.turn > 0 else None
        return Observation(SOLVER, self._solver_prompt(shown), new_context=self.turn > 0)

    def start(self) -> Observation:
        return self._observation()

    def expert_action(self) -> str:
        if self.turn < len(self.plan) and self.plan[self.turn] == THINKER:
            first = (self.task.get("reference") or "").split(". ")[0].split("\n")[0]
            return "" if "boxed" in first else first[:300]
        return str(self.task.get("reference") or f"The final answer is $\\boxed{{{self.task['answer']}}}$.")

    def step(self, action: str) -> StepResult:
        if self.turn >= len(self.plan):
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        role, index = self.plan[self.turn], self.turn
        self.turn += 1
        if role == THINKER:
            self.message = action
            return StepResult(self._observation())
        answered, correct, gold = check_answer(self.task["truth"], action)
        if self.variant == "paired" and self.solo_correct is None:
            self.solo_correct = correct
            return StepResult(self._observation())
        info: dict[str, Any] = {"answered": answered, "correct": correct, "gold_parsed": gold,
                                "dataset": self.task["dataset"]}
        if self.message is not None:
            info.update(msg_silent=not self.message.strip(), msg_chars=len(self.message.strip()))
        if self.variant == "paired":
            solo = bool(self.solo_correct)
            info.update(solo_correct=solo, joint_correct=correct, help=correct and not solo,
                        hurt=solo and not correct,
                        contribution=float(correct) - float(solo))
        no_answer = {"why": "no final answer: put it in \\boxed{}"}
        events = [] if answered else [Event("invalid_action", index, no_answer)]
        return StepResult(None, reward=float(correct), success=correct, events=events, info=info)


class PaperMathEnv(Environment):
    name = "paper_math"
    roles: ClassVar[tuple[str, ...]] = (SOLVER,)
    offers = frozenset({"single_agent"})  # envs/api/features.py
    config_class = PaperMathConfig
    team: ClassVar[bool] = False  # a Thinker writes guidance for the Solver (paper_math_team)
    stop = ()  # a turn ends at the model's EOS

    def __init__(self, cfg: PaperMathConfig):
        super().__init__(cfg)
        self.cfg: PaperMathConfig = cfg
        self.dropped = 0  # train questions dropped because a held-out split has them
        check_staged(cfg.path, self.needs(), setting="method.paper_data (env.path)")

    def needs(self) -> dict[str, list[str]]:
        """Data set -> the splits this setting reads."""
        out: dict[str, list[str]] = {}
        for name in self.cfg.train:
            out.setdefault(name, []).append("train")
        for name in self.cfg.heldout:
            out.setdefault(name, []).append("test")
        return out

    @property
    def datasets(self) -> list[str]:
        """Every data set, train ones first; a task's tier is its data set's position here + 1."""
        return list(dict.fromkeys([*self.cfg.train, *self.cfg.heldout]))

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.datasets) + 1))

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        raise NotImplementedError(f"{self.name} reads its tasks from the staged data (task_set), "
                                  "it generates none")

    def _rows(self, name: str, split: str) -> list[dict[str, Any]]:
        rows = [{"dataset": name, **r} for r in load_split(self.cfg.path or "", name, split)]
        random.Random(f"{self.cfg.data_seed}/{name}/{split}").shuffle(rows)
        return rows

    def task_set(self) -> DatasetDict:
        """Held-out: the test splits; train: the train splits minus any held-out question and the dev rows
        (the last `dev_size` of the shuffled pool); demo: the train rows beyond `train_size`. A capped
        split takes its rows round robin over its data sets."""
        if self._tasks is None:
            heldout = _round_robin({name: self._rows(name, "test") for name in self.cfg.heldout})
            held = {r["question"].strip() for r in heldout}
            train = _round_robin({name: self._rows(name, "train") for name in self.cfg.train})
            kept = [r for r in train if r["question"].strip() not in held]
            self.dropped = len(train) - len(kept)
            c = self.cfg
            # dev from the pool's end: a capped train split keeps the rows it always had
            cut = len(kept) - c.dev_size
            dev, kept = (kept[cut:], kept[:cut]) if c.dev_size else ([], kept)
            if len(dev) < c.dev_size or (c.dev_size and not kept):
                raise ValueError(f"{self.name}: env.dev_size={c.dev_size} leaves no train rows "
                                 f"({len(train)} in the pool); "
                                 f"lower env.dev_size (0: no dev split)")
            rows = {"heldout": heldout[: c.heldout_size or None], "train": kept[: c.train_size or None]}
            if dev:
                rows["dev"] = dev
            if c.demo_size:
                rows["demo"] = kept[c.train_size:][: c.demo_size] if c.train_size else []
                if len(rows["demo"]) < c.demo_size:
                    raise ValueError(f"{self.name}: env.demo_size={c.demo_size} needs that many train rows "
                                     f"beyond env.train_size={c.train_size} (0: every row); "
                                     f"{len(rows['demo'])} are left")
            splits = {}
            for split, items in rows.items():
                if not items:
                    raise ValueError(f"{self.name}: the {split} split is empty; check the files under "
                                     f"{c.path}")
                splits[split] = Dataset.from_dict({
                    "id": [f"{split}-{k:05d}" for k in range(len(items))],
                    "tier": [self.datasets.index(r["dataset"]) + 1 for r in items],
                    "task": [json.dumps(r, sort_keys=True) for r in items]})
            self._tasks = DatasetDict(splits)
        return self._tasks

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant not in self.variants():
            raise ValueError(f"{self.name} has no episode variant {variant!r}; it has {self.variants()}")
        return PaperMathEpisode(task, self, variant)

    def variants(self) -> tuple[str, ...]:
        return ("main", "solo", "empty_guidance", "paired") if self.team else ("main",)

    def provenance(self) -> dict[str, Any]:
        """The data sets, splits and files read (size and sha256), and the rows kept, for the run's
        manifest."""
        files = {f"{name}/{split}": [{"file": str(p), "bytes": p.stat().st_size,
                                      "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
                                     for p in split_files(self.cfg.path, name, split)]
                 for name, splits in self.needs().items() for split in splits}
        tasks = self.task_set()
        return {"source": "staged data (envs/benchmarks/paper_math/data.py)", "path": self.cfg.path,
                "datasets": {n: DATASETS[n].source for n in self.datasets}, "files": files,
                "tasks": {split: len(tasks[split]) for split in tasks},
                "train_dropped_as_heldout": self.dropped,
                "data_seed": self.cfg.data_seed}

    @classmethod
    def settings_for_check(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """Without a data folder in its config file, hand-written rows in the data sets' published layouts
        (`sample_data`), every one checked (train and held-out), none set aside for dev."""
        settings = super().settings_for_check(settings)
        if not settings.get("path"):
            settings["path"] = sample_data()
            settings["dev_size"] = 0
        return settings

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """Thinker: silent or a generic hint; Solver: `\\boxed{n}`, n uniform in [-1000, 1000]."""
        if obs.role == "thinker":
            return rng.choice(["", "Add the numbers.", "Use the quadratic formula."])
        return f"The answer is $\\boxed{{{rng.randint(-1000, 1000)}}}$."


class PaperMathTeamEnv(PaperMathEnv):
    """CCPO's Think-Reason dyad on the same tasks: a Thinker's guidance, then the Solver's answer."""

    name = "paper_math_team"
    roles = (THINKER, SOLVER)
    offers = frozenset({"multi_agent_shared_outcome", "two_role_dialogue"})  # envs/api/features.py
    team = True


def _round_robin(by_name: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Rows of every data set interleaved: the first of each, then the second of each, ..."""
    out: list[dict[str, Any]] = []
    k = 0
    lists = [rows for rows in by_name.values() if rows]
    while lists:
        lists = [rows for rows in lists if k < len(rows)]
        out.extend(rows[k] for rows in lists)
        k += 1
    return out
