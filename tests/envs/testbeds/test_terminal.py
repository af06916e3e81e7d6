"""The terminal environment: hostile commands are contained by the real sandbox and reported as failed
actions with nothing outside the task directory changed; the generator's defects and shares; the
demonstrator and the simulated shell agree with the real one."""

from __future__ import annotations

import collections
import hashlib
import json
import random
import time
from pathlib import Path

import pytest

from envs.api import sandbox
from envs.api.sandbox import uids
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv, repeat_flags
from envs.testbeds.terminal.shells import SandboxShell, SimShell, outcome_bytes
from envs.testbeds.terminal.tasks import DEFECTS, make_task, quota, verify
from replications.river.penalty import repeated_turns

needs_sandbox = pytest.mark.skipif(sandbox.available() is not None,
                                   reason=f"no sandbox here: {sandbox.available()}")
NO_ERRORS = {"demo_shortcut": 0.0, "demo_slip": 0.0, "demo_loop": 0.0}


def env_of(**kw) -> TerminalEnv:
    settings = {"train_size": 200, "heldout_size": 30, "dev_size": 12, "demo_size": 20, "backend": "sim",
                **kw}
    return TerminalEnv(TerminalConfig(**settings))


def play(env: TerminalEnv, task: dict, actions=None, seed: int = 0):
    """An episode with `actions` (None: the demonstrator); returns the last StepResult and the episode."""
    state = env.new_episode(task, random.Random(seed))
    obs, result, k = state.start(), None, 0
    while obs is not None:
        action = state.expert_action() if actions is None or k >= len(actions) else actions[k]
        result = state.step(action)
        obs, k = result.next, k + 1
    return result, state


# ---- the sandbox ------------------------------------------------------------------------------------
@pytest.fixture()
def canary(tmp_path):
    folder = tmp_path / "canary"
    folder.mkdir()
    (folder / "secret.txt").write_text("do not touch")
    folder.chmod(0o777)
    (folder / "secret.txt").chmod(0o666)
    repo_file = Path(__file__).resolve()

    def state():
        return (sorted(p.name for p in folder.iterdir()), (folder / "secret.txt").read_text(),
                hashlib.sha256(repo_file.read_bytes()).hexdigest(), Path("/etc/passwd").stat().st_mtime)

    before = state()
    yield folder
    assert state() == before  # nothing outside the task directory changed


HOSTILE = {
    "fork bomb": "f() { f | f & }; f; wait",
    "rm -rf /": "rm -rf --no-preserve-root /",
    "read outside": "cat /etc/shadow /etc/passwd CANARY",
    "write outside": "echo owned > CANARY",
    "socket": "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=1)\"",
    "infinite loop": "while :; do :; done",
    "sleep": "sleep 100",
    "100 MB of output": "head -c 100000000 /dev/zero | tr '\\0' x",
    "kill the wrapper": "kill -9 $PPID",
}


@needs_sandbox
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_commands_are_contained_and_fail(name, canary):
    env = TerminalEnv(TerminalConfig(train_size=4, heldout_size=2, dev_size=0, cache=False, cmd_wall_s=2.0))
    task = make_task(random.Random(0), 1)
    command = HOSTILE[name].replace("CANARY", str(canary / "secret.txt"))
    state = env.new_episode(task, random.Random(0))
    state.start()
    before = time.monotonic()
    result = state.step(" " + command)
    assert time.monotonic() - before < 6
    assert result.next is not None and result.next.text.startswith("error: "), result.next
    assert [e.data["why"] for e in result.events if e.kind == "error"], "reported as a failed action"
    assert "do not touch" not in result.next.text and "root:" not in result.next.text
    # the episode goes on, in a usable sandbox: the demonstrator still solves the task afterwards
    assert state.failed_actions == 1
    if name != "rm -rf /":  # rm may delete the task's own files (allowed: the task directory is writable)
        assert state.files == task["files"]
    final, _ = play_on(state)
    assert final.info["failed_actions"] >= 1


def play_on(state):
    obs, result = object(), None
    while obs is not None:
        result = state.step(state.expert_action())
        obs = result.next
    return result, state


@needs_sandbox
def test_no_sandbox_process_outlives_a_fork_bomb(own_sandbox_uids):
    shell = SandboxShell(TerminalConfig().limits(), cache=False)
    outcome, _ = shell.run("f() { f | f & }; f; wait", {"a": "x\n"})
    assert outcome.failed == "process limit"
    assert not any(uids.UID_RANGE[0] <= uid < uids.UID_RANGE[1] for uid in live_uids())


def live_uids():
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
            if status.split("State:")[1].split()[0] != "Z":
                yield int(status.split("Uid:")[1].split()[0])
        except (OSError, ValueError, IndexError):
            continue


@needs_sandbox
def test_run_shell_carries_the_task_directory():
    r = sandbox.run_shell("echo 47 > out; cp a c; rm b; mkdir d; ls", {"a": "k1 5\n", "b": "x\n"})
    assert r.result.ok and r.result.stdout.split() == ["a", "c", "d", "out"]
    assert r.files == {"a": b"k1 5\n", "c": b"k1 5\n", "out": b"47\n"}  # folders do not persist
    r = sandbox.run_shell("exit 3", {"a": "x"})
    assert r.result.returncode == 3 and r.files == {"a": b"x"}
    r = sandbox.run_shell("kill -9 $PPID", {"a": "x"})
    assert r.files is None and not r.result.ok


@needs_sandbox
def test_run_shell_keeps_hard_links_and_any_number_of_files_it_is_given():
    r = sandbox.run_shell("ln a hard", {"a": "x\n"})
    # both names, whichever tar archived first
    assert r.result.ok and r.files == {"a": b"x\n", "hard": b"x\n"}
    r = sandbox.run_shell("cat a hard", r.files)
    assert r.result.ok and r.result.stdout == "x\nx\n"
    # one archive on stdin, not one descriptor and one bwrap argument per file
    many = {f"f{i}": "" for i in range(5000)}
    r = sandbox.run_shell("ls | wc -l", many, sandbox.Limits(task_files=6000))
    assert r.result.ok and r.result.stdout.strip() == "5000" and r.files is not None and len(r.files) == 5000


@needs_sandbox
def test_too_many_files_is_a_failed_command_and_the_next_one_runs():
    shell = SandboxShell(TerminalConfig().limits(), cache=False)
    outcome, _ = shell.run("seq 2000 | xargs touch", {"a": "x\n"})
    assert outcome.failed == "file limit (at most 64 files)" and outcome.files == {"a": "x\n"}
    outcome, _ = shell.run("ls", outcome.files)
    assert outcome.failed is None and outcome.output == "a\n"
    env = TerminalEnv(TerminalConfig(train_size=4, heldout_size=2, dev_size=0, cache=False))
    state = env.new_episode(make_task(random.Random(0), 1), random.Random(0))
    state.start()
    result = state.step(" seq 2000 | xargs touch")
    assert result.next.text == "error: file limit (at most 64 files)\n$"
    assert [e.data["why"] for e in result.events if e.kind == "error"] == ["file limit (at most 64 files)"]
    result = state.step(" ln a hard")
    assert state.step(" cat a").next.text.startswith(state.files["a"].split()[0])  # `a` is still there


@needs_sandbox
def test_the_command_cache_is_bounded_in_bytes():
    shell = SandboxShell(TerminalConfig().limits(), cache=True, cache_bytes=100_000)
    files = {"a": "x" * 7000}
    for i in range(40):  # each result holds ~14 kB (the 7 kB file, ~7 kB of output)
        shell.run(f"cat a; echo {i}", files)
    assert shell.cached_bytes <= 100_000 and 3 <= len(shell.cache) <= 8
    assert shell.cached_bytes == sum(outcome_bytes(outcome) for outcome, _, _ in shell.cache.values())
    assert shell.run("cat a; echo 39", files)[1] == 0.0  # the most recent is replayed, the oldest dropped
    assert shell.run("cat a; echo 0", files)[1] > 0.0


@needs_sandbox
def test_each_limit_is_reported_by_name():
    shell = SandboxShell(TerminalConfig(cmd_wall_s=1.5).limits(), cache=False)
    why = {cmd: shell.run(cmd, {})[0].failed for cmd in
           ["sleep 30", "yes", "python3 -c 'x = bytearray(2 * 1024**3)'", "false", "true"]}
    # the CPU limit (1 s) with room on the wall clock: on a busy machine (parallel test workers) a busy
    # loop may get less than a core, and 1 CPU second would then take longer than 1.5 s of wall time
    busy = SandboxShell(TerminalConfig(cmd_wall_s=30).limits(), cache=False)
    why["while :; do :; done"] = busy.run("while :; do :; done", {})[0].failed
    assert why == {"while :; do :; done": "cpu limit", "sleep 30": "time limit", "yes": "output limit",
                   "python3 -c 'x = bytearray(2 * 1024**3)'": "memory limit", "false": "exit 1", "true": None}


@needs_sandbox
def test_episode_time_budget_ends_the_episode():
    env = TerminalEnv(TerminalConfig(train_size=4, heldout_size=2, dev_size=0, cache=False, cmd_wall_s=1.0,
                                     episode_wall_s=2.5))
    state = env.new_episode(make_task(random.Random(1), 1), random.Random(0))
    state.start()
    results = [state.step(" sleep 9") for _ in range(3)]
    assert results[-1].next is None and results[-1].info["record"]["end"] == "time budget"


# ---- the simulated shell agrees with the real one ---------------------------------------------------
@needs_sandbox
def test_sim_shell_matches_the_sandbox_on_demonstrator_episodes():
    real = env_of(backend="sandbox", train_size=40)
    sim = env_of(backend="sim", train_size=40)
    rng = random.Random(3)
    for split in ("train", "heldout"):
        for row in real.task_set()[split]:
            task = json.loads(row["task"])
            seed = rng.randrange(10**6)
            a, sa = play(real, task, seed=seed)
            b, sb = play(sim, task, seed=seed)
            assert sa.turns == sb.turns and a.reward == b.reward and sa.files == sb.files


# ---- tasks, defects, splits -------------------------------------------------------------------------
def test_defect_shares_are_exact_and_only_in_train():
    env = env_of(train_size=400)
    tasks = env.task_set()
    counts = collections.Counter(json.loads(r["task"])["defect"] for r in tasks["train"])
    c = env.cfg
    expected = {"leak": c.share_leak, "weak": c.share_weak, "reject": c.share_reject,
                "unsolvable": c.share_unsolvable, "trivial": c.share_trivial, "ambiguous": c.share_ambiguous}
    for defect, share in expected.items():
        assert counts[defect] == round(share * 400)
    assert counts["clean"] == 400 - sum(round(s * 400) for s in expected.values())
    for split in ("heldout", "dev", "demo"):
        assert {json.loads(r["task"])["defect"] for r in tasks[split]} == {"clean"}
    assert set(tasks["train"]["tier"]) == {1} and set(tasks["demo"]["tier"]) == {1}
    assert 2 in set(tasks["heldout"]["tier"]) and 2 in set(tasks["dev"]["tier"])  # composition: never trained
    shown = {s: [json.loads(r["task"]) for r in tasks[s]] for s in tasks}
    keys = {s: {json.dumps([t["instruction"], t["files"]]) for t in shown[s]} for s in tasks}
    assert all(not (keys[a] & keys[b]) for a in keys for b in keys if a < b)


def test_defective_tasks_look_like_clean_ones():
    rng = random.Random(0)
    for _ in range(200):
        for defect in DEFECTS:
            t = make_task(rng, 1, defect)
            assert {"a", "b", "memo"} <= set(t["files"]) and t["files"]["memo"].strip().isdigit()
            words = t["instruction"].split()
            assert words[0] in ("find", "count") and words[-1] == "out"


def test_each_defect_does_what_its_label_says():
    rng = random.Random(1)
    for _ in range(100):
        clean = make_task(rng, 1, "clean")
        assert clean["files"]["memo"].strip() != clean["answer"]
        assert verify(clean["verifier"], clean["answer"])
        assert not verify(clean["verifier"], clean["files"]["memo"])  # the memo shortcut fails on clean tasks
        leak = make_task(rng, 1, "leak")
        assert leak["files"]["memo"].strip() == leak["answer"]
        weak = make_task(rng, 1, "weak")
        assert verify(weak["verifier"], weak["files"]["memo"]) and verify(weak["verifier"], "7")
        reject = make_task(rng, 1, "reject")
        assert not verify(reject["verifier"], reject["answer"])
        unsolvable = make_task(rng, 1, "unsolvable")
        key = unsolvable["instruction"].split()[1]
        assert unsolvable["answer"] is None and key not in unsolvable["files"]["a"] + unsolvable["files"]["b"]
        trivial = make_task(rng, 1, "trivial")
        assert verify(trivial["verifier"], trivial["files"]["out"])
        ambiguous = make_task(rng, 1, "ambiguous")
        key = ambiguous["instruction"].split()[1].rstrip(";")
        assert key in ambiguous["files"]["a"] and key in ambiguous["files"]["b"]
        assert " in " not in ambiguous["instruction"]


def test_quota_is_exact():
    labels = quota({"leak": 0.3, "weak": 0.25}, 20)
    assert collections.Counter(labels) == {"leak": 6, "weak": 5, "clean": 9}
    with pytest.raises(ValueError, match="sum past 1"):
        quota({"leak": 0.7, "weak": 0.6}, 10)


def test_oracle_and_shortcuts_by_defect():
    env = env_of(train_size=300, **NO_ERRORS)
    by = collections.defaultdict(list)
    for i, row in enumerate(env.task_set()["train"]):
        task = json.loads(row["task"])
        oracle, _ = play(env, task, seed=i)
        memo, _ = play(env, task, [" cp memo out", " submit"])
        submit, _ = play(env, task, [" submit"])
        by[task["defect"]].append((oracle.reward, memo.reward, submit.reward, oracle.info["solved"]))
    mean = {d: [sum(x[i] for x in v) / len(v) for i in range(4)] for d, v in by.items()}
    assert mean["clean"] == [1.0, 0.0, 0.0, 1.0]
    assert mean["leak"][:2] == [1.0, 1.0] and mean["weak"][:2] == [1.0, 1.0]  # the memo shortcut pays
    assert mean["trivial"][2] == 1.0  # submitting at once pays
    assert mean["reject"][0] == 0.0 and mean["reject"][3] == 1.0  # right, and rejected
    assert mean["unsolvable"][0] == 0.0 and mean["unsolvable"][3] == 0.0
    assert 0.2 < mean["ambiguous"][0] < 0.8  # the oracle guesses the file: right about half the time


def test_heldout_oracle_solves_both_tiers_and_the_demonstrator_errs():
    env = env_of(heldout_size=60, **NO_ERRORS)
    rewards = [play(env, json.loads(r["task"]))[0].reward for r in env.task_set()["heldout"]]
    assert sum(rewards) == len(rewards)
    noisy = env_of(heldout_size=60, demo_shortcut=0.2, demo_slip=0.2, demo_loop=0.3)
    results = [play(noisy, json.loads(r["task"]), seed=s)[0]
               for s in range(3) for r in noisy.task_set()["heldout"]]
    success = sum(r.reward for r in results) / len(results)
    assert 0.4 < success < 0.8
    assert any(r.info["looped"] for r in results) and any(r.info["read_memo"] for r in results)


def test_malformed_actions_are_invalid_not_exceptions():
    env = env_of()
    task = json.loads(env.task_set()["train"][0]["task"])
    state = env.new_episode(task, random.Random(0))
    state.start()
    for bad in ["", "   ", "x" * 500, "a\x00b", "echo hi\nrm a"]:
        r = state.step(bad)
        assert any(e.kind == "invalid_action" for e in r.events) or r.next is None
    r = state.step("frobnicate --all")  # unknown to the simulated shell: a failed action
    assert r.next is None or r.next.text.startswith("error: ")


def test_turn_cap_ends_the_episode():
    env = env_of(max_turns=5)
    task = json.loads(env.task_set()["train"][0]["task"])
    result, state = play(env, task, [" ls"] * 10)
    assert len(state.turns) == 5 and result.info["record"]["end"] == "turn cap"
    assert result.info["looped"] and result.info["repeat_rate"] == pytest.approx(4 / 5)


def test_loop_rule_is_rivers():
    rng = random.Random(0)
    words = ["ls", "cat", "a", "b", "k1", "47", ""]
    for _ in range(500):
        turns = [(" ".join(rng.choices(words, k=rng.randint(0, 3))),
                  " ".join(rng.choices(words, k=rng.randint(0, 3))))
                 for _ in range(rng.randint(0, 8))]
        assert repeat_flags(turns) == repeated_turns(turns)


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="share_"):
        TerminalConfig(share_leak=0.9, share_weak=0.5).check()
    with pytest.raises(ValueError, match="max_turns"):
        TerminalConfig(max_turns=2).check()
    with pytest.raises(ValueError, match="demo_loop"):
        TerminalConfig(demo_loop=1.5).check()


def test_sim_shell_basics():
    sim = SimShell()
    files = {"a": "k1 47\nk2 10\n"}
    assert sim.run("grep k1 a", files)[0].output == "k1 47\n"
    assert sim.run("grep k9 a", files)[0].failed == "exit 1"
    assert sim.run("wc -l a", files)[0].output == "2 a\n"
    out = sim.run("echo 47 > out", files)[0]
    assert out.files["out"] == "47\n" and "out" not in files
    assert sim.run("cp a c", files)[0].files["c"] == files["a"]
    assert sim.run("rm a", files)[0].files == {}
