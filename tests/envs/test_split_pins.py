"""Committed splits and rendered prompts stay byte-identical through refactors of the environments.

The digests below were recorded from the code before the shared parts of `toolplan` / `toolhops`
and the `task_set` loops of `terminal` / `textworld` were folded into one place: a change to any
of them would silently change every run's tasks (and the warm starts' demonstrations). A digest is
sha256 (16 hex) of the JSON of the split's columns (`id`, `tier`, `task`) or of the demonstrator's
transcripts (each turn: role, observation, new_context, action, reward, success, events, info) of
the first 20 train tasks. The split digests were re-recorded on 2026-12-04 over the whole columns (the
earlier ones hashed a repr that showed the first five rows; they held for the code of that day, and the
transcripts' digests are unchanged). A deliberate change of an environment's tasks updates its digests here,
with the reason in the commit. Provenance events (added to `toolplan` / `toolhops` and `terminal` by #46,
after these digests were recorded) are left out of the transcripts, so the digests also pin that emitting
them changed no observation, action, reward, other event or info; their own tests are
tests/envs/testbeds/test_planner_workers_provenance.py and test_terminal_provenance.py.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from envs.api.base import Environment, Observation
from envs.benchmarks.textworld.env import TextWorldConfig, TextWorldEnv
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv
from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv
from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv
from tests.helpers import digest, split_digests, transcript


def split_columns(env: Environment, split: str) -> list[list[Any]]:
    """The split's whole columns as lists: a datasets `Column` is not JSON, and `default=str` would hash its
    repr, which shows the first five rows only (the digests before 2026-12-04 pinned no more than that)."""
    rows = env.task_set()[split]
    return [list(rows["id"]), list(rows["tier"]), list(rows["task"])]


def transcripts_digest(env: Environment, n: int = 20) -> str:
    rng = random.Random(0)
    rows = env.task_set()["train"].select(range(n))
    return digest([transcript(env, json.loads(row["task"]), rng, keep_event=lambda e: e.kind != "provenance")
                   for row in rows])


# name -> (environment, split digests, transcripts digest (None: not played here))
PINS: dict[str, tuple[Any, dict[str, str], str | None]] = {
    "toolplan": (lambda: ToolPlanEnv(ToolPlanConfig()),
                 {"train": "8aea02be262342f3", "heldout": "db2b49e3749f854d", "dev": "8fc50f37b303344f"},
                 "3d54430efc0747b2"),
    "toolplan-k5-demo": (
        lambda: ToolPlanEnv(ToolPlanConfig(k=5, demo_size=32, train_size=64, heldout_size=32, dev_size=16)),
        {"train": "7f329d3643c85ed5", "heldout": "67227bbce0e2702b", "demo": "4e4fa7b1e7f5edb5",
         "dev": "ab8960610cd3d4db"}, "be317840a2546a92"),
    "toolhops": (lambda: ToolHopsEnv(ToolHopsConfig()),
                 {"train": "6d1a7e86c044dd2c", "heldout": "97ed6e604445a79c", "dev": "85eee9cb7518bb64"},
                 "c9a6d97fc6440876"),
    "toolhops-parallel": (
        lambda: ToolHopsEnv(ToolHopsConfig(mode="parallel", k=4, extra_workers=2, classes=8, demo_size=32)),
        {"train": "f687488d9e482474", "heldout": "f0e32ff0f65042e6", "demo": "f7d7d45eeee884b5",
         "dev": "1418985fcdfd957c"}, "2ecbe34c2b30ee96"),
    "terminal": (lambda: TerminalEnv(TerminalConfig(backend="sim")),
                 {"train": "7133e1bf6fe219e5", "heldout": "932f676d0a7153b5", "dev": "82ae7fe235e27b4d"},
                 "cc5018c2595852fa"),
    "terminal-demo": (
        lambda: TerminalEnv(TerminalConfig(backend="sim", demo_size=16, train_size=40, heldout_size=20,
                                           dev_size=10)),
        {"train": "93ac39a23882ddfd", "heldout": "3b9b37a9b8674989", "demo": "8fbcaf0049fdf6e1",
         "dev": "c462f76c76ff4484"}, "da79a3580933f871"),
    # textworld's task rows are (quest length, seed); its games are made on first play (seconds each), not
    # here
    "textworld": (lambda: TextWorldEnv(TextWorldConfig()),
                  {"train": "192f594caab76ca5", "heldout": "267b83c73c1451ae", "dev": "18cddbc893d10b2c"},
                  None),
    "textworld-demo": (
        lambda: TextWorldEnv(TextWorldConfig(demo_size=8, quest_lengths=[2, 4], dev_size=0)),
        {"train": "9ea6b006272afb88", "heldout": "10606d4b6321e191", "demo": "15a6f9d581bdf9e8"}, None),
}


@pytest.mark.parametrize("name", PINS)
def test_splits_and_demonstrations_are_unchanged(name):
    make, splits, plays = PINS[name]
    env = make()
    assert split_digests(env) == splits
    if plays is not None:
        assert transcripts_digest(env) == plays


def test_a_split_digest_covers_every_row():
    env = PINS["toolplan"][0]()
    last = env.task_set()["train"][-1]
    assert json.dumps(split_columns(env, "train")).count(last["id"]) == 1  # the last row is hashed
    assert last["task"] in split_columns(env, "train")[2]


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
