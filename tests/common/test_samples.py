"""The sample log (samples.jsonl, #44): which steps, what a row holds, and that a killed and resumed run
neither repeats nor loses a row; the same rows as text in TensorBoard and W&B."""

from __future__ import annotations

import json

import pytest

from common.credit import Advantages
from common.episode import Episode, Group, Turn
from common.records import RecordWarning, RunDir
from common.samples import as_markdown, due, log_text, sample_rows


def _turn(role: str, obs: str, text: str) -> Turn:
    return Turn(role=role, adapter="policy", prompt_ids=[1], action_ids=[2, 3], logprobs=[-0.1, -0.2],
                text=text, prompt_text=obs)


def _group(task: str, answers: list[str], rewards: list[float], extra: int = 0) -> Group:
    episodes = [Episode(task, 0, turns=[_turn("solver", f"question {task}", a)], reward=r, success=r > 0)
                for a, r in zip(answers, rewards, strict=True)]
    return Group(task, 0, episodes, extra={"solo": [Episode(task, 0)] * extra} if extra else {})


def test_the_sampled_steps_are_every_n_and_the_last():
    assert [s for s in range(25) if due(s, 25, 10)] == [0, 10, 20, 24]
    assert [s for s in range(4) if due(s, 4, 10)] == [0, 3]
    assert not any(due(s, 25, 0) for s in range(25))  # 0: off


def test_a_row_holds_prompt_completions_rewards_and_advantages_of_the_first_groups():
    # group 0 has two extra plays: group 1's episodes start at index 4 of the step's episodes
    groups = [_group("t0", ["4", "5"], [1.0, 0.0], extra=2), _group("t1", ["7", "8"], [0.0, 0.0]),
              _group("t2", ["1", "2"], [1.0, 1.0])]
    adv = Advantages({(0, 0): 1.0, (1, 0): -1.0, (4, 0): [0.5, 0.25]})  # (5, 0): no credit
    rows = sample_rows(groups, adv, step=7, n_groups=2)
    assert [(r["step"], r["group"], r["task_id"]) for r in rows] == [(7, 0, "t0"), (7, 1, "t1")]
    assert rows[0]["prompt"] == "question t0"
    c = rows[0]["completions"]
    assert [(x["text"], x["reward"], x["success"], x["advantage"]) for x in c] == [
        ("4", 1.0, True, 1.0), ("5", 0.0, False, -1.0)]
    assert [x["advantage"] for x in rows[1]["completions"]] == [0.375, None]  # per-token: their mean
    assert "turns" not in c[0]  # one turn: the completion is it
    json.dumps(rows)  # a JSON line as it is


def test_an_episode_of_several_turns_lists_each_with_its_advantage():
    ep = Episode("t", 0, turns=[_turn("planner", "task", "plan"), _turn("worker", "plan", "do")], reward=1.0)
    rows = sample_rows([Group("t", 0, [ep])], Advantages({(0, 0): 0.5, (0, 1): 1.5}), step=0, n_groups=2)
    (c,) = rows[0]["completions"]
    assert c["text"] == "plan\ndo" and c["advantage"] == 1.0
    assert [(t["role"], t["observation"], t["text"], t["advantage"]) for t in c["turns"]] == [
        ("planner", "task", "plan", 0.5), ("worker", "plan", "do", 1.5)]


def _run(tmp_path, writer=True) -> RunDir:
    run = RunDir(tmp_path / "run", tmp_path / "work", writer=writer)
    run.building.mkdir(parents=True, exist_ok=True)
    return run


def test_a_resumed_run_keeps_the_samples_before_its_checkpoint_and_nothing_after(tmp_path):
    run = _run(tmp_path)
    for step in range(5):  # killed after step 4's records, checkpoint at step 2 (next_step 2)
        run.append_metrics({"step": step})
        run.append_samples([{"step": step, "group": 0}, {"step": step, "group": 1}])
    run.truncate_metrics(2)  # what the resumed run does at its start
    assert [(r["step"], r["group"]) for r in run.read_samples()] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    for step in range(2, 4):
        run.append_samples([{"step": step, "group": 0}])
    assert [r["step"] for r in run.read_samples()] == [0, 0, 1, 1, 2, 3]


def test_a_torn_last_sample_line_is_dropped_on_resume(tmp_path):
    run = _run(tmp_path)
    run.append_samples([{"step": 0, "group": 0}])
    with open(run.building / "samples.jsonl", "a") as f:
        f.write('{"step": 1, "gro')
    with pytest.warns(RecordWarning, match="torn last line"):
        run.truncate_metrics(2)
    assert run.read_samples() == [{"step": 0, "group": 0}]


def test_no_sample_file_without_samples_and_none_from_other_ranks(tmp_path):
    run = _run(tmp_path)
    run.truncate_metrics(0)
    assert not (run.building / "samples.jsonl").exists()
    other = _run(tmp_path, writer=False)
    other.append_samples([{"step": 0}])
    assert not (run.building / "samples.jsonl").exists()


def test_the_rows_go_to_tensorboard_and_wandb_as_text(monkeypatch):
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    got: list[tuple] = []

    class Writer:
        def add_text(self, tag, text, global_step):
            got.append(("tb", tag, text, global_step))

    monkeypatch.setattr(TensorBoardLogger, "experiment", property(lambda self: Writer()))
    monkeypatch.setattr(WandbLogger, "log_text",
                        lambda self, key, columns, data: got.append(("wandb", key, columns, data)))
    rows = sample_rows([_group("t0", ["4", "5"], [1.0, 0.0])], Advantages({(0, 0): 1.0}), step=3, n_groups=1)
    loggers = [object.__new__(CSVLogger), object.__new__(TensorBoardLogger), object.__new__(WandbLogger)]
    log_text(loggers, rows, step=3)
    assert [g[:2] for g in got] == [("tb", "samples"), ("wandb", "samples")]
    assert got[0][2] == as_markdown(rows) and "question t0" in got[0][2] and got[0][3] == 3
    assert got[1][3] == [[3, "t0", "question t0", "4", 1.0, 1.0], [3, "t0", "question t0", "5", 0.0, None]]
