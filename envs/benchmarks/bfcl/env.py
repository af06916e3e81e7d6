"""`bfcl`: BFCL v4 multi-turn: stateful simulated APIs, rewarded by the benchmark's own checker.

Provenance: the Berkeley Function Calling Leaderboard (Patil et al., "The Berkeley Function Calling
Leaderboard (BFCL): From Tool Use to Agentic Evaluation of Large Language Models", ICML 2025), as
shipped in the PyPI package `bfcl-eval` (2026.3.23; Apache-2.0), installed without its
dependencies (`pip install --no-deps`: the multi-turn APIs and checker need only the standard
library and mpmath; the package's model clients, tree-sitter parsers and retrieval stack are never
imported). Its multi-turn categories, 200 scenarios each: `base`, `miss_func` (a function is
withheld until a later turn), `miss_param` (a turn lacks a parameter: the model should ask, not
call) and `long_context` (the same scenarios with large states and outputs). Eight simulated apps
(file system, messaging, posting, tickets, trading, travel, vehicle control, math), executed in
process; nothing is downloaded. `BfclEnv.provenance()` gives the same facts for a run's manifest.

One role (`agent`). The first observation is BFCL's default prompting-mode system prompt (its own
template: classic style, plain text, function docs as JSON) and the first user turn. Each action is
BFCL's Python call syntax, `[func(a=1), g(b='x')]`: the calls run in order on the episode's app
instances and the next observation is their results, formatted as BFCL's prompting handlers format
them (a list of `{'role': 'tool', 'name': call, 'content': result}`). Any action that is not a
non-empty list of calls (a text reply, `[]`) ends the user's turn, as in BFCL's inference loop;
the next observation is the next user turn (for a `miss_func` turn, BFCL's "I have updated some
more functions..." message with the added functions' docs). A turn of more than
`max_steps_per_turn` call steps (BFCL's `MAXIMUM_STEP_LIMIT`, 20) force-quits the episode (reward 0,
as BFCL scores a force-terminated entry). After the last turn, BFCL's `multi_turn_checker` replays
the decoded calls from the initial state and compares, turn by turn, every app's state with the
ground truth's and the ground truth's results with the model's: reward 1 when it says `valid`,
else 0 (`info.error_type` gives its reason).

Decoding is this environment's own (`calls.py`), not BFCL's (BFCL's `ast_parse` `eval`s arithmetic
and lambdas in model text): the action is stripped of backticks as BFCL does, bracketed, parsed with
`ast`; each call must be a plain name with literal keyword values (`ast.literal_eval`; a bare name
is read as its string, as BFCL does); positional arguments are dropped, as BFCL's decoder drops
them. Text that fails to parse as calls although it contains `(` ends the turn with an
`invalid_action` event and a note before the next user turn. A call of a function no app has, with a
non-literal argument, or past a bound is not run: its result is an error and it is left out of what
the checker replays (an error changes no state; BFCL would have run it into the same or a slower
error). The bounds keep a call from hanging the process in one C operation, which no signal
interrupts (the rollout's limit on a step's CPU time, `env.step_cpu_s`, acts between Python
bytecodes): every number in the arguments, nested ones included, has |x| <= `MAX_MAGNITUDE` (10**15;
the ground truth's largest is 987654: `power(base=<4000 digits>, exponent=1000)` took 2 s), and
`GUARDS` bounds the arguments that are exponents or precisions (`round_number(number=7,
decimal_places=-100000000)` computes 10**100000000, `power(exponent=10**9)`). A function withheld in
`miss_func` runs when called by name before it is offered, as BFCL's executor runs it (one ground
truth, `miss_func_49`, calls `tail` before its turn).

**Provenance events** (#46; IAPO's influence graph, `replications/iapo/graph.py`): a call step whose calls
all worked gets `Event("provenance", j, {"source": i, "kind": "success_utilization"})` for each earlier
turn i whose tool results first showed an argument value it writes (an id, a file name, a number), and
source -1 (`input`) for a value first seen in the system prompt or a user turn; a failed action (a call
refused, raising or returning an error; an invalid action) right after a failed one gets
`failed_utilization` from it. Defined exactly in `envs/benchmarks/bfcl/provenance.py`. The events change
no reward, observation, info, split or demonstrated play.

Splits are fixed by scenario number `i` (the same for every category, so a held-out scenario is
held out in all of them): held-out `i % 5 == 0` (40), dev `i % 10 == 3` (20), train the other 140
(demo: train scenarios beyond `train_size`). `categories` picks the categories (a task's tier is its
category's position + 1); a split takes its scenarios in order and each scenario in every listed
category, up to its size. `docs="signatures"` replaces the JSON docs with one line per function (a
deviation for small-context models: the first observation of a base scenario is 4.2k-9.3k tokens with
JSON docs (median 7.2k, SmolLM2's tokenizer), 0.65k-1.35k with signatures).

The scripted demonstrator (the SFT warm start's data; the oracle of `python -m envs check`)
plays the ground truth: each turn's calls in one action (positional arguments named from the
method's signature), then `[]` (or, on a turn whose ground truth is empty, a sentence saying it
cannot proceed). Injected error: with probability `demo_slip` per turn it leaves out the turn's
last call.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from datasets import Dataset, DatasetDict

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.benchmarks.bfcl.apps import (
    check,
    function_docs,
    load_apps,
    methods,
    result_text,
    scenarios,
    system_prompt,
)
from envs.benchmarks.bfcl.calls import END_TURN, Call, keyword_call, parse_calls
from envs.benchmarks.bfcl.provenance import USER, Provenance

PACKAGE, LICENSE, SCENARIOS = "bfcl-eval", "Apache-2.0", 200
CATEGORIES = ("base", "miss_func", "miss_param", "long_context")
AGENT = "agent"
CANNOT = "I cannot do this with the functions and the information I have; please tell me what is missing."


def split_of(index: int) -> str:
    """The split of scenario `index` (the same in every category)."""
    return "heldout" if index % 5 == 0 else "dev" if index % 10 == 3 else "train"


@dataclass
class BfclConfig(EnvConfig):
    name: str = "bfcl"
    categories: list[str] = field(default_factory=lambda: ["base"])  # of CATEGORIES; tier = position + 1
    train_size: int = 140  # tasks (scenario x category) in train: at most 140 x len(categories), minus demo
    heldout_size: int = 40  # at most 40 x len(categories)
    dev_size: int = 20  # at most 20 x len(categories)
    max_steps_per_turn: int = 20  # BFCL's MAXIMUM_STEP_LIMIT: one more call step force-quits (reward 0)
    docs: str = "json"  # "json": BFCL's function docs (indent 4); "signatures": one line per function
    max_result_chars: int = 0  # cut each tool result shown to the model to this many characters (0: whole)
    demo_slip: float = 0.0  # the demonstrator leaves out a turn's last call with this probability


class BfclEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: BfclConfig, rng: random.Random):
        self.task, self.cfg = task, cfg
        self.apps = load_apps(task)
        self.bound = methods(self.apps)
        docs = [d for c in task["involved_classes"] for d in function_docs(c)]
        self.missed = {int(t): names for t, names in task["missed_function"].items()}
        withheld = {n for names in self.missed.values() for n in names}
        self.offered = [d for d in docs if d["name"] not in withheld]
        self.docs_by_name = {d["name"]: d for d in docs}
        self.turn, self.steps = 0, 0
        self.decoded: list[list[list[str]]] = [[]]
        self.done = False
        self.user_text = ""  # the current turn's user message
        truth = task["ground_truth"]
        self.truth = [[keyword_call(c, self.bound) for c in turn] for turn in truth]
        self.slips = [len(turn) >= 2 and rng.random() < cfg.demo_slip for turn in truth]
        self.actions = 0  # actions taken: the next one's turn index in the episode
        self.provenance: Provenance | None = None  # which earlier turn each call step used (events; start())

    def _user_turn(self) -> str:
        """The user's message(s) of the current turn (BFCL's added-functions message on a miss_func turn)."""
        if self.turn in self.missed:
            from bfcl_eval.constants.default_prompts import (
                DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING,
            )

            added = [self.docs_by_name[n] for n in self.missed[self.turn]]
            self.offered += added
            self.user_text = DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_PROMPTING.format(functions=added)
        else:
            self.user_text = "\n".join(m["content"] for m in self.task["question"][self.turn])
        return self.user_text

    def start(self) -> Observation:
        obs = Observation(AGENT, f"{system_prompt(self.offered, self.cfg.docs)}\n\n{self._user_turn()}")
        self.provenance = Provenance(obs.text)
        return obs

    def expert_action(self) -> str:
        if self.done or self.turn >= len(self.truth):
            return END_TURN
        calls = self.truth[self.turn]
        if self.slips[self.turn]:
            calls = calls[:-1]
        # not yet made this turn (a hostile step may come first)
        if calls and calls not in self.decoded[self.turn]:
            return "[" + ", ".join(calls) + "]"
        return END_TURN if self.truth[self.turn] else CANNOT

    def _run(self, call: Call) -> tuple[str, bool]:
        """The call's result as shown, and whether it failed (refused, raised, or returned an error)."""
        if call.refused is None and call.name not in self.bound:
            call.refused = f"no function named {call.name!r}"
        if call.refused is not None:
            return f"Error during execution: {call.refused}", True
        import decimal

        import mpmath

        dps, prec = mpmath.mp.dps, decimal.getcontext().prec  # MathAPI sets these process-wide
        try:
            result = self.bound[call.name](**call.kwargs)
            return result_text(result), isinstance(result, dict) and "error" in result
        except Exception as e:
            return f"Error during execution: {e}", True
        finally:
            mpmath.mp.dps, decimal.getcontext().prec = dps, prec

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        calls, why = parse_calls(action)
        turn, self.actions = self.actions, self.actions + 1  # the action's index in the episode
        assert self.provenance is not None, "start() comes first"
        if calls:
            results, failed = zip(*[self._run(c) for c in calls], strict=True)
            ran = [c.text() for c in calls if c.refused is None]
            if ran:
                self.decoded[self.turn].append(ran)
            self.steps += 1
            events = [Event("tool_call", 0, {"name": c.name[:100], "ok": c.refused is None}) for c in calls]
            events += self.provenance.step(turn, action, [c.kwargs for c in calls], failed=any(failed))
            if self.steps > self.cfg.max_steps_per_turn:
                self.done = True
                return StepResult(None, events=events, info={"valid": False,
                                                             "error_type": "multi_turn:force_terminated",
                                                             "turns": self.turn})
            cut = self.cfg.max_result_chars
            shown = [{"role": "tool", "name": c.text()[:1000], "content": r[:cut] if cut else r}
                     for c, r in zip(calls, results, strict=True)]
            self.provenance.see("\n".join(s["content"] for s in shown), turn)
            return StepResult(Observation(AGENT, repr(shown)), events=events)
        events = [Event("invalid_action", 0, {"why": why})] if why else []
        events += self.provenance.step(turn, action, [], failed=bool(why))
        self.turn, self.steps = self.turn + 1, 0
        if self.turn < len(self.task["question"]):
            self.decoded.append([])
            note = ("(Your last message was not a valid list of function calls: "
                    f"{why}. The turn is over.)\n\n" if why else "")
            user = self._user_turn()
            self.provenance.see(user, USER)
            return StepResult(Observation(AGENT, note + user), events=events)
        self.done = True
        verdict = check(self.task, self.decoded)
        valid = bool(verdict.get("valid"))
        return StepResult(None, reward=float(valid), success=valid, events=events,
                          info={"valid": valid, "error_type": str(verdict.get("error_type", ""))[:200]})


class BfclEnv(Environment):
    name = "bfcl"
    roles = (AGENT,)
    offers = frozenset({"single_agent", "provenance_events"})  # envs/api/features.py
    config_class = BfclConfig
    oracle_settings = {"demo_slip": 0.0}
    stop = ()  # an action ends at the end of the model's turn (calls may span lines)

    def __init__(self, cfg: BfclConfig):
        unknown = [c for c in cfg.categories if c not in CATEGORIES]
        if not cfg.categories or unknown:
            raise ValueError(f"env.categories must be a non-empty list of {list(CATEGORIES)}; "
                             f"got {cfg.categories}")
        if cfg.docs not in ("json", "signatures"):
            raise ValueError(f"env.docs must be 'json' or 'signatures'; got {cfg.docs!r}")
        if cfg.max_steps_per_turn < 1 or cfg.max_result_chars < 0 or not 0.0 <= cfg.demo_slip <= 1.0:
            raise ValueError("env.max_steps_per_turn must be >= 1, env.max_result_chars >= 0 and "
                             f"env.demo_slip in [0, 1]; got {cfg.max_steps_per_turn}, "
                             f"{cfg.max_result_chars}, {cfg.demo_slip}")
        n = len(cfg.categories)
        for split, size, have in (("train", cfg.train_size + cfg.demo_size, 140),
                                  ("heldout", cfg.heldout_size, 40), ("dev", cfg.dev_size, 20)):
            if size > have * n:
                raise ValueError(f"bfcl has {have} {split} scenarios per category ({have * n} tasks for {n} "
                                 f"categories): lower env.{split}_size"
                                 + (" + env.demo_size" if split == "train" else "") + f"; got {size}")
        super().__init__(cfg)
        self.cfg: BfclConfig = cfg

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.cfg.categories) + 1))

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """A scenario of the tier's category drawn at random (the splits themselves are fixed: see
        `task_set`)."""
        return dict(rng.choice(scenarios(self.cfg.categories[tier - 1])))

    def task_set(self) -> DatasetDict:
        """Splits by scenario number (`split_of`); each takes its scenarios in order, every category of
        each."""
        if self._tasks is None:
            pools: dict[str, list[dict[str, Any]]] = {"train": [], "heldout": [], "dev": []}
            by_category = [scenarios(c) for c in self.cfg.categories]
            for index in range(SCENARIOS):
                for rows in by_category:
                    pools[split_of(index)].append(rows[index])
            c = self.cfg
            chosen = {"train": pools["train"][: c.train_size], "heldout": pools["heldout"][: c.heldout_size]}
            if c.demo_size:
                chosen["demo"] = pools["train"][c.train_size: c.train_size + c.demo_size]
            if c.dev_size:
                chosen["dev"] = pools["dev"][: c.dev_size]
            self._tasks = DatasetDict({
                split: Dataset.from_dict({"id": [t["id"] for t in rows],
                                          "tier": [c.categories.index(t["category"]) + 1 for t in rows],
                                          "task": [json.dumps(t, sort_keys=True) for t in rows]})
                for split, rows in chosen.items()})
        return self._tasks

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"bfcl has no episode variant {variant!r}")
        return BfclEpisode(task, self.cfg, rng)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        return {"benchmark": "BFCL v4 multi-turn (Patil et al., ICML 2025)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE,
                "tasks": {c: len(scenarios(c)) for c in self.cfg.categories},
                "splits": {"train": self.cfg.train_size, "heldout": self.cfg.heldout_size,
                           "dev": self.cfg.dev_size, "demo": self.cfg.demo_size},
                "heldout_ids": "scenario number % 5 == 0", "dev_ids": "scenario number % 10 == 3",
                "docs": self.cfg.docs}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """`[]` (end the turn) with probability 0.3, else one call of an offered function, uniform, its
        required arguments of their documented types (strings: words of the user's turn; numbers in
        [0, 100])."""
        if rng.random() < 0.3:
            return END_TURN
        doc = rng.choice(state.offered)  # type: ignore[attr-defined]
        words = re.findall(r"[A-Za-z0-9_.]+", state.user_text) or ["x"]  # type: ignore[attr-defined]
        values = {"string": lambda: rng.choice(words), "integer": lambda: rng.randint(0, 100),
                  "float": lambda: round(rng.uniform(0, 100), 2), "boolean": lambda: rng.random() < 0.5,
                  "array": lambda: [rng.choice(words)], "dict": dict}
        props = doc.get("parameters", {}).get("properties", {})
        kwargs = {k: values.get(props.get(k, {}).get("type", "string"), values["string"])()
                  for k in doc.get("parameters", {}).get("required", [])}
        return "[" + Call(doc["name"], kwargs).text() + "]"
