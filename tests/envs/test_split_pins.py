"""Committed splits and rendered prompts stay byte-identical through refactors of the environments.

The digests below were recorded from the code before the shared parts of `toolplan` / `toolhops`
and the `task_set` loops of `terminal` / `textworld` were folded into one place: a change to any
of them would silently change every run's tasks (and the warm starts' demonstrations). A digest is
sha256 (16 hex) of the JSON of the split's columns (`id`, `tier`, `task`) or of the demonstrator's
transcripts (each turn: role, observation, new_context, action, reward, success, events, info) of
the first 20 train tasks. A deliberate change of an environment's tasks updates its digests here,
with the reason in the commit. Provenance events (added to `toolplan` / `toolhops` by #46, after these
digests were recorded) are left out of the transcripts, so the digests also pin that emitting them
changed no observation, action, reward, other event or info; their own tests are
tests/envs/testbeds/test_planner_workers_provenance.py.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from typing import Any

import pytest

from envs.api.base import Environment, Observation
from envs.benchmarks.textworld.env import TextWorldConfig, TextWorldEnv
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv
from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv
from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv


def digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def split_digests(env: Environment) -> dict[str, str]:
    tasks = env.task_set()
    return {split: digest([tasks[split]["id"], tasks[split]["tier"], tasks[split]["task"]])
            for split in tasks}


def transcript(env: Environment, task: dict[str, Any], rng: random.Random) -> list[list[Any]]:
    ep = env.new_episode(task, rng)
    obs: Observation | None = ep.start()
    turns: list[list[Any]] = []
    while obs is not None:
        action = ep.expert_action()
        r = ep.step(action)
        turns.append([obs.role, obs.text, obs.new_context, action, r.reward, r.success,
                      [asdict(e) for e in r.events if e.kind != "provenance"], r.info])
        obs = r.next
    return turns


def transcripts_digest(env: Environment, n: int = 20) -> str:
    rng = random.Random(0)
    rows = env.task_set()["train"].select(range(n))
    return digest([transcript(env, json.loads(row["task"]), rng) for row in rows])


# name -> (environment, split digests, transcripts digest (None: not played here))
PINS: dict[str, tuple[Any, dict[str, str], str | None]] = {
    "toolplan": (lambda: ToolPlanEnv(ToolPlanConfig()),
                 {"train": "49ebc5ba5db59042", "heldout": "29ed84216f3a654c", "dev": "e4667f3b05da854a"},
                 "3d54430efc0747b2"),
    "toolplan-k5-demo": (
        lambda: ToolPlanEnv(ToolPlanConfig(k=5, demo_size=32, train_size=64, heldout_size=32, dev_size=16)),
        {"train": "344dc6cbbd8397b5", "heldout": "e7b9f4c1fc5f6728", "demo": "c08a37478762706a",
         "dev": "853c5a4460a523c7"}, "be317840a2546a92"),
    "toolhops": (lambda: ToolHopsEnv(ToolHopsConfig()),
                 {"train": "3474caca2b245b82", "heldout": "d6d834a46f32f90c", "dev": "2ff625017019ea13"},
                 "c9a6d97fc6440876"),
    "toolhops-parallel": (
        lambda: ToolHopsEnv(ToolHopsConfig(mode="parallel", k=4, extra_workers=2, classes=8, demo_size=32)),
        {"train": "c94084aa1b16f468", "heldout": "6a6cd8ba5672d144", "demo": "de36d6490801803f",
         "dev": "2b9a97167054360f"}, "2ecbe34c2b30ee96"),
    "terminal": (lambda: TerminalEnv(TerminalConfig(backend="sim")),
                 {"train": "7af3212de1e0e3b0", "heldout": "4591759f85e00ea9", "dev": "c4a3cbe371726c53"},
                 "cc5018c2595852fa"),
    "terminal-demo": (
        lambda: TerminalEnv(TerminalConfig(backend="sim", demo_size=16, train_size=40, heldout_size=20,
                                           dev_size=10)),
        {"train": "7cb89016885323f2", "heldout": "9a87dbe6a8a6b91d", "demo": "8698c4ed952b5f2a",
         "dev": "7aaba98186534bc0"}, "da79a3580933f871"),
    # textworld's task rows are (quest length, seed); its games are made on first play (seconds each), not
    # here
    "textworld": (lambda: TextWorldEnv(TextWorldConfig()),
                  {"train": "df911217212effe4", "heldout": "bb8993e87f4ae139", "dev": "e34794b669be6a5f"},
                  None),
    "textworld-demo": (
        lambda: TextWorldEnv(TextWorldConfig(demo_size=8, quest_lengths=[2, 4], dev_size=0)),
        {"train": "09e2a94029567209", "heldout": "665a187cd38af6d1", "demo": "53cd7fcd63f4cfdb"}, None),
}


@pytest.mark.parametrize("name", PINS)
def test_splits_and_demonstrations_are_unchanged(name):
    make, splits, plays = PINS[name]
    env = make()
    assert split_digests(env) == splits
    if plays is not None:
        assert transcripts_digest(env) == plays


def play_first_train_task(env: Environment) -> list[str]:
    ep = env.new_episode(json.loads(env.task_set()["train"][0]["task"]), random.Random(0))
    obs: Observation | None = ep.start()
    texts: list[str] = []
    while obs is not None:
        action = ep.expert_action()
        texts += [obs.text, action]
        obs = ep.step(action).next
    return texts


def test_a_few_rendered_tasks_and_prompts_spelled_out():
    """The digests above, readable: the first train task of each environment and its demonstrated play."""
    plan = ToolPlanEnv(ToolPlanConfig())
    assert plan.task_set()["train"][0]["task"] == ('{"decoys": ["Z", "M", "I"], "queries": [["temp", "d"], '
                                                   '["pop", "c"], ["pop", "v"]], "values": ["W", "C", "D"]}')
    assert play_first_train_task(plan) == ["Q: temp d ; pop c ; pop v\nPLAN:", " temp pop pop",
                                           "SUB: temp d\nTOOL:", " weather", "SUB: pop c\nTOOL:", " census",
                                           "SUB: pop v\nTOOL:", " census", "R: W C D\nANS:", " W C D"]
    hops = ToolHopsEnv(ToolHopsConfig())
    assert (hops.task_set()["train"][0]["task"]
            == '{"attrs": ["twin", "boss", "twin"], "start": "o", "world": 835549143}')
    assert play_first_train_task(hops) == ["Q: o > twin > boss > twin\nPLAN:", " twin boss twin",
                                           "SUB: twin team o\nTOOL:", " radar", "SUB: boss band v\nTOOL:",
                                           " atlas", "SUB: twin city w\nTOOL:", " ledger", "R: v w l\nANS:",
                                           " v w l"]
    parallel = ToolHopsEnv(ToolHopsConfig(mode="parallel", k=4, extra_workers=2, classes=8, demo_size=32))
    assert play_first_train_task(parallel)[::2] == [
        "Q: mentor z ; boss s ; child b ; owner v\nPLAN:", "SUB: mentor ship z\nTOOL:",
        "SUB: boss firm s\nTOOL:", "SUB: child park b\nTOOL:"] + ["SUB: owner band v\nTOOL:"] * 3 + [
        "R: mentor d ; boss p ; child h ; owner x ; owner x ; owner x\nANS:"]
    terminal = TerminalEnv(TerminalConfig(backend="sim"))
    instruction = json.loads(terminal.task_set()["train"][0]["task"])["instruction"]
    assert instruction == "find k2 in a; write its value to out"
    assert play_first_train_task(terminal) == ["task: find k2 in a; write its value to out\n$", " grep k2 a",
                                               "k2 50\n$", " echo 50 > out", "$", " submit"]
    first = TextWorldEnv(TextWorldConfig()).task_set()["train"][0]["task"]
    assert first == '{"quest_length": 1, "seed": 1551706194}'
