"""The lean forward's weights (common/engines/fast.py): a model's linear layers read as plain tensors
and stacked along their outputs, so that related projections are one matmul (`_Proj`: q, k and v;
gate and up), with each adapter's LoRA delta merged into a copy of the weight (decoding, no
gradients) or kept as its own low-rank term on the adapter's live parameters (scoring, so that
gradients reach them); and one decoder layer's weights (`_Layer`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _lora(module: Any, adapter: str | None) -> tuple[torch.Tensor, torch.Tensor, float] | None:
    """(A, B, scaling) of `adapter` on a LoRA-wrapped linear, or None when it has none."""
    if adapter is None or not hasattr(module, "base_layer") or adapter not in module.lora_A:
        return None
    return module.lora_A[adapter].weight, module.lora_B[adapter].weight, float(module.scaling[adapter])


def _lora_layers(model: Any) -> list[Any]:
    return [m for m in _base(model).modules() if hasattr(m, "lora_A")]


def _plain(module: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    inner = module.base_layer if hasattr(module, "base_layer") else module
    return inner.weight, inner.bias


class _Proj:
    """Linear layers stacked along their outputs: x W^T + b (+ the LoRA terms), one matmul for all.

    merge=True (no gradients): each adapter's delta s B A is added into the weight copy, held in `dtype`.
    merge=False: y = x W^T + b + (x A^T) B'^T with `base` = (W, b) the cached stacked base weights
    (`_stacked_base`), A the adapters' A matrices stacked and B' the block-diagonal of the s B, built
    from the live parameters on every construction.
    """

    def __init__(self, modules: list[Any], adapter: str | None, merge: bool, base: tuple | None = None,
                 dtype: torch.dtype | None = None):
        weights = [_plain(m) for m in modules]
        loras = [_lora(m, adapter) for m in modules]
        if merge:
            # s B A in float32 (under autocast a rank-r bf16 matmul: slower, rounded)
            with torch.autocast("cpu", enabled=False):
                merged = [w if lo is None else w + lo[1] @ lo[0] * lo[2]
                          for (w, _), lo in zip(weights, loras, strict=True)]
            self.weight = _cast(_stack(merged), dtype)
            self.bias = _cast(_stack_bias(weights), dtype)
        else:
            if base is None:
                raise ValueError("an unmerged projection takes its stacked base weights from _stacked_base")
            self.weight, self.bias = base
        self.lora: tuple[torch.Tensor, torch.Tensor] | None = None  # (stacked A, block-diagonal s B)
        if not merge and any(lo is not None for lo in loras):
            d_in = self.weight.size(1)
            like = next(lo for lo in loras if lo is not None)[0]
            a_list = [lo[0] if lo else like.new_zeros(0, d_in) for lo in loras]
            b_list = [lo[1] * lo[2] if lo else like.new_zeros(w.size(0), 0)
                      for (w, _), lo in zip(weights, loras, strict=True)]
            self.lora = (_stack(a_list), b_list[0] if len(b_list) == 1 else torch.block_diag(*b_list))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        y = F.linear(x, self.weight, self.bias)
        if self.lora is not None:
            y = y + F.linear(F.linear(x, self.lora[0]), self.lora[1])
        return y


def _cast(t: torch.Tensor | None, dtype: torch.dtype | None) -> Any:
    """`t` in `dtype` (a copy only where the dtype changes); unchanged when dtype is None."""
    return t if t is None or dtype is None else t.to(dtype)


def _stack(mats: list[torch.Tensor]) -> torch.Tensor:
    return mats[0] if len(mats) == 1 else torch.cat(mats)


def _stack_bias(weights: list[tuple[torch.Tensor, torch.Tensor | None]]) -> torch.Tensor | None:
    if all(b is None for _, b in weights):
        return None
    return torch.cat([b if b is not None else torch.zeros(w.size(0), dtype=w.dtype) for w, b in weights])


@dataclass
class _Layer:
    ln_in: torch.Tensor
    ln_post: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    qkv: _Proj  # the q, k and v projections stacked: one matmul
    o: _Proj
    gate_up: _Proj  # gate and up projections stacked
    down: _Proj


def _groups(layer: Any) -> dict[str, list[Any]]:
    att, mlp = layer.self_attn, layer.mlp
    return {"qkv": [att.q_proj, att.k_proj, att.v_proj], "o": [att.o_proj],
            "gate_up": [mlp.gate_proj, mlp.up_proj], "down": [mlp.down_proj]}
