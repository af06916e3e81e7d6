"""Waiting for submitted cells with a progress bar, and the report at the end."""

from __future__ import annotations

import sys
import time
from collections import Counter
from collections.abc import Callable
from typing import TextIO

from tqdm import tqdm

from slurm.jobs import CellState, Entry, SacctRow, classify, failure_report, sacct

# A job that sacct shows as ended without a result is called failed only after it stays so this
# long (a requeue passes through states quickly; a result file may reach a shared disk late).
CONFIRM_FAILED_S = 5.0


def snapshot(entries: list[Entry], rows: dict[str, SacctRow] | None) -> list[CellState]:
    rows = rows or {}
    return [classify(e, rows.get(e.job_id) if e.job_id else None) for e in entries]


def summary(states: list[CellState]) -> str:
    """'2/4 done · RUNNING 1 · PENDING 1' (SLURM states of the cells not finished yet)."""
    done = sum(s.outcome == "done" for s in states)
    failed = sum(s.outcome == "failed" for s in states)
    live = Counter(s.slurm for s in states if not s.finished)
    parts = [f"{done}/{len(states)} done"] + [f"{k} {v}" for k, v in sorted(live.items())]
    if failed:
        parts.append(f"failed {failed}")
    return " · ".join(parts)


def wait(entries: list[Entry], poll_s: float = 60.0, stream: TextIO | None = None,
         sacct_fn: Callable[[list[str]], dict[str, SacctRow] | None] = sacct) -> list[CellState]:
    """Block until every cell is done or failed; show progress (a bar on a terminal, else one line
    per change). Run directories and result files are checked every second; sacct with a backoff
    from 2 s to `poll_s` (clusters dislike being polled hard)."""
    stream = stream or sys.stderr
    ids = [e.job_id for e in entries if e.job_id]
    tty = stream.isatty()
    bar = tqdm(total=len(entries), desc="cells", unit="cell", file=stream, disable=not tty,
               dynamic_ncols=True)
    start = time.monotonic()
    last_poll, rows = float("-inf"), None
    suspects: dict[str, float] = {}  # job id -> when it first looked failed
    last_line, last_print = "", 0.0
    try:
        while True:
            now = time.monotonic()
            if now - last_poll >= min(poll_s, max(2.0, (now - start) / 10)) or (
                    suspects and now - min(suspects.values()) >= CONFIRM_FAILED_S and last_poll < now - 1):
                rows = sacct_fn(ids) if ids else {}
                rows = rows if rows is not None else {}
                last_poll = now
            states = snapshot(entries, rows)
            for s in states:  # a failure seen only through sacct must last CONFIRM_FAILED_S
                job = s.entry.job_id
                if s.outcome == "failed" and job and "without a result" in s.detail:
                    first = suspects.setdefault(job, now)
                    if now - first < CONFIRM_FAILED_S:
                        s.outcome = "pending"
                elif job:
                    suspects.pop(job, None)
            finished = sum(s.finished for s in states)
            line = summary(states)
            bar.n = finished
            bar.set_postfix_str(line.split(" · ", 1)[-1] if " · " in line else "", refresh=True)
            if not tty and (line != last_line or now - last_print >= 60):
                elapsed = time.strftime("%M:%S", time.gmtime(now - start))
                print(f"[slurm {elapsed}] {line}", file=stream, flush=True)
                last_line, last_print = line, now
            if finished == len(states):
                return states
            time.sleep(1.0)
    finally:
        bar.close()


def report(states: list[CellState]) -> tuple[str, int]:
    """Text naming every failed cell (state + log tail), and the number of cells not done."""
    failed = [s for s in states if s.outcome == "failed"]
    done = sum(s.outcome == "done" for s in states)
    lines = [f"{done}/{len(states)} cells done" + (f", {len(failed)} failed:" if failed else "")]
    lines += [failure_report(s) for s in failed]
    return "\n".join(lines), len(states) - done
