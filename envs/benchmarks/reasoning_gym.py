"""`reasoning_gym`: procedurally generated reasoning questions, scored by the package's own verifiers.

Provenance: the PyPI package `reasoning-gym` (0.1.25; Apache-2.0; Stojanovski et al. 2025, arXiv
2505.24760): 100+ task generators, every task made from a seed on this machine, nothing
downloaded. `ReasoningGymEnv.provenance()` gives the package, version, license, generators and task
counts for a run's manifest.

One role (`solver`), one turn. The observation is a generated question and an instruction to put
the final answer between `<answer>` and `</answer>` (the package's own convention); the model may
reason first. Generation stops at `</answer>`. The answer is the text after the last `<answer>`
(up to `</answer>` if present); the generator's own `score_answer` scores it, and that score in
[0, 1] is the reward (some scorers give partial credit: `gsm_symbolic` 0.01 for a wrong number, the
default scorer len(truth)/len(answer) for an answer that contains the truth). `success` is a score
of 1. An action without `<answer>` is an `invalid_action` (reward 0), unless `untagged: last_number`,
where the last number of the text is scored instead (small instruct models rarely write the tags;
`info.tagged` says which). `basic_arithmetic` with `allow_parentheses: false` is refused: the
package drops the parentheses from the question but not from the answer.

Tasks: training on arithmetic and word-problem generators (`train_generators`: `basic_arithmetic`,
`chain_sum`, `products`, `leg_counting`, `aiw` by default), held-out evaluation on `gsm_symbolic`
(`heldout_generators`; GSM8K-derived templates with fresh numbers), so the held-out score measures
transfer to grade-school word problems. `generator_settings` passes settings to a generator's
config (e.g. `{basic_arithmetic: {max_terms: 3, max_digits: 2}}`). Each split takes its tasks round
robin from its generators, each generator seeded from (`data_seed`, split, generator); no question
appears in two splits (checked by text). The tier of a task is its generator's position in
`train_generators + heldout_generators`, starting at 1, so evaluation reports one row per generator.

The scripted demonstrator (the SFT warm start's data and the oracle of `python -m envs
check`) answers with the task's ground-truth answer, without reasoning.
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import zlib
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, ClassVar

from datasets import Dataset, DatasetDict

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

PACKAGE, LICENSE = "reasoning-gym", "Apache-2.0"
SOLVER = "solver"
OPEN, CLOSE = "<answer>", "</answer>"
MAX_ANSWER_CHARS = 1000  # longer answers are cut before scoring (scorers run regexes and float() on them)


@dataclass
class ReasoningGymConfig(EnvConfig):
    name: str = "reasoning_gym"
    train_generators: list[str] = field(
        default_factory=lambda: ["basic_arithmetic", "chain_sum", "products", "leg_counting", "aiw"])
    heldout_generators: list[str] = field(default_factory=lambda: ["gsm_symbolic"])
    # generator -> its config fields
    generator_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    # appended to every question
    instruction: str = "Give your final answer between <answer> and </answer>."
    # without <answer>: `tag` = an invalid action (the package's convention); `last_number` = the last
    # number of the text is the answer (for small instruct models that do not write the tags yet)
    untagged: str = "tag"


NUMBER = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")  # ASCII digits only (\d takes any Unicode digit)


def last_number(action: str) -> str | None:
    """The last ASCII number of the text (an optional minus sign, digits, an optional decimal part); None
    without one.

    >>> last_number("3 ÷ 9 = 0.5."), last_number("12 - 60 = -48 apples"), last_number("no number")
    ('0.5', '-48', None)
    """
    found = NUMBER.findall(action[-MAX_ANSWER_CHARS:])
    return found[-1] if found else None


def answer_text(action: str) -> str | None:
    """The text after the last `<answer>` (up to `</answer>` when present), stripped; None without `<answer>`.

    >>> answer_text("12 + 30 = 42, so <answer> 42 </answer>"), answer_text("<answer>7"), answer_text("42")
    ('42', '7', None)
    """
    start = action.rfind(OPEN)
    if start < 0:
        return None
    answer = action[start + len(OPEN):]
    end = answer.find(CLOSE)
    return (answer if end < 0 else answer[:end]).strip()[:MAX_ANSWER_CHARS]


class ReasoningGymEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], env: ReasoningGymEnv):
        self.task, self.env = task, env
        self.done = False

    def start(self) -> Observation:
        return Observation(SOLVER, f"{self.task['question'].rstrip()}\n{self.env.cfg.instruction}")

    def expert_action(self) -> str:
        return f"{OPEN}{self.task['answer']}"  # the stop string `</answer>` closes it

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        self.done = True
        return score_action(self.env, self.task, action)


def score_action(env: ReasoningGymEnv, task: dict[str, Any], action: str, index: int = 0) -> StepResult:
    """The last turn's result: the answer of `action` scored by the task's generator (`index`: the turn
    an `invalid_action` event names)."""
    answer = answer_text(action)
    tagged = answer is not None
    if answer is None and env.cfg.untagged == "last_number":
        answer = last_number(action)
    if answer is None:
        no_answer = {"why": f"no final answer: write {OPEN}...{CLOSE}"}
        return StepResult(None, events=[Event("invalid_action", index, no_answer)],
                          info={"score": 0.0, "answered": False, "tagged": False, "scorer_error": False})
    try:
        score = float(env.scorer(task["generator"])(answer, task))
        error = False
    except Exception:  # a scorer that chokes on odd text: no credit, never a crash
        score, error = 0.0, True
    score = min(max(score, 0.0), 1.0) if score == score else 0.0  # NaN or out of range: clipped to [0, 1]
    return StepResult(None, reward=score, success=score >= 1.0,
                      info={"score": score, "answered": True, "tagged": tagged, "scorer_error": error})


class ReasoningGymEnv(Environment):
    name = "reasoning_gym"
    roles: ClassVar[tuple[str, ...]] = (SOLVER,)
    offers = frozenset({"single_agent"})  # envs/api/features.py
    config_class = ReasoningGymConfig
    stop = (CLOSE,)

    def __init__(self, cfg: ReasoningGymConfig):
        if not cfg.train_generators or not cfg.heldout_generators:
            raise ValueError("env.train_generators and env.heldout_generators each need at least one "
                             "generator")
        known = _registry()
        named = {*cfg.train_generators, *cfg.heldout_generators, *cfg.generator_settings}
        unknown = sorted(named - set(known))
        if unknown:
            raise ValueError(f"unknown reasoning_gym generator(s) {unknown}; the package has {sorted(known)}")
        for gen, settings in cfg.generator_settings.items():
            fields = {f.name for f in dataclasses.fields(known[gen][1])} - {"seed", "size"}
            if not isinstance(settings, dict) or set(settings) - fields:
                raise ValueError(f"env.generator_settings.{gen} accepts {sorted(fields)}; got {settings!r}")
        if cfg.generator_settings.get("basic_arithmetic", {}).get("allow_parentheses") is False:
            # reasoning-gym 0.1.25 prints the expression without its parentheses but answers the
            # parenthesized one: about a third of the answers are wrong ("Calculate 5 / 9." -> 10)
            raise ValueError("env.generator_settings.basic_arithmetic.allow_parentheses=false gives wrong "
                             "answers in reasoning-gym (the question drops the parentheses the answer uses); "
                             "leave it true")
        if cfg.untagged not in ("tag", "last_number"):
            raise ValueError(f"env.untagged must be 'tag' or 'last_number'; got {cfg.untagged!r}")
        super().__init__(cfg)
        self.cfg: ReasoningGymConfig = cfg
        self._datasets: dict[tuple[str, int, int], Any] = {}

    @property
    def generators(self) -> list[str]:
        """Every generator, train ones first; a task's tier is its generator's position here + 1."""
        return list(dict.fromkeys([*self.cfg.train_generators, *self.cfg.heldout_generators]))

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.generators) + 1))

    def _dataset(self, generator: str, seed: int, size: int) -> Any:
        import reasoning_gym  # optional dependency: `pip install -e '.[envs]'`

        key = (generator, seed, size)
        if key not in self._datasets:
            self._datasets[key] = reasoning_gym.create_dataset(
                generator, seed=seed, size=size, **self.cfg.generator_settings.get(generator, {}))
        return self._datasets[key]

    def scorer(self, generator: str) -> Any:
        """The generator's `score_answer(answer, entry)` (it reads only the entry, not the dataset's
        items)."""
        return self._dataset(generator, 0, 1).score_answer

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """One task of the tier's generator, drawn with `rng` (the splits use `task_set`'s seeded streams)."""
        generator = self.generators[tier - 1]
        return self._entry(generator, self._dataset(generator, rng.randrange(2**31), 1)[0])

    @staticmethod
    def _entry(generator: str, item: dict[str, Any]) -> dict[str, Any]:
        """A generated item as a JSON task (metadata that JSON cannot hold is written as text)."""
        task = {"generator": generator, "question": item["question"], "answer": str(item["answer"]),
                "metadata": item.get("metadata", {})}
        return json.loads(json.dumps(task, default=str))

    def task_set(self) -> DatasetDict:
        """Each split round robin over its generators, one seeded stream per (split, generator); no
        question in two splits. Dev draws from the held-out generators (its own stream), after the others."""
        if self._tasks is None:
            sizes = [("train", self.cfg.train_size, self.cfg.train_generators),
                     ("heldout", self.cfg.heldout_size, self.cfg.heldout_generators)]
            if self.cfg.demo_size:
                sizes.append(("demo", self.cfg.demo_size, self.cfg.train_generators))
            # the held-out generators, other questions: design and tuning see the test's kind of task
            if self.cfg.dev_size:
                sizes.append(("dev", self.cfg.dev_size, self.cfg.heldout_generators))
            seen: set[str] = set()
            splits = {}
            for split, size, generators in sizes:
                streams = {g: self._stream(split, g, size) for g in generators}
                rows: dict[str, list[Any]] = {"id": [], "tier": [], "task": []}
                while len(rows["id"]) < size:
                    generator = generators[len(rows["id"]) % len(generators)]
                    task = next(t for t in streams[generator] if t["question"] not in seen)
                    seen.add(task["question"])
                    rows["id"].append(f"{split}-{len(rows['id']):05d}")
                    rows["tier"].append(self.generators.index(generator) + 1)
                    rows["task"].append(json.dumps(task, sort_keys=True))
                splits[split] = Dataset.from_dict(rows)
            self._tasks = DatasetDict(splits)
        return self._tasks

    def _stream(self, split: str, generator: str, size: int) -> Any:
        """The tasks of one (split, generator), in a fixed order from a seed of (data_seed, split,
        generator)."""
        seed = zlib.crc32(f"{self.cfg.data_seed}/{split}/{generator}".encode())
        # room for questions already taken by another split (and a generator's repeats)
        budget = 4 * size + 100
        dataset = self._dataset(generator, seed, budget)
        for i in range(budget):
            yield self._entry(generator, dataset[i])
        raise ValueError(f"reasoning_gym: {generator} gave too few distinct questions for the {split} split; "
                         f"lower env.{split}_size or add generators")

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"reasoning_gym has no episode variant {variant!r}")
        return ReasoningGymEpisode(task, self)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        return {"benchmark": "Reasoning Gym (Stojanovski et al. 2025, arXiv 2505.24760)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE,
                "generators": {"train": list(self.cfg.train_generators),
                               "heldout": list(self.cfg.heldout_generators)},
                "generator_settings": self.cfg.generator_settings,
                "tasks": {"train": self.cfg.train_size, "heldout": self.cfg.heldout_size,
                          "demo": self.cfg.demo_size}}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """`<answer><n>`, n uniform in [-1000, 1000]."""
        return f"<answer>{rng.randint(-1000, 1000)}"


def _registry() -> dict[str, tuple[type, type]]:
    """The package's generators: name -> (dataset class, config class)."""
    import reasoning_gym  # noqa: F401  (registers the generators)
    from reasoning_gym.factory import DATASETS

    return dict(DATASETS)
