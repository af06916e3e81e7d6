"""The papers' data, staged on local disk: where each data set lives, how it is read, what is checked.

At `scale=paper` a run reads the data its paper used from one local folder (`method.paper_data`),
with one subfolder per data set holding its files exactly as the data set publishes them (JSONL or
Parquet; FRAMES's TSV; AppWorld's task lists). The suite never downloads them:

    <paper_data>/gsm8k/main/train-00000-of-00001.parquet    openai/gsm8k (or train.jsonl / test.jsonl
    <paper_data>/gsm8k/main/test-00000-of-00001.parquet      from github.com/openai/grade-school-math)
    <paper_data>/math/algebra/train-00000-of-00001.parquet  hendrycks MATH, one folder per subject
    <paper_data>/math500/test.jsonl                          HuggingFaceH4/MATH-500
    <paper_data>/musique/musique_ans_v1.0_train.jsonl        MuSiQue-Ans v1.0 ...

`DATASETS` holds each data set's layout (glob patterns per split, searched recursively in its
folder), its columns and where it is published. `check_staged` is the config check, run before any
run folder exists: every file a run will read is there, has the columns the loader reads, can be
read whole (every line of a JSONL file one JSON object, UTF-8 text, a Parquet file pyarrow reads),
and has a question and an answer in every row (one line per problem, naming the file and the layout
it expects). It reads every row once per file version (cached by size and modification time).
`load_split` (`loading.py`) reads a split with `datasets.load_dataset("json" | "parquet" | "csv",
data_files=...)` into uniform rows. A split's formats are never mixed: when a folder holds the same
split as Parquet and as JSONL, Parquet is read.

Held-out evaluation reads each data set's own test split (`test`). Where the test split's answers
are not public, the split published for evaluation stands in and the spec says so: MuSiQue's
`dev`, GAIA's 2023 `validation`. AIME 2024 is published as one split named `train` that *is* the
benchmark, so it has only a test split here. LogiQA's rows have their options lettered A-D.

`write_samples` (`samples.py`) writes a few hand-written rows per data set in its published layout
and columns (not the data sets' content): the test suite's fixtures and what `python -m envs check`
verifies math-verify against when no data is staged.
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Kind = Literal["math", "qa", "choice", "ids", "patch"]
FORMATS = {".parquet": "parquet", ".jsonl": "json", ".json": "json", ".tsv": "csv"}  # preferred first
ID_COLUMNS = ("unique_id", "id", "instance_id", "task_id", "url")  # a row's own id, where it has one


def _named(split: str) -> tuple[str, ...]:
    """Files of a split named as the Hub and most repositories name them: test.jsonl,
    test-00000-of-00001.parquet."""
    return (f"**/{split}.*", f"**/{split}-*", f"**/{split}_*")


@dataclass(frozen=True)
class DatasetSpec:
    """One data set: its folder under the data root, files per split, the columns the loader reads."""

    title: str  # as the papers name it
    source: str  # where it is published (the user downloads it; the suite never does)
    kind: Kind  # math: answer checked by math-verify | qa: answer + aliases | choice: a letter | ids | patch
    files: dict[str, tuple[str, ...]]  # split (train | test) -> glob patterns relative to its folder
    question: tuple[str, ...] = ("problem", "question")  # the first column present is the question
    answer: tuple[str, ...] = ("answer",)  # the first present is the answer (gsm8k: its `#### <n>` line)
    reference: str | None = None  # column of a worked solution (MATH's holds the answer in \boxed{})
    example: str = ""  # one file of the layout, shown in error messages
    extra: tuple[str, ...] = field(default_factory=tuple)  # further columns read (levels, aliases, options)

    def columns(self) -> list[tuple[str, ...]]:
        """Column groups a file must have (one of each group)."""
        groups: list[tuple[str, ...]] = []
        if self.kind in ("math", "qa", "choice", "patch"):
            groups.append(self.question)
        if self.kind == "math" and self.reference and self.answer == ():
            groups.append((self.reference,))
        elif self.kind != "ids":
            groups.append(self.answer)
        return groups


DATASETS: dict[str, DatasetSpec] = {
    # ---- math: answers checked with math-verify
    "gsm8k": DatasetSpec(
        "GSM8K", "openai/gsm8k (config main) or github.com/openai/grade-school-math", "math",
        {"train": _named("train"), "test": _named("test")}, ("question",), ("answer",),
        example="main/test-00000-of-00001.parquet (columns question, answer ending in '#### <n>')"),
    "math": DatasetSpec(
        "MATH (Hendrycks et al. 2021)", "hendrycks/competition_math (mirror: EleutherAI/hendrycks_math)",
        "math", {"train": _named("train"), "test": _named("test")}, ("problem",), (), "solution",
        example="algebra/test-00000-of-00001.parquet (columns problem, solution with \\boxed{}, level)",
        extra=("level",)),
    "math500": DatasetSpec(
        "MATH500", "HuggingFaceH4/MATH-500", "math", {"test": _named("test")}, ("problem",), ("answer",),
        "solution", example="test.jsonl (columns problem, solution, answer, level)", extra=("level",)),
    "aime24": DatasetSpec(
        "AIME 2024", "HuggingFaceH4/aime_2024 (its one split, named train, is the benchmark)", "math",
        {"test": _named("train") + _named("test")},
        example="data/train-00000-of-00001.parquet (columns problem, answer)"),
    "aime25": DatasetSpec("AIME 2025", "math-ai/aime25", "math", {"test": _named("test")},
                          example="test.jsonl (columns problem, answer)"),
    "amc23": DatasetSpec("AMC 2023", "math-ai/amc23", "math", {"test": _named("test")},
                         example="test.jsonl (columns question, answer)"),
    "minerva": DatasetSpec("Minerva Math", "math-ai/minervamath", "math", {"test": _named("test")},
                           example="test.jsonl (columns question, answer)"),
    "gaokao2023": DatasetSpec("Gaokao2023-Math-En", "MARIO-Math-Reasoning/Gaokao2023-Math-En", "math",
                              {"test": _named("test")}, example="test.jsonl (columns question, answer)"),
    # ---- logic: multiple choice (CCPO v1's 3-agent vote)
    "logiqa": DatasetSpec(
        "LogiQA", "lucasmccabe/logiqa", "choice", {"train": _named("train"), "test": _named("test")},
        ("query",), ("correct_option",),
        example="test.jsonl (columns context, query, options, correct_option)", extra=("context", "options")),
    # ---- retrieval QA (SHARP): the answer and its aliases
    "musique": DatasetSpec(
        "MuSiQue-Ans v1.0 (held out: dev; the test answers are private)", "github.com/StonyBrookNLP/musique",
        "qa",
        {"train": ("**/musique_ans_v1.0_train.jsonl",), "test": ("**/musique_ans_v1.0_dev.jsonl",)},
        ("question",), ("answer",),
        example="musique_ans_v1.0_dev.jsonl (columns question, answer, answer_aliases)",
        extra=("answer_aliases",)),
    "gaia": DatasetSpec(
        "GAIA, text-only questions (held out: 2023 validation; the test answers are private)",
        "gaia-benchmark/GAIA", "qa", {"test": ("**/validation/metadata.jsonl",)}, ("Question",),
        ("Final answer",),
        example="2023/validation/metadata.jsonl (columns Question, Final answer, file_name)",
        extra=("file_name",)),
    "webwalkerqa": DatasetSpec(
        "WebWalkerQA", "callanwu/WebWalkerQA", "qa", {"test": _named("main") + _named("test")}, ("question",),
        ("answer",), example="main-00000-of-00001.parquet (columns question, answer)"),
    "frames": DatasetSpec("FRAMES", "google/frames-benchmark", "qa", {"test": _named("test")}, ("Prompt",),
                          ("Answer",), example="test.tsv (columns Prompt, Answer)"),
    # ---- agent benchmarks (CANOPY): the suite checks the task lists; their environments are not in the suite
    "appworld": DatasetSpec(
        "AppWorld (held out: Test-Normal)", "`appworld download data` (the appworld package)", "ids",
        {"train": ("datasets/train.txt",), "test": ("datasets/test_normal.txt",)},
        example="datasets/test_normal.txt (one task id a line) and tasks/<task id>/"),
    "swe-bench-verified": DatasetSpec(
        "SWE-bench Verified (its task images are not checked)", "princeton-nlp/SWE-bench_Verified", "patch",
        {"test": _named("test")}, ("problem_statement",), ("patch",),
        example="data/test-00000-of-00001.parquet (columns instance_id, problem_statement, patch)"),
}


class StagedDataError(ValueError):
    """The staged data is missing or not in its published layout (one line: the data set and what to do)."""


def spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise StagedDataError(f"unknown data set {name!r}; the suite reads {', '.join(DATASETS)} "
                              "(envs/benchmarks/paper_math/data.py)")
    return DATASETS[name]


def layout(root: str | Path | None, name: str) -> str:
    """Where a data set goes and in what form, for error messages."""
    s = spec(name)
    where = Path(root) / name if root else Path("<folder>") / name
    return f"{s.title} as published by {s.source}, e.g. {where}/{s.example}"


def split_files(root: str | Path | None, name: str, split: str,
                setting: str = "method.paper_data") -> list[Path]:
    """The files of one split of data set `name` under `root`, one format only (Parquet first)."""
    s = spec(name)
    if split not in s.files:
        raise StagedDataError(f"{s.title} has no {split} split here (it has {', '.join(s.files)}); "
                              "choose another data set for "
                              f"{'training' if split == 'train' else 'evaluation'}")
    if not root:
        raise StagedDataError(f"{setting} is not set: stage the paper's data in a local folder, one "
                              f"subfolder per data set; {layout(root, name)}")
    folder = Path(root) / name
    if not folder.is_dir():
        raise StagedDataError(f"{setting}={root} has no folder {name}/: {layout(root, name)}")
    found = sorted({p for pattern in s.files[split] for p in folder.glob(pattern) if p.is_file()})
    if s.kind == "ids":
        files = [p for p in found if p.suffix == ".txt"]
    else:
        by_format = {ext: [p for p in found if p.suffix == ext] for ext in FORMATS}
        files = next((group for group in by_format.values() if group), [])
    if not files:
        raise StagedDataError(f"no {split} split of {s.title} in {folder} (files matching "
                              f"{', '.join(s.files[split])} with a suffix "
                              f"{', '.join(FORMATS) if s.kind != 'ids' else '.txt'}): {layout(root, name)}")
    return files


def text_lines(path: Path) -> Iterator[tuple[int, str, bool]]:
    """(line number, text, whether it ends with a newline) of a UTF-8 text file (a leading BOM dropped);
    a line that is not UTF-8 is a StagedDataError naming the file and the line."""
    with path.open("rb") as f:
        for n, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise StagedDataError(f"{path} line {n} is not UTF-8 text ({e.reason} at byte {e.start} "
                                      "of the line)") from None
            yield n, text, raw.endswith(b"\n")


def _jsonl_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """('line <n>', row) of every row of a JSONL file. Every line must be one JSON object (blank lines are
    skipped); a torn last line is an error too: a staged file is read whole or not at all."""
    for n, text, ended in text_lines(path):
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except json.JSONDecodeError as e:
            torn = ", its last line, cut short: the file is incomplete" if not ended else ""
            raise StagedDataError(f"{path} line {n} is not valid JSON ({e.msg} at column {e.colno}{torn}); "
                                  "JSONL has one JSON object a line") from None
        if not isinstance(row, dict):
            raise StagedDataError(f"{path} line {n} is a JSON {type(row).__name__}, not an object; JSONL "
                                  "has one JSON object a line")
        yield f"line {n}", row


def _json_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """('row <n>' or 'line <n>', row) of a .json file: a JSON array of objects, or JSON Lines (the Hub
    uses both)."""
    if not next((text for _, text, _ in text_lines(path) if text.strip()), "").lstrip().startswith("["):
        yield from _jsonl_rows(path)
        return
    text = "".join(line for _, line, _ in text_lines(path))
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise StagedDataError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}, "
                              f"column {e.colno})") from None
    for n, row in enumerate(rows, start=1):
        if not isinstance(row, dict):
            raise StagedDataError(f"{path} row {n} is a JSON {type(row).__name__}, not an object")
        yield f"row {n}", row


def _tsv_rows(path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """('line <n>', row) of a TSV file with a header line; an empty cell is None (pandas reads it as NaN)."""
    lines = (text for _, text, _ in text_lines(path))
    reader = csv.reader(lines, delimiter="\t")
    header = next(reader, [])
    for row in reader:
        if len(row) != len(header):
            raise StagedDataError(f"{path} line {reader.line_num} has {len(row)} fields, "
                                  f"the header {len(header)}")
        yield f"line {reader.line_num}", {k: v if v != "" else None for k, v in zip(header, row, strict=True)}


def _parquet(path: Path, columns: Sequence[str] | None = None) -> Any:
    """A Parquet file's schema (columns None) or those columns as a table; a file pyarrow cannot read (cut
    short, not Parquet) is a StagedDataError naming it."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_schema(path) if columns is None else pq.read_table(path, columns=list(columns))
    except (pa.ArrowException, OSError, ValueError) as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise StagedDataError(f"{path} is not a readable Parquet file ({first})") from None


def file_columns(path: Path) -> list[str]:
    """A data file's column names, from its schema or first row (nothing else is read). Every error
    names the file."""
    if path.suffix == ".parquet":
        return list(_parquet(path).names)
    if path.suffix == ".tsv":
        return next(csv.reader((text for _, text, _ in text_lines(path)), delimiter="\t"), [])
    first = next(_json_rows(path), None)
    return list(first[1]) if first else []


def _read_columns(s: DatasetSpec, have: Collection[str]) -> list[str]:
    """The columns the loader reads as question and answer: the first of each group the file has."""
    return [next(c for c in group if c in have) for group in s.columns() if set(group) & set(have)]


def _nulls(path: Path, columns: Sequence[str]) -> dict[str, tuple[int, str, int]]:
    """column -> (rows where it is null or missing, where the first is, rows), reading every row of the
    file."""
    if path.suffix == ".parquet":
        import pyarrow.compute as pc

        table = _parquet(path, columns)
        out = {}
        for c in columns:
            null = table.column(c).null_count
            first = f"row {pc.index(pc.is_null(table.column(c)), True).as_py() + 1}" if null else ""
            out[c] = (null, first, table.num_rows)
        return out
    counts, firsts, rows = dict.fromkeys(columns, 0), dict.fromkeys(columns, ""), 0
    for where, row in _tsv_rows(path) if path.suffix == ".tsv" else _json_rows(path):
        rows += 1
        for c in columns:
            if row.get(c) is None:
                counts[c] += 1
                firsts[c] = firsts[c] or where
    return {c: (counts[c], firsts[c], rows) for c in columns}


@functools.lru_cache(maxsize=1024)
def _file_errors(path: Path, size: int, mtime_ns: int, name: str, layout: str) -> tuple[str, ...]:
    """What is wrong with one staged file of data set `name`, each line naming it: a row that cannot be read
    (every row is read), a column the loader reads missing, or a question or answer null in some row. Cached
    by the file's size and modification time: every check of a run's config calls it."""
    s = spec(name)
    try:
        have = set(file_columns(path))
        missing = [group for group in s.columns() if not have & set(group)]
        if missing:
            return tuple(f"{path} has no column {' or '.join(group)} (it has {', '.join(sorted(have))}): "
                         f"{layout}"
                         for group in missing)
        nulls = _nulls(path, _read_columns(s, have))
    except StagedDataError as e:
        return (f"{e}; stage it again as published: {layout}",)
    return tuple(f"{path}: column {c} is null or missing in "
                 f"{'every row' if null == rows else f'{null} of {rows} rows'} (the first: {first}); "
                 f"every row needs one (the loader would read None as its text): {layout}"
                 for c, (null, first, rows) in nulls.items() if null)


def _text_errors(path: Path, layout: str) -> list[str]:
    """A task list (one id a line) that is not UTF-8 text, named."""
    try:
        for _ in text_lines(path):
            pass
    except StagedDataError as e:
        return [f"{e}; stage it again as published: {layout}"]
    return []


def check_file(path: Path, name: str, layout: str) -> list[str]:
    """`_file_errors` of the file as it is now."""
    stat = path.stat()
    return list(_file_errors(path, stat.st_size, stat.st_mtime_ns, name, layout))


def check_staged(root: str | Path | None, needs: Mapping[str, Sequence[str]],
                 setting: str = "method.paper_data") -> None:
    """Raise StagedDataError listing, one line each, every data set, split or column missing for the splits
    `needs` names (data set -> splits), and every file that cannot be read whole (`check_file`: every row
    of JSONL, JSON and TSV files, the question and answer columns of Parquet ones); each line names the
    file."""
    if not root:
        names, first = ", ".join(f"{n}/ ({spec(n).title})" for n in needs), next(iter(needs))
        raise StagedDataError(f"{setting} is not set: stage the paper's data in one local folder with "
                              f"{names} as published (layouts: envs/benchmarks/paper_math/data.py), e.g. "
                              f"<folder>/{first}/{spec(first).example}")
    errors: list[str] = []
    for name, splits in needs.items():
        s = spec(name)
        if not (Path(root) / name).is_dir():
            errors.append(f"{setting}={root} has no folder {name}/: {layout(root, name)}")
            continue
        for split in splits:
            try:
                files = split_files(root, name, split, setting)
            except StagedDataError as e:
                errors.append(str(e))
                continue
            if s.kind == "ids":
                if not (Path(root) / name / "tasks").is_dir():
                    errors.append(f"{s.title} has no task folder {Path(root) / name / 'tasks'}: "
                                  f"{layout(root, name)}")
                errors += [error for path in files for error in _text_errors(path, layout(root, name))]
                continue
            for path in files:
                errors += check_file(path, name, layout(root, name))
    if len(errors) == 1:
        raise StagedDataError(errors[0])
    if errors:
        raise StagedDataError("the paper's data is incomplete:\n  - " + "\n  - ".join(errors))
