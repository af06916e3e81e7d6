"""The device check's memory probe (scripts/device_check.py, item `memory`; CUDA only): a random-initialised
model of a paper shape in bf16 with LoRA on its seven linear layers, its weights and the activation peak of
one update (forward under bf16 autocast, the scoring's float32 log-softmax, backward) with and without
gradient checkpointing, against `experiments.plan_memory`. Not yet run on a GPU."""

from __future__ import annotations

from typing import Any


def _lora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    model.requires_grad_(False)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    return get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=targets))


def _probe(model: Any, ids: Any, checkpointing: bool) -> int:
    """Peak bytes above the resting state of one forward + backward (the update's scoring and loss)."""
    import torch

    base = model.get_base_model()
    if checkpointing:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        from transformers.modeling_layers import GradientCheckpointingLayer

        for m in model.modules():
            if isinstance(m, GradientCheckpointingLayer):
                m.train()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    resting = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=ids, logits_to_keep=ids.size(1)).logits
    z = logits.float()
    logp = z.gather(-1, ids[..., None]).squeeze(-1) - torch.logsumexp(z, -1)
    (-logp.mean()).backward()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - resting
    del logits, z, logp
    model.zero_grad(set_to_none=True)
    if checkpointing:
        base.gradient_checkpointing_disable()
        model.eval()
    return peak


def check_memory(
    budget: float, tolerance: float = 0.15, shape_id: str = "Qwen/Qwen3-8B", rows: int = 1, tokens: int = 8192
) -> tuple[str, str]:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    from experiments.plan_memory import SHAPES, activation_bytes, param_count

    if not torch.cuda.is_available():
        return "skipped", "no CUDA"
    s = SHAPES[shape_id]
    kw: dict[str, Any] = dict(
        vocab_size=s.vocab,
        hidden_size=s.hidden,
        intermediate_size=s.intermediate,
        num_hidden_layers=s.layers,
        num_attention_heads=s.heads,
        num_key_value_heads=s.kv_heads,
        head_dim=s.head_dim,
        tie_word_embeddings=s.tied,
        attn_implementation="sdpa",
    )
    before = torch.cuda.memory_allocated()
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = Qwen3ForCausalLM(Qwen3Config(**kw)) if s.qk_norm else LlamaForCausalLM(LlamaConfig(**kw))
    finally:
        torch.set_default_dtype(default)
    weights = torch.cuda.memory_allocated() - before
    model = _lora(model).eval()
    free = torch.cuda.mem_get_info()[0]
    lines, ok = [f"weights {weights / 1e9:.1f} GB vs plan {2 * param_count(s) / 1e9:.1f} GB"], True
    ok &= abs(weights - 2 * param_count(s)) <= tolerance * 2 * param_count(s)
    for checkpointing in (True, False):
        n = tokens  # without checkpointing: as many tokens as the plan says fit in 90% of what is free
        while activation_bytes(s, rows * n, rows * n, 16, checkpointing) > 0.9 * free and n > 256:
            n //= 2
        ids = torch.randint(0, s.vocab, (rows, n), device="cuda")
        measured = _probe(model, ids, checkpointing)
        plan = activation_bytes(s, rows * n, rows * n, 16, checkpointing)
        within = abs(measured - plan) <= tolerance * plan
        ok &= within
        lines.append(
            f"checkpointing {'on' if checkpointing else 'off'}, {rows}x{n} tokens: {measured / 1e9:.2f} GB "
            f"vs plan {plan / 1e9:.2f} GB ({'within' if within else 'OUTSIDE'} 15%)"
        )
    del model
    torch.cuda.empty_cache()
    return ("pass" if ok else "FAIL"), f"{shape_id}: " + "; ".join(lines)
