"""Run several trainer workers step by step in turn: worker A's step, then B's, then A's again...

Each series (a trainer at one precision and KL setting) is one worker process, forked from a server
that imported what workers need (`bench.preload`). All of a cell's workers start, reach their first
step and wait; then each step index is run by every worker in turn, the order rotating, so slow
drift of the machine (other load, thermal state) falls on all of them alike.
"""

from __future__ import annotations

from typing import Any

from bench.preload import worker_context
from bench.workers import main as worker_main


class Worker:
    def __init__(self, name: str, kind: str, setting: dict[str, Any], steps: int,
                 start_method: str = "forkserver"):
        ctx = worker_context(start_method)
        self.name = name
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=worker_main, args=(kind, setting, steps, child), daemon=True)
        self.proc.start()
        child.close()
        self.records: list[dict[str, Any]] = []
        self.stats: dict[str, Any] = {}

    def wait(self, timeout: float = 1800) -> tuple[str, Any]:
        if not self.conn.poll(timeout):
            raise TimeoutError(f"{self.name}: no answer in {timeout} s")
        msg = self.conn.recv()
        if msg[0] == "error":
            raise RuntimeError(msg[1])
        return msg

    def step(self) -> dict[str, Any]:
        self.conn.send("go")
        kind, record = self.wait()
        assert kind == "ready" and record is not None
        self.records.append(record)
        return record

    def stop(self) -> None:
        self.conn.send("stop")
        kind, stats = self.wait()
        assert kind == "stats"
        self.stats = stats
        self.proc.join(timeout=60)


def alternate(series: dict[str, tuple[str, dict[str, Any]]], warmup: int, steps: int,
              progress: Any = None, start_method: str = "forkserver",
              fewer_steps: dict[str, int] | None = None) -> dict[str, Worker]:
    """Start one worker per series, run warmup + steps steps of each in turn, stop them all. A series
    in `fewer_steps` measures that many steps only (the first rounds; it rests in the later ones)."""
    measured = {name: min(steps, (fewer_steps or {}).get(name, steps)) for name in series}
    workers = {name: Worker(name, kind, setting, warmup + measured[name] + 1, start_method)
               for name, (kind, setting) in series.items()}
    try:
        for w in workers.values():
            kind, record = w.wait()
            assert kind == "ready" and record is None
        order = list(workers.values())
        for k in range(warmup + steps):
            for w in order[k % len(order):] + order[: k % len(order)]:
                if k >= warmup + measured[w.name]:
                    continue
                w.step()
                if progress is not None:
                    progress()
        for w in workers.values():
            w.records = w.records[warmup:]
            w.stop()
    finally:
        for w in workers.values():
            if w.proc.is_alive():
                w.proc.kill()
    return workers
