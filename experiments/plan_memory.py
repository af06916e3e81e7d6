"""The memory plan of a GPU run, per GPU: does each method's paper scale fit, and which knob to turn if not.

    python -m experiments.plan_memory                          # every method's paper scales, 80 and 141 GB
    python -m experiments.plan_memory --method grpo --gpu-gb 80 trainer.micro_batch_rows=2
    make plan-memory METHOD=grpo GPU_GB=80 ARGS="..."

Per GPU (one rank: each rank holds a whole model, LoRA on a frozen base, its own colocated vLLM):

- weights: the frozen base in bf16 (`common.device.base_dtype`), 2 bytes a parameter (`param_count`);
- LoRA + optimizer: each trainable adapter's float32 weights, gradients and AdamW's two moments
  (16 bytes a parameter), plus the bf16 copies autocast keeps (2 bytes);
- activations of one micro-batch (the update's forward and backward; the reference pass is smaller):
  `trainer.micro_batch_tokens` when set, else `trainer.micro_batch_rows` rows (0: the rank's whole
  minibatch) of `engine.max_model_len` tokens. Saved per token and layer (bf16 autocast, LoRA on the
  seven linear layers, measured with torch's saved-tensor hooks on random Llama / Qwen3 models on CPU:
  tests/gpu/test_plan_memory.py): 18h + 8I + 6Hd + 4Kd + 14r bytes (Qwen3's q/k norms: 10Hd + 8Kd),
  h hidden, I MLP, Hd = heads x head_dim, Kd = kv heads x head_dim, r the LoRA rank. With gradient
  checkpointing a layer keeps its bf16 input (2h) and one layer's activations live again in the
  backward. The LM head runs over every position after a row's first action (all of them here, the
  worst case) and costs 16V bytes a position (bf16 logits, their float32 copy and temperature-scaled
  copy, the backward's float32 gradient);
- vLLM: `engine.gpu_memory_utilization` of the GPU (its weights, its activations, the KV cache); the
  KV cache is what is left after its bf16 weights and ~2 GiB of its own activations and CUDA graphs,
  2 x layers x kv heads x head_dim x 2 bytes a token; at least one `max_model_len` sequence must fit;
- CUDA context and allocator slack: 2 GiB.

Two phases must fit: generation (trainer weights + LoRA state + vLLM's share) and the update
(trainer weights + LoRA state + activations + vLLM asleep: 1 GiB kept, `engine.sleep`; awake: its
whole share). The formulas are exact for parameters (tested on Llama-3-8B's and Qwen3-8B's published
counts) and approximate for activations: the GPU's kernels (flash attention, fused norms) save other
tensors than the CPU's; scripts/device_check.py measures one update against this plan (within 15%).
That check has not run on a GPU yet.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GiB = 1 << 30
CONTEXT_BYTES = 2 * GiB  # CUDA context, cuBLAS workspaces, allocator fragmentation
VLLM_OWN_BYTES = 2 * GiB  # vLLM's profiled activations, sampler and CUDA graphs besides weights and KV cache
VLLM_ASLEEP_BYTES = 1 * GiB  # what a level-1 sleeping vLLM keeps on the GPU
GPUS_GB = (80, 141)


@dataclass(frozen=True)
class Shape:
    """A dense decoder's shape (a Hugging Face config's fields)."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool = False
    qkv_bias: bool = False  # Qwen2
    qk_norm: bool = False  # Qwen3
    context: int = 4096


# The papers' models, from their published config.json files.
SHAPES: dict[str, Shape] = {
    "deepseek-ai/deepseek-math-7b-instruct": Shape(102400, 4096, 30, 32, 32, 128, 11008, context=4096),
    "Qwen/Qwen2.5-7B-Instruct": Shape(152064, 3584, 28, 28, 4, 128, 18944, qkv_bias=True, context=32768),
    "Qwen/Qwen3-4B": Shape(151936, 2560, 36, 32, 8, 128, 9728, tied=True, qk_norm=True, context=40960),
    "Qwen/Qwen3-4B-Base": Shape(151936, 2560, 36, 32, 8, 128, 9728, tied=True, qk_norm=True, context=32768),
    "Qwen/Qwen3-8B": Shape(151936, 4096, 36, 32, 8, 128, 12288, qk_norm=True, context=40960),
    "Qwen/Qwen3-14B": Shape(151936, 5120, 40, 40, 8, 128, 17408, qk_norm=True, context=40960),
    "meta-llama/Meta-Llama-3-8B": Shape(128256, 4096, 32, 32, 8, 128, 14336, context=8192),
}


def shape_from_config(config: dict[str, Any]) -> Shape | None:
    """A dense Llama / Qwen2 / Qwen3 config.json as a Shape; None for another architecture."""
    kind = config.get("model_type")
    if kind not in ("llama", "qwen2", "qwen3", "mistral"):
        return None
    heads = config["num_attention_heads"]
    return Shape(config["vocab_size"], config["hidden_size"], config["num_hidden_layers"], heads,
                 config.get("num_key_value_heads") or heads,
                 config.get("head_dim") or config["hidden_size"] // heads, config["intermediate_size"],
                 bool(config.get("tie_word_embeddings", False)), kind == "qwen2", kind == "qwen3",
                 config.get("max_position_embeddings", 4096))


def shape_of(cfg: Any) -> Shape | None:
    """The run's model shape: its local config.json when model.path has one, else the paper's model."""
    path = Path(str(cfg.model.path or "")) / "config.json"
    if cfg.model.path and path.is_file():
        return shape_from_config(json.loads(path.read_text()))
    return SHAPES.get(str(cfg.model.hf_id))


def param_count(s: Shape) -> int:
    attn = s.hidden * (s.heads + 2 * s.kv_heads) * s.head_dim + s.heads * s.head_dim * s.hidden
    if s.qkv_bias:
        attn += (s.heads + 2 * s.kv_heads) * s.head_dim
    norms = 2 * s.hidden + (2 * s.head_dim if s.qk_norm else 0)
    layer = attn + 3 * s.hidden * s.intermediate + norms
    embeddings = s.vocab * s.hidden * (1 if s.tied else 2)
    return embeddings + s.layers * layer + s.hidden


def lora_param_count(s: Shape, rank: int, targets: list[str] | tuple[str, ...]) -> int:
    """One adapter's parameters: r x (in + out) for each targeted linear layer of each decoder layer."""
    dims = {"q_proj": (s.hidden, s.heads * s.head_dim), "k_proj": (s.hidden, s.kv_heads * s.head_dim),
            "v_proj": (s.hidden, s.kv_heads * s.head_dim), "o_proj": (s.heads * s.head_dim, s.hidden),
            "gate_proj": (s.hidden, s.intermediate), "up_proj": (s.hidden, s.intermediate),
            "down_proj": (s.intermediate, s.hidden)}
    return s.layers * sum(rank * sum(dims[t]) for t in targets if t in dims)


def kv_bytes_per_token(s: Shape) -> int:
    return 2 * s.layers * s.kv_heads * s.head_dim * 2


def layer_bytes_per_token(s: Shape, rank: int) -> int:
    """Bytes one decoder layer saves for the backward, per token (see the module docstring)."""
    hd, kd = s.heads * s.head_dim, s.kv_heads * s.head_dim
    attn = 10 * hd + 8 * kd if s.qk_norm else 6 * hd + 4 * kd
    return 18 * s.hidden + 8 * s.intermediate + attn + 14 * rank


def activation_bytes(s: Shape, tokens: int, head_tokens: int, rank: int, checkpointing: bool) -> int:
    """Peak activation bytes of one micro-batch's forward and backward."""
    layer = layer_bytes_per_token(s, rank) * tokens
    kept = s.layers * 2 * s.hidden * tokens + layer if checkpointing else s.layers * layer
    return kept + 16 * s.vocab * head_tokens


@dataclass
class Plan:
    method: str
    scale: str
    gpu_gb: float
    lines: list[str]
    fits: bool
    knob: str = ""

    def text(self) -> str:
        return "\n".join(self.lines)


def _gb(n: float) -> str:
    return f"{n / 1e9:6.1f} GB"


def micro_batch(cfg: Any, length: int) -> tuple[int, int, str]:
    """(rows, tokens) of one micro-batch on one rank, rows of `length` tokens, and how they were chosen:
    both limits apply, as in the update (`common.batch.micro_batches`): at most `trainer.micro_batch_rows`
    rows (0: the rank's whole minibatch) and at most `trainer.micro_batch_tokens` padded tokens (0: no
    limit; a row longer than it is a micro-batch of its own)."""
    t = cfg.trainer
    ranks = t.devices * t.num_nodes
    rows = t.micro_batch_rows or -(-t.tasks_per_step * t.group_size // (ranks * t.minibatches))
    how = [f"trainer.micro_batch_rows={t.micro_batch_rows}" + ("" if t.micro_batch_rows else " (all)")]
    budget = int(getattr(t, "micro_batch_tokens", 0) or 0)
    if budget and rows * length > budget:
        rows = max(1, budget // max(1, length))
        how.append(f"trainer.micro_batch_tokens={budget}")
    return rows, rows * length, ", ".join(how)


def plan(cfg: Any, gpu_gb: float, method: str = "", scale: str = "") -> Plan:
    """The memory plan of `cfg` on one GPU of `gpu_gb` GB (10^9 bytes, as GPUs are sold)."""
    out = Plan(method or cfg.method.get("name", "?"), scale or cfg.scale, gpu_gb, [], True)
    head = f"{out.method} scale={out.scale} on {gpu_gb:g} GB GPUs"
    s = shape_of(cfg)
    if cfg.trainer.steps == 0 or s is None:
        why = "no training steps" if cfg.trainer.steps == 0 else (
            f"model {cfg.model.hf_id!r} has no known dense shape (pass model.path with its config.json)")
        out.lines = [f"{head}: not planned ({why})"]
        return out
    total, t, e = gpu_gb * 1e9, cfg.trainer, cfg.engine
    weights = 2 * param_count(s)
    adapters = len({a for a in cfg.model.roles.values() if a != "scripted"} or {cfg.model.default_adapter})
    lora = adapters * lora_param_count(s, cfg.model.lora_rank, cfg.model.lora_targets)
    lora_state = lora * (16 + 2)
    length = int(e.max_model_len or s.context)
    rows, tokens, how = micro_batch(cfg, length)
    ckpt = bool(t.gradient_checkpointing)
    act = activation_bytes(s, tokens, tokens, cfg.model.lora_rank, ckpt)
    act_other = activation_bytes(s, tokens, tokens, cfg.model.lora_rank, not ckpt)
    vllm = e.name == "vllm"
    share = e.gpu_memory_utilization * total if vllm else 0.0
    kv = share - weights - VLLM_OWN_BYTES
    seqs = kv / (kv_bytes_per_token(s) * length) if vllm else 0.0
    asleep = VLLM_ASLEEP_BYTES if (vllm and e.sleep) else share
    generation = weights + lora_state + CONTEXT_BYTES + share
    update = weights + lora_state + CONTEXT_BYTES + asleep + act
    out.lines = [
        f"{head} ({param_count(s) / 1e9:.2f}B parameters, {adapters} LoRA adapter(s), "
        f"r={cfg.model.lora_rank}):",
        f"  weights (bf16)               {_gb(weights)}",
        f"  LoRA + AdamW state           {_gb(lora_state)}  ({lora / 1e6:.1f}M trainable)",
        f"  activations, one micro-batch {_gb(act)}  ({rows} rows x {length} tokens, {how}; checkpointing "
        f"{'on' if ckpt else 'off'}; {'off' if ckpt else 'on'}: {_gb(act_other).strip()})",
    ]
    if vllm:
        out.lines.append(f"  vLLM share                   {_gb(share)}  "
                         f"(gpu_memory_utilization={e.gpu_memory_utilization}: "
                         f"KV cache {_gb(max(kv, 0)).strip()}, {seqs:.1f} sequences of {length} tokens; "
                         f"{'asleep' if e.sleep else 'awake'} during the update)")
    out.lines.append(f"  peak: generation {_gb(generation).strip()}, update {_gb(update).strip()} "
                     f"of {gpu_gb:g} GB")
    fixed = weights + lora_state + CONTEXT_BYTES

    def fits_update(n_rows: int, checkpoint: bool, sleep: bool) -> bool:
        kept = VLLM_ASLEEP_BYTES if (vllm and sleep) else share
        return fixed + kept + activation_bytes(s, n_rows * length, n_rows * length, cfg.model.lora_rank,
                                               checkpoint) <= total

    whole = -(-t.tasks_per_step * t.group_size // (t.devices * t.num_nodes * t.minibatches))
    best = max((n for n in range(1, whole + 1) if fits_update(n, ckpt, bool(e.sleep))), default=0)
    if best:
        out.lines.append(f"  largest micro_batch_rows that fits: {best}")
    knob = ""
    if vllm and seqs < 1:
        knob = ("engine.gpu_memory_utilization (up) or engine.max_model_len (down): vLLM's share holds its "
                "weights "
                "but not one sequence's KV cache")
    elif generation > total:
        knob = "engine.gpu_memory_utilization (down): the trainer's weights and vLLM's share exceed the GPU"
    elif update > total:
        knob = (f"trainer.micro_batch_rows={best}" if best
                else "trainer.gradient_checkpointing=true" if not ckpt and fits_update(1, True, bool(e.sleep))
                else "engine.sleep=true" if vllm and not e.sleep and fits_update(1, ckpt, True)
                else "engine.max_model_len (down: one row does not fit) or GPUs with more memory")
        knob += f" (the update needs {_gb(update).strip()})"
    out.fits, out.knob = not knob, knob
    out.lines.append(f"  => {'fits' if out.fits else 'DOES NOT FIT; turn ' + knob}")
    return out


def check_cells(cells: list[Any]) -> str | None:
    """A paper-scale replication's memory check (`experiments.replicate`, dry run included): print each arm's
    plan on GPUs of PLAN_GPU_GB (default 80) GB; return the refusal (naming the knob) of the first arm that
    does not fit, or None."""
    import os

    from experiments.run import compose

    gpu_gb = float(os.environ.get("PLAN_GPU_GB") or 80)
    refusal = None
    for cell in {c.arm: c for c in cells if c.scale.startswith("paper")}.values():
        result = plan(compose(cell.method, cell.overrides), gpu_gb, cell.method,
                      f"{cell.scale} arm={cell.arm}")
        print(result.text(), flush=True)
        if not result.fits and refusal is None:
            refusal = (f"{cell.name} does not fit {gpu_gb:g} GB GPUs: turn {result.knob}; "
                       "python -m experiments.plan_memory prints the plan, PLAN_GPU_GB=141 plans another GPU")
    return refusal


def paper_scales(method: str) -> list[str]:
    from experiments.run import conf_dir

    return sorted(p.stem for p in (conf_dir(method) / "scale").glob("paper*.yaml"))


def main(argv: list[str] | None = None) -> int:
    from experiments.run import compose
    from replications import METHODS

    p = argparse.ArgumentParser(prog="python -m experiments.plan_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", default=None, help="one method (default: all)")
    p.add_argument("--scale", default=None, help="one paper scale (default: every paper*.yaml)")
    p.add_argument("--gpu-gb", default=",".join(map(str, GPUS_GB)), help="GPU sizes in GB, e.g. 80,141")
    p.add_argument("overrides", nargs="*", help="Hydra overrides, e.g. trainer.micro_batch_rows=2")
    args = p.parse_args(argv)
    refused = 0
    for method in [args.method] if args.method else sorted(m for m in METHODS if not m.startswith("_")):
        for scale in [args.scale] if args.scale else paper_scales(method):
            cfg = compose(method, (f"scale={scale}", *args.overrides))
            for gb in (float(g) for g in args.gpu_gb.split(",")):
                result = plan(cfg, gb, method, scale)
                print(result.text() + "\n")
                refused += not result.fits
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
