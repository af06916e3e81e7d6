"""Where a run's model lives and in which dtype its frozen base weights are held (issue #43).

- `on_cuda`: the run trains on CUDA (`trainer.accelerator` not cpu, and a GPU is visible).
- `warm_start_device`: the device the SFT warm start trains on: this rank's GPU on a CUDA run
  (LOCAL_RANK / SLURM_LOCALID, the GPU Lightning gives the rank), else the CPU.
- `base_dtype`: bfloat16 for a bf16 run on CUDA, float32 otherwise. Under bf16 autocast a float32
  frozen weight is cast to bf16 on every call and the copy kept for the backward (autocast caches only
  leaves that require grad): an 8B model held 32.8 GB of float32 weights plus ~16 GB of those copies.
  Held in bf16 the same matmuls run on the same bf16 values with no copies. The LoRA adapters stay
  float32 (peft's `autocast_adapter_dtype`), and so do their gradients and AdamW's state. CPU runs
  keep float32 whatever the precision (CPU autocast casts the same way; the committed CPU results were
  computed so). The SFT warm start trains in float32 (its cache does not depend on precision) and
  is cast afterwards.
"""

from __future__ import annotations

import os
from typing import Any

import torch


def on_cuda(accelerator: str) -> bool:
    return accelerator != "cpu" and torch.cuda.is_available()


def local_gpu() -> int:
    """This process's GPU index: LOCAL_RANK (Lightning, torchrun), SLURM_LOCALID (srun), else 0."""
    return int(os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID") or 0)


def warm_start_device(accelerator: str) -> torch.device:
    return torch.device("cuda", local_gpu()) if on_cuda(accelerator) else torch.device("cpu")


def base_dtype(accelerator: str, precision: str) -> torch.dtype:
    return torch.bfloat16 if precision == "bf16" and on_cuda(accelerator) else torch.float32


def cast_frozen_base(model: Any, dtype: torch.dtype) -> Any:
    """The model with its floating-point weights and buffers in `dtype` (a no-op for float32 ones)."""
    if dtype != torch.float32:
        model.to(dtype)
    return model
