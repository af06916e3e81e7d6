"""Is an environment's verifier right? Play an oracle and a random policy and compare their rewards.

`python -m envs check [NAME ...]` (all of `ENVS` without a name; `make check-envs`) builds
each environment from its config file (`common/conf/env/<name>.yaml`) with the demonstrator's
injected errors switched off (`ORACLE_SETTINGS`), plays the **oracle** and a **random policy** once
on each of `--tasks` tasks (half train, half held-out, drawn with `--seed`), and prints their mean
episode rewards. The check fails (exit 1, naming the environment) when the oracle's mean is below
`ORACLE_MIN` (the verifier rejects right answers, or the wrapper loses them) or the random
policy's is above `RANDOM_MAX` (the verifier accepts anything).

The oracle is the environment's scripted demonstrator without its injected errors, except where
the demonstrator lacks information rather than making a mistake: `voting`'s voters that are not
shown the asked fact guess, so its oracle answers the hidden value for every voter (`ORACLE_ACTIONS`).
`thinker_solver`'s oracle reaches 1 - cost of a one-character message (0.98 at the default cost).

"Random" means, per environment (`RANDOM_ACTIONS`), a uniformly random action of the form the
environment expects, so that the verifier, not the parser, has to reject it:

| env | a random action |
| --- | --- |
| arith | ` #<n>` (stepwise: `<n>`), n uniform in [0, max_value] |
| toolplan | planner: k attributes, each uniform; worker: a tool, uniform; answer: k value letters, each uniform |
| toolhops | planner: as many attributes as the plan needs, each uniform; worker: a tool, uniform; answer: k entity letters, each uniform |
| chain_tasks | a call: the verb uniform, its arguments uniform (items, names, days, quantities 1-5, ids 1-99) |
| thinker_solver | Thinker: silent or one value, uniform over the num_values + 1; Solver: ` #<v>`, v uniform |
| voting | ` #<v>`, v uniform in [0, num_values) |
| reasoning_gym | `<answer><n>`, n uniform in [-1000, 1000] |
| humaneval | a trivial body, uniform over `TRIVIAL_BODIES` (`return None`, `return 0`, `pass`, ...) |
| tau2 | agent: a tool call (probability 0.4: a tool uniform, each argument a word of the last observation or a number in [0, 100]), a message (0.4: uniform over `RANDOM_MESSAGES`) or `###STOP###` (0.2); the user is the scripted user |
| textworld | a verb uniform over the game's verbs, with a direction (`go`) or an entity of the game, uniform |
| scienceworld | one of the simulator's action templates, uniform, its object slots filled uniformly from its possible objects |
| bfcl | `[]` (end the turn) with probability 0.3, else one call of an offered function, uniform, its required arguments of their documented types (strings: words of the user's turn; numbers in [0, 100]) |
| service_desk | a call, the verb uniform (ask, lookup, ok, refund, transfer, end); a refund's method uniform, its id a capital letter, uniform |
| skill_families | solver: one of the task's tool names, uniform; curator: `<skill>` and 0 to 4 words from the steps and tool names `</skill>` |
| braid | a value of the asked type: an int in [0, 999], 1-5 items in [0, 99], or 1-8 letters, uniform |
| terminal | a command of the task vocabulary, uniform (`ls`, `cat F`, `cp memo out`, `grep kN F`, `wc -l F`, `echo N > out` with N in [0, 99], `submit`) |
| paper_math(_team) | Thinker: silent or a generic hint; Solver: `\boxed{n}`, n uniform in [-1000, 1000] (on sample rows when no data is staged) |
| any other | 0 to 12 characters, uniform over letters, digits, space, `#` and `=` |
"""

from __future__ import annotations

import atexit
import functools
import json
import random
import re
import shutil
import string
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from envs.api.base import Environment, EpisodeState, Observation

CONF = Path(__file__).resolve().parents[2] / "common" / "conf" / "env"
ORACLE_MIN = 0.95  # an oracle below this: the verifier or the wrapper is broken
RANDOM_MAX = 0.2  # a random policy above this: the verifier accepts too much
MAX_TURNS = 1000  # a guard: every environment caps its own turns far below this

# The demonstrator's injected errors, switched off: the settings that make it an oracle.
ORACLE_SETTINGS: dict[str, dict[str, Any]] = {
    "arith": {"demo_shortcut": 0.0},
    "toolplan": {"demo_distractor": 0.0, "demo_wrong": 0.0},
    "toolhops": {"demo_distractor": 0.0, "demo_wrong": 0.0},
    "chain_tasks": {"demo_slip": 0.0, "fault_rate": 0.0},
    "thinker_solver": {"expert_help": 1.0, "expert_silent": 0.0, "expert_wrong": 0.0},
    "bfcl": {"demo_slip": 0.0},
    "tau2": {"demo_slip": 0.0},
    "textworld": {"demo_slip": 0.0},
    "scienceworld": {"demo_slip": 0.0},
    "service_desk": {"demo_trap": 0.0, "demo_repeat": 0.0},
    "braid": {"demo_error": 0.0},
    "terminal": {"demo_shortcut": 0.0, "demo_slip": 0.0, "demo_loop": 0.0, "share_leak": 0.0, "share_weak": 0.0,
                 "share_reject": 0.0, "share_unsolvable": 0.0, "share_trivial": 0.0, "share_ambiguous": 0.0},
    "skill_families": {"demo_slip": 0.0},
}

# Environments whose demonstrator is not an oracle even without injected errors: the oracle's action.
ORACLE_ACTIONS: dict[str, Callable[[EpisodeState, Observation], str]] = {
    "voting": lambda state, obs: f" #{state.value}",  # type: ignore[attr-defined]  # the hidden right value
    # the demonstrator searches where it has no skill document; the oracle calls the hidden next step
    "skill_families": lambda state, obs: state.oracle_action(),  # type: ignore[attr-defined]
    # with env.families the same: the oracle reads the hidden recipe (the default games' demonstrator is one)
    "textworld": lambda state, obs: getattr(state, "oracle_action", state.expert_action)(),
}

Policy = Callable[[Environment, EpisodeState, Observation, random.Random], str]
TRIVIAL_BODIES = ("    return None\n", "    return 0\n", "    return 1\n", "    return ''\n", "    return []\n",
                  "    return True\n", "    return False\n", "    pass\n")


def _random_arith(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    n = rng.randint(0, env.cfg.max_value)
    return f" #{n}" if env.cfg.mode == "single" else str(n)


def _random_toolplan(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.testbeds.toolplan import ATTRIBUTES, TOOLS, VALUES

    if obs.role == "worker":
        return " " + rng.choice(TOOLS)
    return " " + " ".join(rng.choices(ATTRIBUTES if obs.text.endswith("PLAN:") else VALUES, k=env.cfg.k))


def _random_toolhops(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.testbeds.toolhops import ATTRIBUTES, ENTITIES, TOOLS

    if obs.role == "worker":
        return " " + rng.choice(TOOLS)
    if obs.text.endswith("PLAN:"):
        n = env.cfg.k + (env.cfg.extra_workers if env.cfg.mode == "parallel" else 0)
        return " " + " ".join(rng.choices(ATTRIBUTES, k=n))
    return " " + " ".join(rng.choices(ENTITIES, k=env.cfg.k))


def _random_chain_tasks(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.testbeds.chain_tasks import DAYS, ITEMS, NAMES

    def number() -> str:
        return str(rng.randint(1, 99))

    calls = {"add": lambda: [rng.choice(ITEMS), str(rng.randint(1, 5))], "remove": lambda: [rng.choice(ITEMS)],
             "pay": list, "find": lambda: [rng.choice(NAMES)], "send": lambda: [number(), number()],
             "book": lambda: [rng.choice(DAYS), number()], "done": list}
    verb = rng.choice(sorted(calls))
    return " ".join([verb, *calls[verb]()])


def _random_thinker_solver(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    v = rng.randrange(env.cfg.num_values + 1)
    if obs.role == "thinker":
        return "" if v == env.cfg.num_values else f" {v}"
    return f" #{rng.randrange(env.cfg.num_values)}"


def _random_braid(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.testbeds.braid import OPS, render

    kind = OPS[obs.text.split("OP ", 1)[1].split()[0]].output
    value: Any = (rng.randint(0, 999) if kind == "int" else [rng.randint(0, 99) for _ in range(rng.randint(1, 5))]
                  if kind == "list" else "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 8))))
    return " " + render(value)


def _random_service_desk(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.testbeds.service_desk import IDS, METHODS

    verb = rng.choice(["ask", "lookup", "ok", "refund", "transfer", "end"])
    return f"refund {rng.choice(METHODS)} {rng.choice(IDS)}" if verb == "refund" else verb


def _random_skill_families(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.testbeds.skill_families import NAMES, ROLES

    if obs.role == "curator":
        return " <skill> " + " ".join(rng.choices([*ROLES, *NAMES], k=rng.randint(0, 4))) + " </skill>"
    return " " + rng.choice([name for name, _ in state.tools])  # type: ignore[attr-defined]


def _random_terminal(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    file, key = rng.choice(["a", "b", "memo"]), f"k{rng.randrange(10)}"
    return " " + rng.choice(["ls", f"cat {file}", "cp memo out", f"grep {key} {file}", f"wc -l {file}",
                             f"echo {rng.randint(0, 99)} > out", "submit"])


def _random_bfcl(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    from envs.benchmarks.bfcl import END_TURN, Call

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


RANDOM_MESSAGES = ("Sure, let me check that for you.", "Could you give me your user id?", "Is there anything else?",
                   "I have processed your request.", "I am sorry, I cannot help with that.")


def _random_tau2(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    import json as json_

    if obs.role == "user":
        return state.expert_action()  # the scripted user: only the agent is random
    u = rng.random()
    if u < 0.2:
        return "###STOP###"
    if u < 0.6:
        return rng.choice(RANDOM_MESSAGES)
    name, schema = rng.choice(sorted(state.tools.items()))  # type: ignore[attr-defined]
    words = re.findall(r"[A-Za-z0-9_]+", obs.text[-2000:]) or ["x"]
    props = schema["function"]["parameters"].get("properties", {})
    args = {k: rng.randint(0, 100) if v.get("type") in ("integer", "number") else rng.choice(words) for k, v in props.items()}
    return "<tool_call>" + json_.dumps({"name": name, "arguments": args}) + "</tool_call>"


def _random_textworld(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    game = state.engine._game  # type: ignore[attr-defined]
    verb = rng.choice([v for v in game.verbs if v not in ("look", "inventory")] or ["go"])
    return f"{verb} {rng.choice(['north', 'south', 'east', 'west'] if verb == 'go' else game.entity_names or ['it'])}"


def _random_scienceworld(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    sim = state.sim  # type: ignore[attr-defined]
    objects = sim.get_possible_objects() or ["it"]
    template = rng.choice(sim.get_possible_actions() or ["look around"])
    return re.sub(r"OBJ\d?", lambda m: rng.choice(objects), template)


def _random_paper_math(env: Any, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    if obs.role == "thinker":
        return rng.choice(["", "Add the numbers.", "Use the quadratic formula."])
    return f"The answer is $\\boxed{{{rng.randint(-1000, 1000)}}}$."


RANDOM_ACTIONS: dict[str, Policy] = {
    "arith": _random_arith,
    "toolplan": _random_toolplan,
    "toolhops": _random_toolhops,
    "chain_tasks": _random_chain_tasks,
    "thinker_solver": _random_thinker_solver,
    "voting": lambda env, state, obs, rng: f" #{rng.randrange(env.cfg.num_values)}",  # type: ignore[attr-defined]
    "reasoning_gym": lambda env, state, obs, rng: f"<answer>{rng.randint(-1000, 1000)}",
    "humaneval": lambda env, state, obs, rng: rng.choice(TRIVIAL_BODIES),
    "bfcl": _random_bfcl,
    "tau2": _random_tau2,
    "textworld": _random_textworld,
    "scienceworld": _random_scienceworld,
    "paper_math": _random_paper_math,
    "paper_math_team": _random_paper_math,
    "service_desk": _random_service_desk,
    "braid": _random_braid,
    "terminal": _random_terminal,
    "skill_families": _random_skill_families,
}

# Environments that read staged data: without a data folder in their config file they are checked on
# hand-written rows in the data sets' published layouts (envs/benchmarks/paper_math/data.py, `write_samples`).
STAGED_DATA = ("paper_math", "paper_math_team")


@functools.cache
def sample_data() -> str:
    """A temporary folder of sample rows for every data set (written once per process, removed at exit)."""
    from envs.benchmarks.paper_math.data import write_samples

    folder = tempfile.mkdtemp(prefix="paper-data-samples-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return str(write_samples(folder))


def random_short_string(env: Environment, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    """The random policy of an environment without an entry in `RANDOM_ACTIONS`."""
    return "".join(rng.choices(string.ascii_letters + string.digits + " #=", k=rng.randint(0, 12)))


def oracle_policy(env: Environment, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
    action = ORACLE_ACTIONS.get(env.name)
    return action(state, obs) if action is not None else state.expert_action()


@dataclass
class CheckResult:
    env: str
    tasks: int
    oracle: float  # mean episode reward of the oracle
    random: float  # mean episode reward of the random policy

    def problems(self) -> list[str]:
        """What is wrong, one line each (empty: the check passes)."""
        out = []
        if not self.oracle >= ORACLE_MIN:
            out.append(f"{self.env}: the oracle's mean reward {self.oracle:.3f} is below {ORACLE_MIN} "
                       "(the verifier rejects right answers, or the wrapper loses them)")
        if not self.random <= RANDOM_MAX:
            out.append(f"{self.env}: the random policy's mean reward {self.random:.3f} is above {RANDOM_MAX} "
                       "(the verifier accepts wrong answers)")
        return out


def build(name: str) -> Environment:
    """Environment `name` from its config file, with the demonstrator's injected errors switched off."""
    from envs.registry import ENVS

    if name not in ENVS:
        raise ValueError(f"unknown environment {name!r}; choose from {sorted(ENVS)}")
    path = CONF / f"{name}.yaml"
    settings = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    settings.update(ORACLE_SETTINGS.get(name, {}))
    if name in STAGED_DATA and not settings.get("path"):
        settings["path"] = sample_data()
        settings["dev_size"] = 0  # a handful of sample rows: every one checked (train and held-out), none set aside
    cls = ENVS[name]
    return cls(cls.config_class(**settings))


def play(env: Environment, task: dict[str, Any], policy: Policy, seed: int) -> float:
    """One episode of `task` under `policy`; its reward (the terminal one, as the rollout records)."""
    state = env.new_episode(task, random.Random(seed))
    rng = random.Random(seed + 1)
    obs: Observation | None = state.start()
    reward, turns = 0.0, 0
    while obs is not None:
        result = state.step(policy(env, state, obs, rng))
        obs, reward, turns = result.next, result.reward, turns + 1
        if turns > MAX_TURNS:
            raise RuntimeError(f"{env.name}: an episode ran past {MAX_TURNS} turns")
    return float(reward)


def check_env(name: str, tasks: int = 32, seed: int = 0) -> CheckResult:
    """Mean rewards of the oracle and the random policy on `tasks` tasks (half train, half held-out)."""
    env = build(name)
    rng = random.Random(seed)
    split_sets = env.task_set()
    sample: list[dict[str, Any]] = []
    for split, n in (("train", tasks - tasks // 2), ("heldout", tasks // 2)):
        rows = split_sets[split]
        for i in rng.sample(range(len(rows)), min(n, len(rows))):
            sample.append(json.loads(rows[i]["task"]))
    seeds = [rng.randrange(2**31) for _ in sample]
    random_policy = RANDOM_ACTIONS.get(name, random_short_string)
    oracle = [play(env, task, oracle_policy, s) for task, s in zip(sample, seeds, strict=True)]
    randoms = [play(env, task, random_policy, s) for task, s in zip(sample, seeds, strict=True)]
    return CheckResult(name, len(sample), sum(oracle) / len(oracle), sum(randoms) / len(randoms))


def table(results: list[CheckResult]) -> str:
    lines = [f"{'env':<16} {'tasks':>5} {'oracle':>7} {'random':>7}  check", "-" * 46]
    for r in results:
        lines.append(f"{r.env:<16} {r.tasks:>5} {r.oracle:>7.3f} {r.random:>7.3f}  {'ok' if not r.problems() else 'FAIL'}")
    return "\n".join(lines)
