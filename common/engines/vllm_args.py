"""The arguments `vllm.LLM` gets (`llm_kwargs`), from the run's config alone: testable without vLLM.

Sizing (issue #43; what the paper scales set, and what `experiments.plan_memory` budgets):
- KV cache: on the CPU build a fixed `kv_cache_memory_bytes` (256 MiB unless set: the build would
  otherwise reserve a fraction of all host memory); on a GPU null, so vLLM sizes it from
  `gpu_memory_utilization` (its share of the GPU: weights, activations and KV cache together). A set
  `kv_cache_memory_bytes` wins on both (vLLM then ignores the utilization for the KV cache).
- `max_model_len`: the tiny model's `model.max_length`; a pretrained model's `engine.max_model_len`
  (the longest context a row reaches), else vLLM takes the model's whole context window and refuses
  to start when its KV cache cannot hold one such sequence (Qwen3-8B: 40960 tokens, 5.6 GiB).
- Sleep mode (`engine.sleep`, CUDA only: vLLM refuses it on other platforms): `enable_sleep_mode` at
  start; the engine sleeps at level 1 (weights to host memory, KV cache dropped) during the reference
  pass and the update, and wakes before it syncs or generates (`VLLMEngine.release` / `_wake`).
"""

from __future__ import annotations

from typing import Any

CPU_KV_CACHE_DEFAULT = 256 << 20  # the CPU build otherwise reserves a fraction of all memory
SLEEP_LEVEL = 1  # weights offloaded to host memory and restored in place; KV cache discarded


def lora_rank_bucket(rank: int) -> int:
    """vLLM accepts max_lora_rank from a fixed set of sizes."""
    for r in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if rank <= r:
            return r
    return rank


def max_model_len(cfg: Any) -> int | None:
    """The context vLLM is sized for: the tiny model's length, else `engine.max_model_len` (None: the
    model's own)."""
    return int(cfg.model.max_length) if cfg.model.kind == "tiny" else cfg.engine.max_model_len


def sleeps(cfg: Any, on_cpu: bool) -> bool:
    return bool(cfg.engine.sleep) and not on_cpu


def llm_kwargs(cfg: Any, model_dir: str, on_cpu: bool, adapters: int) -> dict[str, Any]:
    """`vllm.LLM(**kwargs)` for this run (without the external launcher's settings of several ranks)."""
    e, m = cfg.engine, cfg.model
    kwargs: dict[str, Any] = dict(
        model=model_dir, tokenizer=model_dir,
        dtype="bfloat16" if cfg.trainer.precision == "bf16" else "float32",
        seed=cfg.seed, enforce_eager=e.enforce_eager, gpu_memory_utilization=e.gpu_memory_utilization,
        logprobs_mode="processed_logprobs", enable_prefix_caching=True,
        generation_config="vllm",  # no sampling defaults (top_k, penalties) from the model's files
    )
    kv = e.kv_cache_memory_bytes
    if kv is None and on_cpu:
        kv = CPU_KV_CACHE_DEFAULT
    if kv is not None:
        kwargs["kv_cache_memory_bytes"] = kv
    length = max_model_len(cfg)
    if length is not None:
        kwargs["max_model_len"] = length
    if sleeps(cfg, on_cpu):
        kwargs["enable_sleep_mode"] = True
    if adapters:
        kwargs.update(enable_lora=True, max_lora_rank=lora_rank_bucket(m.lora_rank),
                      max_loras=adapters, max_cpu_loras=2 * adapters)
    return kwargs
