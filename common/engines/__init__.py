"""Generation backends. `vllm` is imported only when chosen (it is an optional extra)."""

from __future__ import annotations

from typing import Any

from common.config import RunConfig
from common.engines.base import Engine, Request, Sample, SamplingParams


def make_engine(cfg: RunConfig, policy: Any) -> Engine:
    if cfg.engine.name == "hf":
        from common.engines.hf import HFEngine

        return HFEngine(policy, max_batch=cfg.engine.max_batch, bf16=cfg.trainer.precision == "bf16",
                        kv_reuse=cfg.engine.kv_reuse)
    if cfg.engine.name == "vllm":
        try:
            from common.engines.vllm import VLLMEngine
        except ImportError as e:
            raise ImportError("engine=vllm needs vLLM: run `make setup VLLM=1` (CPU) or install the `gpu` "
                              f"extra ({e})") from e
        return VLLMEngine(policy, cfg)
    raise ValueError(f"unknown engine {cfg.engine.name!r}; choose hf | vllm")


__all__ = ["Engine", "Request", "Sample", "SamplingParams", "make_engine"]
