"""What this machine can do before the benchmark spends time on it: the CPU (model and flags, as the
run manifests record it), each precision's matmul rate, and which precisions are worth measuring.

A precision whose matmul rate is below float32's is skipped: on an AVX2-only CPU (no AVX-512, no
bf16 instructions) torch's bf16 matmul ran at 1.0 GFLOP/s against 155 in float32, every bf16 series
crawled (98 s a step at 9.5M parameters) and `make bench` took 45 minutes instead of 6.

The rate of a precision is the best of two measurements: a square 1024^3 `torch.mm` in that dtype,
and `F.linear` on float32 inputs under that precision's autocast at a transformer-like shape (the
way the trainers run their matmuls). One shape alone under-reports the peak where the library
picks another kernel for another shape or for autocast; MFU divided by such a rate read 180-330%
on the AVX2 machine.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import torch

PRECISION_DTYPE = {"32": torch.float32, "bf16": torch.bfloat16}


def cpu() -> dict[str, Any]:
    """The CPU's model name, kernel-relevant flags and usable cores (`common.provenance.cpu_info`,
    what every run manifest records under `cpu`)."""
    from common.provenance import cpu_info

    return cpu_info()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _best_rate(fn: Any, flops: float, seconds: float, device: str) -> float:
    fn()
    best, end = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < end:
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(2):
            fn()
        _sync(device)
        best = max(best, 2 * flops / (time.perf_counter() - t0))
    return best


def matmul_rates(precision: str, seconds: float = 0.5, device: str = "cpu") -> dict[str, float]:
    """FLOP/s of a square `mm` in the precision's dtype and of an autocast `F.linear` (tokens x
    hidden @ hidden x 4 hidden), each the best over about `seconds`."""
    dtype = PRECISION_DTYPE[precision]
    n = 8192 if device == "cuda" else 1024
    a, b = torch.randn(n, n, device=device).to(dtype), torch.randn(n, n, device=device).to(dtype)
    out = {"mm": _best_rate(lambda: torch.mm(a, b), 2 * n**3, seconds, device)}
    rows, hidden = (8192, 4096) if device == "cuda" else (2048, 512)
    x, w = torch.randn(rows, hidden, device=device), torch.randn(4 * hidden, hidden, device=device)
    cast = (torch.autocast(device, dtype=dtype) if precision != "32" else contextlib.nullcontext())

    def linear() -> None:
        with cast:
            torch.nn.functional.linear(x, w)

    out["linear"] = _best_rate(linear, 2 * rows * hidden * 4 * hidden, seconds, device)
    return out


def usable_precisions(rates: dict[str, float], requested: list[str]) -> tuple[list[str], dict[str, str]]:
    """The requested precisions worth measuring, and a note for each one skipped.

    float32 is always kept (it is the reference every other precision is compared to); another
    precision is skipped when its matmul rate is below float32's on this machine.
    """
    kept, skipped = [], {}
    for p in requested:
        if p not in PRECISION_DTYPE:
            raise ValueError(f"unknown precision {p!r}; choose from {sorted(PRECISION_DTYPE)}")
        if p != "32" and "32" in rates and rates[p] < rates["32"]:
            skipped[p] = (f"skipped: its matmul rate ({rates[p] / 1e9:.1f} GFLOP/s) is below float32's "
                          f"({rates['32'] / 1e9:.1f} GFLOP/s) on this CPU")
        else:
            kept.append(p)
    return kept, skipped


def fastest(rates: dict[str, float], kept: list[str]) -> str:
    """The kept precision with the highest matmul rate."""
    return max(kept, key=lambda p: rates[p])
