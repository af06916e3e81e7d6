"""Profile our GRPO step: where the time of N steps goes (cProfile, by own time and cumulative).

    .venv/bin/python -m bench.profile --model tiny --steps 6 [--precision bf16] [--kl 0.04] [--torch]

`--torch` adds torch.profiler's operator table (self CPU time) for the last step.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
from typing import Any

import torch

from bench.work import Setting
from bench.workers import build_ours


def profile(s: Setting, steps: int, top: int = 25, torch_ops: bool = False) -> str:
    torch.set_num_threads(s.threads or os.cpu_count() or 1)
    module, trainer, _ = build_ours(s, steps, [])
    prof = cProfile.Profile()
    ops: Any = None
    if torch_ops:
        import lightning as L

        class LastStep(L.Callback):
            def on_train_batch_start(self, tr: Any, pl: Any, batch: Any, idx: int) -> None:
                nonlocal ops
                if idx == steps - 1:
                    ops = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
                    ops.__enter__()

            def on_train_batch_end(self, tr: Any, pl: Any, out: Any, batch: Any, idx: int) -> None:
                if idx == steps - 1 and ops is not None:
                    ops.__exit__(None, None, None)

        trainer.callbacks.append(LastStep())
    prof.enable()
    trainer.fit(module)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(top)
    if ops is not None:
        buf.write(ops.key_averages().table(sort_by="self_cpu_time_total", row_limit=top))
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--precision", default="32")
    ap.add_argument("--kl", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--torch", action="store_true")
    a = ap.parse_args()
    s = Setting(model=a.model, precision=a.precision, kl_coef=a.kl, threads=a.threads)
    print(profile(s, a.steps, a.top, a.torch))


if __name__ == "__main__":
    main()
