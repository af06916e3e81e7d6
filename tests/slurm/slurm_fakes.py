"""Fake cells and a fake run for the failure tests (seconds, not a training run). The tests pickle
this module by value, so the SLURM jobs do not need it importable."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class FakeCell:
    method: str
    env: str
    arm: str
    seed: int
    scale: str
    overrides: tuple[str, ...]
    out_dir: str
    work_dir: str

    @property
    def run_dir(self) -> Path:
        return Path(self.out_dir) / self.method / self.env / self.arm / f"seed-{self.seed}"

    @property
    def name(self) -> str:
        return f"{self.method}/{self.env}/{self.arm}/seed-{self.seed}"

    @property
    def done(self) -> bool:
        return (self.run_dir / "done").exists()


def fake_run(cell: FakeCell) -> dict:
    """arm `ok` finishes; `raises` raises inside the job; `hangs` runs until it is cancelled."""
    print(f"fake run of {cell.name}", file=sys.stderr, flush=True)
    if cell.arm == "raises":
        raise ValueError(f"trainer.lr must be > 0 at run time; got -1 ({cell.name})")
    if cell.arm == "hangs":
        time.sleep(600)
    cell.run_dir.mkdir(parents=True, exist_ok=True)
    (cell.run_dir / "done").write_text("done\n")
    return {"status": "done", "run_dir": str(cell.run_dir)}


def fake_validate(cells: list[FakeCell]) -> list[dict]:
    return [{"trainer": {"accelerator": "cpu", "devices": 1, "num_nodes": 1}} for _ in cells]


def fake_aggregate(method: str, scale: str, cells: list[FakeCell]) -> str:
    missing = [c.name for c in cells if not (c.run_dir / "done").exists()]
    return (f"aggregate {method}/{scale}: {len(cells) - len(missing)}/{len(cells)} cells; "
            f"{len(missing)} missing")
