"""Profile our GRPO step: where the time of N steps goes (cProfile, by own time and cumulative).

    .venv/bin/python -m bench.profile --model tiny --steps 6 [--precision bf16] [--kl 0.04] [--torch]
    .venv/bin/python -m bench.profile --model smollm2 --steps 3 --precision bf16 --breakdown

`--torch` adds torch.profiler's operator table (self CPU time, grouped by input shape) for the last
step. `--breakdown` times the parts of the step before the last (the last ends with the final
evaluation) by wall clock instead (no cProfile): the
rollout's prefill and decode, the update's scoring forward, the reference forward (KL), the
backward, and inside them the LM head and the LoRA terms (bench/profile.py `PARTS`). The model's
workload is the benchmark's (`bench.work.MODEL_WORKLOAD`).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
from typing import Any

import torch

from bench.work import MODEL_WORKLOAD, Setting
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
                    ops = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                                 record_shapes=True)
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
        buf.write(ops.key_averages(group_by_input_shape=True).table(sort_by="self_cpu_time_total",
                                                                    row_limit=top))
    return buf.getvalue()


class Timers:
    """Wall time of chosen functions, accumulated per label while `active` (nested labels overlap:
    the LM head's time is also inside prefill, decode and the scoring forward)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self.active = False
        self._undo: list[tuple[Any, str, Any]] = []

    def wrap(self, owner: Any, name: str, label: Any) -> None:
        import functools
        import time

        original = getattr(owner, name)

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.active:
                return original(*args, **kwargs)
            key = label(*args, **kwargs) if callable(label) else label
            t0 = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[key] = self.seconds.get(key, 0.0) + time.perf_counter() - t0
                self.calls[key] = self.calls.get(key, 0) + 1

        setattr(owner, name, timed)
        self._undo.append((owner, name, original))

    def undo(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)


def _lora_term(self: Any, x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.linear(torch.nn.functional.linear(x, self.lora[0]), self.lora[1])


def breakdown(s: Setting, steps: int) -> dict[str, Any]:
    """Wall seconds of the parts of the step before the last of `steps` steps (the last one ends
    with the trainer's final evaluation); see the module docstring."""
    import time

    import lightning as L

    import common.trainer
    from common.engines import fast

    torch.set_num_threads(s.threads or os.cpu_count() or 1)
    timers = Timers()
    grad = lambda *a, **k: (  # noqa: E731
        "update: scoring forward (policy, with grad)" if torch.is_grad_enabled()
        else "update: reference / no-grad forward")
    timers.wrap(fast.FastDecoder, "__init__", "rollout: decoder set-up (LoRA merged, KV buffers)")
    timers.wrap(fast.FastDecoder, "prefill", "rollout: prefill")
    timers.wrap(fast.FastDecoder, "step", "rollout: decode steps")
    timers.wrap(fast.FastScorer, "logits_at", grad)
    timers.wrap(fast.FastScorer, "logits_shared", grad)
    timers.wrap(fast._FastModel, "_logits",
                "  of which LM head (final norm + 49k-vocab matmul), forward only")
    timers.wrap(common.trainer, "score_rows",
                "update: score_rows (forward + logsumexp over the vocabulary)")
    timers.wrap(common.trainer.RLModule, "manual_backward", "update: backward")

    def proj_call(self: Any, x: torch.Tensor) -> torch.Tensor:
        y = torch.nn.functional.linear(x, self.weight, self.bias)
        if self.lora is not None:
            y = y + _lora_term(self, x)
        return y

    # the same arithmetic as _Proj.__call__, the LoRA term timed apart
    fast._Proj.__call__ = proj_call  # type: ignore[method-assign]
    timers.wrap(sys.modules[__name__], "_lora_term", "  of which LoRA terms (x A^T) (sB)^T, forward only")
    step_wall: dict[str, float] = {}

    if steps < 2:
        raise ValueError("--breakdown times the step before the last (the last one ends with the final "
                         "evaluation): --steps >= 2")

    class Last(L.Callback):
        def on_train_batch_start(self, tr: Any, pl: Any, batch: Any, idx: int) -> None:
            if idx == steps - 2:
                timers.active = True
                step_wall["t0"] = time.perf_counter()

        def on_train_batch_end(self, tr: Any, pl: Any, out: Any, batch: Any, idx: int) -> None:
            if idx == steps - 2:
                timers.active = False
                step_wall["step_s"] = time.perf_counter() - step_wall["t0"]

    module, trainer, run_dir = build_ours(s, steps, [Last()])
    try:
        trainer.fit(module)
    finally:
        timers.undo()
    last = [m for m in run_dir.read_metrics() if "time_rollout_s" in m][-2]
    return {"step_s": step_wall.get("step_s"), "time_rollout_s": last["time_rollout_s"],
            "time_reference_s": last.get("time_reference_s"), "time_train_s": last["time_train_s"],
            "generated_tokens": last["generated_tokens"], "parts_s": timers.seconds, "calls": timers.calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--precision", default="32")
    ap.add_argument("--kl", type=float, default=0.0)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--torch", action="store_true")
    ap.add_argument("--breakdown", action="store_true",
                    help="wall time of the last step's parts (no cProfile)")
    ap.add_argument("--no-share-prefix", action="store_true",
                    help="score whole rows, never a shared prompt once "
                         "(common.batch.SHARE_MAX_FRACTION = 0): an A/B")
    a = ap.parse_args()
    if a.no_share_prefix:
        import common.batch

        common.batch.SHARE_MAX_FRACTION = 0.0
    s = Setting(model=a.model, precision=a.precision, kl_coef=a.kl, threads=a.threads,
                **MODEL_WORKLOAD.get(a.model, {}))
    if a.breakdown:
        import json

        print(json.dumps(breakdown(s, a.steps), indent=2))
        return
    print(profile(s, a.steps, a.top, a.torch))


if __name__ == "__main__":
    main()
