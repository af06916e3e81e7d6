"""The papers' data staged on local disk (envs/benchmarks/paper_math/data.py) and the math environments over
it (envs/benchmarks/paper_math/env.py): layouts, the check's messages, the loader's rows, held-out splits,
math-verify."""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest

pytest.importorskip("math_verify")  # the `envs` extra (make setup)

from datasets import Dataset  # noqa: E402

from envs.benchmarks.paper_math.data import DATASETS, StagedDataError, check_staged, split_files  # noqa: E402
from envs.benchmarks.paper_math.env import (  # noqa: E402
    PaperMathConfig,
    PaperMathEnv,
    PaperMathTeamEnv,
    check_answer,
)
from envs.benchmarks.paper_math.loading import load_split  # noqa: E402
from envs.benchmarks.paper_math.samples import write_samples  # noqa: E402
from envs.registry import ENVS  # noqa: E402


def jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_list(rows).to_parquet(str(path))


@pytest.fixture
def staged(tmp_path) -> Path:
    """GSM8K as github.com/openai/grade-school-math publishes it (JSONL), MATH as EleutherAI/hendrycks_math
    (Parquet, one folder per subject), MATH500 and AIME 2024 as HuggingFaceH4 publishes them."""
    gsm = [{"question": f"Tom has {k} apples and buys 2 more. How many now?",
            "answer": f"He has {k}+2=<<{k}+2={k + 2}>>{k + 2} apples.\n#### {k + 2:,}"}
           for k in (3, 998, 1500)]
    jsonl(tmp_path / "gsm8k" / "train.jsonl", gsm[:2])
    jsonl(tmp_path / "gsm8k" / "test.jsonl", gsm[2:])
    for subject, split, k in (("algebra", "train", 1), ("algebra", "test", 2), ("geometry", "train", 3)):
        parquet(tmp_path / "math" / subject / f"{split}-00000-of-00001.parquet",
                [{"problem": f"What is $\\frac{{{k}}}{{2}}$ of 2? ({subject} {split})", "level": f"Level {k}",
                  "type": subject.title(), "solution": f"Halve, then double: $\\boxed{{{k}}}$."}])
    jsonl(tmp_path / "math500" / "test.jsonl", [{"problem": "Evaluate $\\sqrt{16}$.",
                                                 "solution": "It is $\\boxed{4}$.",
                                                 "answer": "4", "subject": "Algebra", "level": 1,
                                                 "unique_id": "test/algebra/1.json"}])
    parquet(tmp_path / "aime24" / "data" / "train-00000-of-00001.parquet",
            [{"id": 60, "problem": "Find the remainder of 2024 divided by 1000.", "solution": "...",
              "answer": "24",
              "url": "https://artofproblemsolving.com", "year": "2024"}])
    return tmp_path


# ---- the loader --------------------------------------------------------------------------------------
def test_rows_are_read_in_the_published_columns(staged):
    train = load_split(staged, "gsm8k", "train")
    assert [r["answer"] for r in train] == ["5", "1000"]  # the `#### <n>` line, thousands separator dropped
    assert train[1]["truth"] == "\\boxed{1000}" and "<<" not in train[1]["reference"]
    math = load_split(staged, "math", "train")  # both subjects' train files, not the test file
    assert sorted(r["level"] for r in math) == [1, 3] and all(r["answer"] is None for r in math)
    assert all("\\boxed{" in r["truth"] for r in math)  # math-verify reads the gold from the worked solution
    (m500,) = load_split(staged, "math500", "test")
    assert (m500["source_id"], m500["truth"], m500["level"]) == ("test/algebra/1.json", "\\boxed{4}", 1)
    # AIME 2024's one split is named train: it is the benchmark
    (aime,) = load_split(staged, "aime24", "test")
    assert aime["answer"] == "24" and aime["source_id"] == "60"


def test_every_data_set_the_cards_name_passes_the_check_on_its_published_layout(tmp_path):
    root = write_samples(tmp_path)
    check_staged(root, {name: list(spec.files) for name, spec in DATASETS.items()})
    for name, spec in DATASETS.items():
        for split in spec.files:
            assert load_split(root, name, split), (name, split)
    assert {"gsm8k", "math", "math500", "aime24", "aime25", "amc23", "minerva", "gaokao2023", "logiqa",
            "musique", "gaia", "webwalkerqa", "frames", "appworld", "swe-bench-verified"} <= set(DATASETS)
    # GAIA-text: the sample row with an attached file (task 0) is left out
    gaia = load_split(root, "gaia", "test")
    assert gaia and "0" not in {r["source_id"] for r in gaia}
    logiqa = load_split(root, "logiqa", "test")[1]
    assert logiqa["answer"] == "B" and "\nA. w\nB. x" in logiqa["question"]
    assert load_split(root, "frames", "test")[0]["answer"] == "81"  # FRAMES's TSV
    assert [r["source_id"] for r in load_split(root, "appworld", "test")] == ["c3_1", "d4_1"]
    assert load_split(root, "musique", "test")[0]["aliases"] == []


def test_a_split_is_read_in_one_format_only(staged):
    """A folder holding both the Hub's Parquet and a JSONL copy of a split is not read twice."""
    rows = [{"question": "Q?", "answer": "x\n#### 7"}, {"question": "R?", "answer": "y\n#### 8"}]
    parquet(staged / "gsm8k" / "main" / "test-00000-of-00001.parquet", rows)
    assert [p.suffix for p in split_files(staged, "gsm8k", "test")] == [".parquet"]
    assert [r["answer"] for r in load_split(staged, "gsm8k", "test")] == ["7", "8"]


@pytest.mark.parametrize("root, needs, message", [
    (None, {"gsm8k": ["train"]},
     r"method.paper_data is not set: stage the paper's data in one local folder with gsm8k/ \(GSM8K\)"),
    ("missing", {"math": ["test"]},
     r"has no folder math/: MATH \(Hendrycks et al. 2021\) as published by hendrycks/competition_math"),
    ("staged", {"aime25": ["test"]},
     r"has no folder aime25/: AIME 2025 as published by math-ai/aime25, e.g. .*/aime25/test.jsonl"),
    ("staged", {"math500": ["train"]}, r"MATH500 has no train split here \(it has test\)"),
    ("staged", {"nope": ["test"]}, r"unknown data set 'nope'; the suite reads gsm8k, math"),
])
def test_missing_data_names_the_data_set_and_its_layout(staged, tmp_path, root, needs, message):
    where = {None: None, "missing": tmp_path / "nowhere", "staged": staged}[root]
    with pytest.raises(StagedDataError, match=message):
        check_staged(where, needs)


def test_a_wrong_file_or_column_is_named(staged):
    (staged / "gsm8k" / "test.jsonl").unlink()
    # a split file without `question`; a data set without its `answer` column
    jsonl(staged / "gsm8k" / "test_copy.jsonl", [{"prompt": "Q?", "answer": "#### 1"}])
    jsonl(staged / "math500" / "test.jsonl", [{"problem": "Q?", "solution": "$\\boxed{1}$"}])
    with pytest.raises(StagedDataError) as error:
        check_staged(staged, {"gsm8k": ["train", "test"], "math500": ["test"], "math": ["train", "test"]})
    lines = str(error.value).splitlines()
    assert lines[0] == "the paper's data is incomplete:" and len(lines) == 3
    assert ("test_copy.jsonl has no column question (it has answer, prompt): GSM8K as published by "
            "openai/gsm8k") in lines[1]
    assert "test.jsonl has no column answer (it has problem, solution): MATH500" in lines[2]


# ---- files that cannot be read whole (issue 34) ---------------------------------------------------------
GSM = [{"question": f"Q{k}?", "answer": f"x\n#### {k}"} for k in range(3)]


def refused(staged, needs=None) -> str:
    """check_staged's one-line refusal."""
    with pytest.raises(StagedDataError) as error:
        check_staged(staged, needs or {"gsm8k": ["train", "test"]})
    assert len(str(error.value).splitlines()) == 1, str(error.value)
    return str(error.value)


@pytest.mark.parametrize("second, message", [
    ('{"question": "Q1?", "answer": "x\\n#### 1"',
     r"line 2 is not valid JSON \(.*, its last line, cut short: the file is incomplete\)"),
    ('{"question": "Q1?", "answer": }\n',
     r"line 2 is not valid JSON \(Expecting value at column 31\); JSONL has one JSON object a line"),
    ('["Q1?", "x"]\n', "line 2 is a JSON list, not an object"),
])
def test_a_malformed_or_torn_line_after_the_first_is_refused_naming_file_and_line(staged, second, message):
    path = staged / "gsm8k" / "train.jsonl"
    path.write_text(json.dumps(GSM[0]) + "\n" + second)
    error = refused(staged)
    assert error.startswith(f"{path} line 2 ") and re.search(message, error), error
    assert error.endswith("stage it again as published: GSM8K as published by openai/gsm8k (config main) or "
                          f"github.com/openai/grade-school-math, e.g. {staged / 'gsm8k'}/main/"
                          "test-00000-of-00001.parquet "
                          "(columns question, answer ending in '#### <n>')"), error


def test_a_first_row_over_64_kib_is_read(staged):
    long = {"question": "How many? " + "x" * 70_000, "answer": "y\n#### 9"}
    jsonl(staged / "gsm8k" / "train.jsonl", [long, *GSM])
    check_staged(staged, {"gsm8k": ["train", "test"]})
    assert [r["answer"] for r in load_split(staged, "gsm8k", "train")] == ["9", "0", "1", "2"]


def test_text_that_is_not_utf8_is_refused_naming_file_and_line(staged):
    path = staged / "gsm8k" / "train.jsonl"
    path.write_bytes((json.dumps(GSM[0]) + "\n").encode() + b'{"question": "Q\xff?", "answer": "#### 1"}\n')
    assert refused(staged).startswith(f"{path} line 2 is not UTF-8 text (invalid start byte at byte 15 of "
                                      "the line)")
    frames = write_samples(staged, ["frames"]) / "frames" / "test.tsv"
    frames.write_bytes(frames.read_bytes() + b"Q\xe9?\t4\n")
    assert refused(staged, {"frames": ["test"]}).startswith(f"{frames} line 18 is not UTF-8 text")
    ids = write_samples(staged, ["appworld"]) / "appworld" / "datasets" / "test_normal.txt"
    ids.write_bytes(b"c3_1\n\xfe\n")
    assert refused(staged, {"appworld": ["test"]}).startswith(f"{ids} line 2 is not UTF-8 text")
    with pytest.raises(StagedDataError, match=f"{re.escape(str(ids))} line 2 is not UTF-8 text"):
        load_split(staged, "appworld", "test")


def test_a_corrupt_parquet_file_is_refused_naming_it(staged):
    path = staged / "aime24" / "data" / "train-00000-of-00001.parquet"
    path.write_bytes(path.read_bytes()[:-40])  # cut short: no footer
    error = refused(staged, {"aime24": ["test"]})
    assert error.startswith(f"{path} is not a readable Parquet file (")
    assert "stage it again as published" in error
    # the loader names it too
    with pytest.raises(StagedDataError, match=f"^cannot read {re.escape(str(path))} "):
        load_split(staged, "aime24", "test")


@pytest.mark.parametrize("kind", ["jsonl", "parquet"])
def test_an_answer_column_that_is_null_is_refused(staged, kind):
    rows = [{"problem": f"P{k}?", "answer": None} for k in range(3)]
    (staged / "math500" / "test.jsonl").unlink()
    path = staged / "math500" / f"test.{kind}"
    (jsonl if kind == "jsonl" else parquet)(path, rows)
    where = "line 1" if kind == "jsonl" else "row 1"
    assert refused(staged, {"math500": ["test"]}) == (
        f"{path}: column answer is null or missing in every row (the first: {where}); every row needs one "
        "(the loader would read None as its text): MATH500 as published by HuggingFaceH4/MATH-500, e.g. "
        f"{staged / 'math500'}/test.jsonl (columns problem, solution, answer, level)")
    rows[0]["answer"], rows[2]["answer"] = "4", "5"
    (jsonl if kind == "jsonl" else parquet)(path, rows)
    assert f"column answer is null or missing in 1 of 3 rows (the first: {where.replace('1', '2')})" in \
        refused(staged, {"math500": ["test"]})


def test_a_torn_data_file_is_refused_before_the_run_folder_exists(staged, tmp_path, capsys, monkeypatch):
    """Through the command line: one line naming the file, exit 2, nothing written (it was a 78-line
    traceback once the run folder existed)."""
    import sys

    from experiments.run import main

    path = staged / "gsm8k" / "train.jsonl"
    path.write_text(json.dumps(GSM[0]) + "\n" + json.dumps(GSM[1])[:20])
    out, work = tmp_path / "out", tmp_path / "work"
    monkeypatch.setattr(sys, "argv", ["experiments.run"])
    with pytest.raises(SystemExit) as exit_:
        main(["method=grpo", "scale=smoke", "env=paper_math", f"env.path={staged}", "env.train=[gsm8k]",
              "env.heldout=[gsm8k]", "env.dev_size=0", f"out_dir={out}", f"work_dir={work}",
              "progress=false"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {path} line 2 is not valid JSON"), err
    assert not out.exists() and not list(tmp_path.rglob("seed-*"))


# ---- math-verify ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("truth, action, expected", [
    ("\\boxed{\\frac{1}{2}}", "Hence the answer is $\\boxed{0.5}$.", (True, True)),
    ("\\boxed{1000}", "5 + 995 = 1000, so \\boxed{1000}", (True, True)),
    ("\\boxed{24}", "The remainder is \\boxed{024}.", (True, True)),
    # MATH: gold from the solution
    ("Halve, then double: $\\boxed{3}$.", "I think it is $\\boxed{3}$", (True, True)),
    ("\\boxed{(3, \\frac{\\pi}{2})}", "$\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}$", (True, True)),
    ("\\boxed{4}", "\\boxed{5}", (True, False)),
    ("\\boxed{4}", "I do not know.", (False, False)),
    ("\\boxed{4}", "", (False, False)),
])
def test_answers_are_checked_by_math_verify(truth, action, expected):
    assert check_answer(truth, action) == (*expected, True)


def test_a_row_whose_gold_math_verify_cannot_read_scores_nothing_and_says_so():
    assert check_answer("The solution is lost.", "\\boxed{4}") == (True, False, False)


def test_hostile_text_is_bounded():
    start = time.monotonic()
    for text in ("9" * 100_000, "\\boxed{" * 20_000, "{" * 50_000 + "\\boxed{4}", "\x00" * 10_000,
                 "\\frac" * 30_000):
        answered, correct, _ = check_answer("\\boxed{4}", text)
        assert isinstance(answered, bool) and isinstance(correct, bool)
    assert time.monotonic() - start < 30


# ---- the environments ----------------------------------------------------------------------------------
def tasks(env, split):
    return [json.loads(r["task"]) for r in env.task_set()[split]]


def play(env, task, actions, variant="main"):
    ep = env.new_episode(task, random.Random(0), variant)
    obs, seen, result = ep.start(), [], None
    for action in actions:
        seen.append(obs)
        result = ep.step(ep.expert_action() if action is None else action)
        obs = result.next
        if obs is None:
            break
    return seen, result


def test_heldout_is_each_data_sets_own_test_split_and_train_never_holds_it(staged):
    jsonl(staged / "gsm8k" / "train.jsonl",  # a train question that is also a test question is dropped
          [{"question": "Tom has 1500 apples and buys 2 more. How many now?", "answer": "#### 1502"},
           {"question": "A new one?", "answer": "#### 1"}])
    env = PaperMathEnv(PaperMathConfig(dev_size=0, path=str(staged), train=["gsm8k", "math"],
                                       heldout=["gsm8k", "math500", "aime24"]))
    held, train = tasks(env, "heldout"), tasks(env, "train")
    assert sorted(t["dataset"] for t in held) == ["aime24", "gsm8k", "math500"]
    assert {t["question"] for t in held}.isdisjoint(t["question"] for t in train)
    assert env.dropped == 1 and sorted(t["dataset"] for t in train) == ["gsm8k", "math", "math"]
    assert env.datasets == ["gsm8k", "math", "math500", "aime24"]  # tiers: one per benchmark
    assert sorted(env.task_set()["heldout"]["tier"]) == [1, 3, 4]
    info = env.provenance()
    assert info["tasks"] == {"heldout": 3, "train": 3} and info["train_dropped_as_heldout"] == 1
    assert set(info["files"]) == {"gsm8k/train", "math/train", "gsm8k/test", "math500/test", "aime24/test"}
    (test_file,) = info["files"]["gsm8k/test"]
    assert test_file["file"].endswith("gsm8k/test.jsonl") and len(test_file["sha256"]) == 64


def test_capped_splits_take_data_sets_in_turn(tmp_path):
    root = write_samples(tmp_path, ["gsm8k", "math"])
    env = PaperMathEnv(PaperMathConfig(dev_size=0, path=str(root), train_size=4, heldout_size=6, demo_size=2))
    splits = env.task_set()
    assert [json.loads(t)["dataset"] for t in splits["train"]["task"]] == ["gsm8k", "math"] * 2
    assert (len(splits["heldout"]), len(splits["demo"])) == (6, 2)
    assert set(splits["demo"]["task"]).isdisjoint(splits["train"]["task"])
    again = PaperMathEnv(PaperMathConfig(dev_size=0, path=str(root), train_size=4, heldout_size=6,
                                         demo_size=2)).task_set()
    assert again["train"]["task"] == splits["train"]["task"]  # the order is fixed by data_seed


def test_the_solver_is_rewarded_by_math_verify(staged):
    env = PaperMathEnv(PaperMathConfig(dev_size=0, path=str(staged)))
    task = next(t for t in tasks(env, "heldout") if t["dataset"] == "gsm8k")
    (obs,), result = play(env, task, ["So it is \\boxed{1,502}."])
    assert obs.role == "solver" and obs.text.endswith("put your final answer within \\boxed{}.")
    assert (result.reward, result.success, result.info["answered"]) == (1.0, True, True)
    _, wrong = play(env, task, ["\\boxed{1503}"])
    _, silent = play(env, task, ["no answer here"])
    assert wrong.reward == 0.0 and not wrong.events
    assert silent.reward == 0.0 and [e.kind for e in silent.events] == ["invalid_action"]
    _, expert = play(env, task, [None])
    assert expert.reward == 1.0 and env.stop == () and env.roles == ("solver",)


def test_the_team_plays_each_variant(staged):
    env = ENVS["paper_math_team"](PaperMathConfig(name="paper_math_team", dev_size=0, path=str(staged),
                                                  train=["math"], heldout=["math500"]))
    assert isinstance(env, PaperMathTeamEnv)
    assert env.variants() == ("main", "solo", "empty_guidance", "paired")
    (task,) = tasks(env, "heldout")
    seen, r = play(env, task, ["Take the square root.", "\\boxed{4}"])
    assert [o.role for o in seen] == ["thinker", "solver"] and "Take the square root." in seen[1].text
    assert r.reward == 1.0 and r.info["msg_silent"] is False and r.info["msg_chars"] == 21
    seen, r = play(env, task, ["\\boxed{4}"], "solo")
    assert [o.role for o in seen] == ["solver"] and "(none)" in seen[0].text and "msg_silent" not in r.info
    seen, r = play(env, task, ["Take the square root.", "\\boxed{3}"], "empty_guidance")
    assert "Take the square root." not in seen[1].text and "(none)" in seen[1].text and r.reward == 0.0
    seen, r = play(env, task, ["\\boxed{5}", "It is 4.", "\\boxed{4}"], "paired")
    assert [o.role for o in seen] == ["solver", "thinker", "solver"] and seen[2].new_context
    assert {k: r.info[k] for k in ("solo_correct", "joint_correct", "help", "hurt", "contribution")} == \
        {"solo_correct": False, "joint_correct": True, "help": True, "hurt": False, "contribution": 1.0}


def test_settings_that_cannot_work_are_refused(staged):
    with pytest.raises(ValueError, match="paper_math reads math data sets .*got 'musique'"):
        PaperMathConfig(dev_size=0, path=str(staged), heldout=["musique"]).check()
    with pytest.raises(ValueError, match="env.train_size must be >= 0"):
        PaperMathConfig(dev_size=0, path=str(staged), train_size=-1).check()
    with pytest.raises(StagedDataError, match=r"method.paper_data \(env.path\) is not set"):
        PaperMathEnv(PaperMathConfig())
    with pytest.raises(ValueError, match="demo_size=5 needs that many train rows beyond env.train_size=2"):
        PaperMathEnv(PaperMathConfig(dev_size=0, path=str(staged), train_size=2, demo_size=5)).task_set()


# ---- the methods that only check their data (the suite has no environment for it yet) --------------------
def test_sharp_and_canopy_check_their_data_sets(tmp_path):
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    model = tmp_path / "model"
    model.mkdir()
    root = write_samples(tmp_path / "data", ["musique", "webwalkerqa", "frames", "appworld"])  # GAIA missing
    with pytest.raises(StagedDataError, match=r"has no folder gaia/: GAIA, text-only questions"):
        resolve(compose("sharp", ["scale=paper", f"model.path={model}", f"method.paper_data={root}"]),
                METHODS)
    write_samples(root, ["gaia"])
    resolve(compose("sharp", ["scale=paper", f"model.path={model}", f"method.paper_data={root}"]), METHODS)
    resolve(compose("canopy", ["scale=paper", f"model.path={model}", f"method.paper_data={root}"]), METHODS)
    with pytest.raises(StagedDataError, match="no folder swe-bench-verified/"):
        resolve(compose("canopy", ["scale=paper_swe", f"model.path={model}", f"method.paper_data={root}"]),
                METHODS)
