"""Reading a staged split into uniform rows (`load_split`), after `data.check_staged` has checked it.

`load_split` reads a split with `datasets.load_dataset("json" | "parquet" | "csv", data_files=...)`:
every row a dict with its `source_id`, its `question` and, by the data set's kind, its answer
(envs/benchmarks/paper_math/data.py holds the layouts and the checks).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envs.benchmarks.paper_math.data import (
    FORMATS,
    ID_COLUMNS,
    DatasetSpec,
    StagedDataError,
    layout,
    spec,
    split_files,
    text_lines,
)


@contextmanager
def quiet() -> Iterator[None]:
    """No progress bars from `datasets` while a few files are read or written (quiet logs by default)."""
    from datasets.utils import logging as ds_logging

    was = ds_logging.is_progress_bar_enabled()
    ds_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            ds_logging.enable_progress_bar()


def load_split(root: str | Path, name: str, split: str) -> list[dict[str, Any]]:
    """Every row of one split as a uniform dict: `source_id`, `question`, and by kind
    math: `answer` (text, or None when only the solution holds it), `truth` (what math-verify parses as the
    gold: `\\boxed{answer}` or the whole worked solution), `reference` (a worked solution for
    demonstrations), `level`; qa: `answer`, `aliases`; choice: `answer` (a letter); patch: `answer` (the
    gold patch); ids: the id only."""
    s = spec(name)
    files = split_files(root, name, split)
    if s.kind == "ids":
        ids = [text.strip() for p in files for _, text, _ in text_lines(p) if text.strip()]
        return [{"source_id": i} for i in ids]
    import datasets

    fmt = FORMATS[files[0].suffix]
    options = {"delimiter": "\t"} if fmt == "csv" else {}
    try:
        with quiet():
            table = datasets.load_dataset(fmt, data_files=[str(p) for p in files], split="train", **options)
    except Exception as e:  # noqa: BLE001 - `datasets` names no file: say which, and where to learn more
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise StagedDataError(f"cannot read {', '.join(map(str, files))} ({type(e).__name__}: {first}); "
                              f"check_staged names the file and line: {layout(root, name)}") from e
    question = next(c for c in s.question if c in table.column_names)
    answer = next((c for c in s.answer if c in table.column_names), None)
    rows = []
    for i, row in enumerate(table):
        source_id = next((str(row[c]) for c in ID_COLUMNS if row.get(c) not in (None, "")),
                         f"{name}-{split}-{i}")
        if name == "gaia" and row.get("file_name"):
            continue  # GAIA-text: questions without an attached file
        rows.append({"source_id": source_id, **_read(name, s, row, question, answer)})
    return rows


def _read(name: str, s: DatasetSpec, row: dict[str, Any], question: str,
          answer: str | None) -> dict[str, Any]:
    text = str(row[question])
    if s.kind == "choice":
        letters = "ABCDEFGH"
        options = "\n".join(f"{letters[k]}. {o}" for k, o in enumerate(row.get("options") or []))
        context = str(row.get("context") or "")
        return {"question": f"{context}\n{text}\n{options}".strip(),
                "answer": letters[int(row[answer or ""])]}
    if s.kind == "qa":
        aliases = [str(a) for a in row.get("answer_aliases") or []]
        return {"question": text, "answer": str(row[answer or ""]), "aliases": aliases}
    if s.kind == "patch":
        return {"question": text, "answer": str(row[answer or ""])}
    level = row.get("level")
    level_n = int(m.group()) if level is not None and (m := re.search(r"\d+", str(level))) else None
    solution = str(row[s.reference]) if s.reference and row.get(s.reference) else None
    if name == "gsm8k":  # '<working with <<calculator>> notes>\n#### 72'
        working, _, final = str(row[answer or ""]).rpartition("####")
        value = final.strip().replace(",", "")
        working = re.sub(r"<<[^>]*>>", "", working).strip()
        return {"question": text, "answer": value, "truth": f"\\boxed{{{value}}}", "level": level_n,
                "reference": f"{working}\nThe final answer is $\\boxed{{{value}}}$."}
    if answer is None:  # MATH: the answer is the solution's \boxed{}; math-verify reads it from there
        return {"question": text, "answer": None, "truth": solution or "", "reference": solution,
                "level": level_n}
    value = str(row[answer]).strip()
    return {"question": text, "answer": value, "truth": f"\\boxed{{{value}}}", "level": level_n,
            "reference": solution or f"The final answer is $\\boxed{{{value}}}$."}
