"""Hand-written sample rows of every data set in its published layout and columns (not the data sets'
content): the test suite's fixtures (`write_samples`) and what `python -m envs check` and the fuzz test
play when no data is staged (`sample_data`)."""

from __future__ import annotations

import atexit
import functools
import json
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from envs.benchmarks.paper_math.data import DATASETS, spec
from envs.benchmarks.paper_math.loading import quiet

_MATH_ROWS = [("What is 12 + 30?", "42"), ("Compute $\\frac{1}{2} + \\frac{1}{3}$.", "\\frac{5}{6}"),
              ("Find $x$ if $2x = 14$.", "7"), ("What is $3^4$?", "81"), ("Simplify $\\sqrt{49}$.", "7"),
              ("How many sides has a hexagon?", "6"), ("What is 7 times 8?", "56"),
              ("What is $100 - 37$?", "63"),
              ("Compute $2^{10}$.", "1024"), ("Write $\\frac{3}{4}$ as a decimal.", "0.75"),
              ("What is $15 \\div 3$?", "5"), ("What is $9 + 10$?", "19"), ("Solve $x + 4 = 10$.", "6"),
              ("What is $5!$?", "120"), ("What is $\\gcd(12, 18)$?", "6"), ("What is $11^2$?", "121")]


def _sample_rows(name: str, split: str) -> list[dict[str, Any]]:
    """Hand-written rows in a data set's published columns (not its content)."""
    offset = 0 if split == "train" else 3
    rotated = _MATH_ROWS[offset:] + _MATH_ROWS[:offset]
    pairs = [(f"[{name} {split} {k}] {q}", a) for k, (q, a) in enumerate(rotated)]
    if name == "gsm8k":
        return [{"question": q, "answer": f"Add them: <<1+1=2>>.\n#### {a if a.isdigit() else 5}"}
                for q, a in pairs]
    if name == "math":
        return [{"problem": q, "solution": f"We work it out: $\\boxed{{{a}}}$.",
                 "level": f"Level {k % 5 + 1}", "type": "Algebra"} for k, (q, a) in enumerate(pairs)]
    if name in ("math500", "aime24"):
        return [{"problem": q, "solution": f"Hence $\\boxed{{{a}}}$.", "answer": a, "level": k % 5 + 1,
                 "unique_id": f"{name}/{k}.json"} for k, (q, a) in enumerate(pairs)]
    if name == "aime25":
        return [{"problem": q, "answer": a, "id": str(k)} for k, (q, a) in enumerate(pairs)]
    if name in ("amc23", "minerva", "gaokao2023"):
        return [{"question": q, "answer": a} for q, a in pairs]
    if name == "logiqa":
        return [{"context": f"[{split} {k}] All cats purr.", "query": "Which follows?",
                 "options": ["w", "x", "y", "z"], "correct_option": k % 4} for k in range(4)]
    if name == "musique":
        return [{"id": f"2hop_{k}", "question": q, "answer": a, "answer_aliases": [], "answerable": True}
                for k, (q, a) in enumerate(pairs)]
    if name == "gaia":
        return [{"task_id": str(k), "Question": q, "Level": 1, "Final answer": a,
                 "file_name": "" if k else "x.png"}
                for k, (q, a) in enumerate(pairs)]
    if name == "webwalkerqa":
        return [{"question": q, "answer": a, "root_url": "https://example.org"} for q, a in pairs]
    if name == "frames":
        return [{"Prompt": q, "Answer": a} for q, a in pairs]
    if name == "swe-bench-verified":
        return [{"instance_id": f"repo__{k}", "problem_statement": q, "patch": "diff --git a/x b/x"}
                for k, (q, _) in enumerate(pairs)]
    raise KeyError(name)


def write_samples(root: str | Path, names: Sequence[str] | None = None) -> Path:
    """Write a few hand-written rows of each data set in `names` (default: all) in its published layout
    under `root`: Parquet where the Hub publishes Parquet, JSONL where the source publishes JSONL."""
    from datasets import Dataset

    root = Path(root)
    for name in names or DATASETS:
        s, folder = spec(name), Path(root) / name
        if name == "appworld":
            (folder / "datasets").mkdir(parents=True, exist_ok=True)
            for split, ids in (("train", ["a1_1", "a1_2", "b2_1"]), ("test_normal", ["c3_1", "d4_1"])):
                (folder / "datasets" / f"{split}.txt").write_text("\n".join(ids) + "\n")
                for i in ids:
                    (folder / "tasks" / i).mkdir(parents=True, exist_ok=True)
            continue
        for split in s.files:
            # the layout's example file, renamed for the split (MuSiQue's and AIME 2024's names are their own)
            example = s.example.split(" ", 1)[0]
            renamed = example.replace("test", split).replace("dev", split if split == "train" else "dev")
            path = folder / renamed
            if name == "aime24":
                path = folder / "data" / "train-00000-of-00001.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            rows = _sample_rows(name, split)
            if path.suffix == ".parquet":
                with quiet():
                    Dataset.from_list(rows).to_parquet(str(path))
            elif path.suffix == ".tsv":
                header = list(rows[0])
                lines = ["\t".join(header)] + ["\t".join(str(r[c]) for c in header) for r in rows]
                path.write_text("\n".join(lines) + "\n")
            else:
                path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


@functools.cache
def sample_data() -> str:
    """A temporary folder of sample rows for every data set (`write_samples`), written once per process and
    removed at exit: what `python -m envs check` and the fuzz test play when no data is staged."""
    folder = tempfile.mkdtemp(prefix="paper-data-samples-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return str(write_samples(folder))
