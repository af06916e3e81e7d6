"""A lean decode path for Qwen3- and Llama-style models: the HF engine's fast path on CPU.

Per generated token, HF's forward walks a module tree (peft's LoRA wrappers around every linear
layer, mask builders, a DynamicCache that concatenates keys and values each step). Here one
adapter's LoRA delta is merged into a copy of each weight once per `generate` call (the base
weights are never touched), keys and values go into buffers preallocated for the whole
generation, and a token's forward is a flat sequence of tensor ops. The arithmetic is HF's own
(the same RMSNorm, rotary tables and SDPA), so log-probabilities equal what the trainer recomputes
through HF's forward (to float32 rounding: merging reorders one sum).

Models outside this shape (other attention or RoPE types, sliding windows, biases on MLPs) use
HF's forward (`FastDecoder.supports` says which).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED = ("Qwen3ForCausalLM", "LlamaForCausalLM")


def _base(model: Any) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _linear(module: Any, adapter: str | None) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Weight (with `adapter`'s LoRA delta merged in) and bias of a plain or LoRA-wrapped linear."""
    if hasattr(module, "base_layer"):
        weight, bias = module.base_layer.weight, module.base_layer.bias
        if adapter is not None and adapter in module.lora_A:
            weight = weight + module.get_delta_weight(adapter).to(weight.dtype)
        return weight, bias
    return module.weight, module.bias


@dataclass
class _Layer:
    ln_in: torch.Tensor
    ln_post: torch.Tensor
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    qkv: torch.Tensor  # the q, k and v projections stacked: one matmul
    qkv_bias: torch.Tensor | None
    o: tuple[torch.Tensor, torch.Tensor | None]
    gate_up: torch.Tensor  # gate and up projections stacked
    down: torch.Tensor


class FastDecoder:
    """One generation's worth of merged weights and KV buffers for `rows` sequences."""

    @staticmethod
    def supports(model: Any) -> bool:
        base = _base(model)
        cfg = base.config
        if type(base).__name__ not in SUPPORTED or getattr(cfg, "hidden_act", "silu") != "silu":
            return False
        rope = getattr(base.model, "rotary_emb", None)
        if rope is None or getattr(rope, "rope_type", None) != "default" or getattr(cfg, "mlp_bias", False):
            return False
        layer_types = getattr(cfg, "layer_types", None) or []
        return all(t == "full_attention" for t in layer_types) and not getattr(cfg, "use_sliding_window", False)

    def __init__(self, model: Any, adapter: str | None, rows: int, max_len: int):
        base = _base(model)
        cfg = base.config
        self.eps = cfg.rms_norm_eps
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scaling = self.head_dim**-0.5
        use = adapter if hasattr(model, "get_base_model") else None
        self.layers = []
        for layer in base.model.layers:
            att, mlp = layer.self_attn, layer.mlp
            qkv = [_linear(att.q_proj, use), _linear(att.k_proj, use), _linear(att.v_proj, use)]
            biases = [b if b is not None else torch.zeros(w.size(0), dtype=w.dtype) for w, b in qkv]
            self.layers.append(_Layer(
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                att.q_norm.weight if hasattr(att, "q_norm") else None, att.k_norm.weight if hasattr(att, "k_norm") else None,
                torch.cat([w for w, _ in qkv]), torch.cat(biases) if any(b is not None for _, b in qkv) else None,
                _linear(att.o_proj, use), torch.cat([_linear(mlp.gate_proj, use)[0], _linear(mlp.up_proj, use)[0]]),
                _linear(mlp.down_proj, use)[0]))
        self.split = [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim]
        self.embed = base.model.embed_tokens.weight
        self.norm = base.model.norm.weight
        self.head, self.head_bias = _linear(base.lm_head, use)
        rope = base.model.rotary_emb
        pos_L = torch.arange(max_len, dtype=torch.float32)
        freqs_L_D = pos_L[:, None] * rope.inv_freq.float()[None, :]
        emb_L_D = torch.cat((freqs_L_D, freqs_L_D), dim=-1)
        self.cos_L_D, self.sin_L_D = emb_L_D.cos() * rope.attention_scaling, emb_L_D.sin() * rope.attention_scaling
        dtype = self.embed.dtype
        self.k_cache = [torch.zeros(rows, self.kv_heads, max_len, self.head_dim, dtype=dtype) for _ in self.layers]
        self.v_cache = [torch.zeros(rows, self.kv_heads, max_len, self.head_dim, dtype=dtype) for _ in self.layers]
        self.keys_B_L = torch.zeros(rows, max_len, dtype=torch.bool)  # which cache columns hold real tokens
        self.length = 0

    # ---- the arithmetic, as HF's Qwen3 / Llama modules do it ----------------------------------------
    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return w * x.to(dtype)

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), dim=-1) * sin

    def _forward(self, ids_B_T: torch.Tensor, pos_B_T: torch.Tensor, mask_B_1_T_S: torch.Tensor) -> torch.Tensor:
        """Hidden states of the last position after writing T new tokens at cache columns [length, length + T)."""
        b, t = ids_B_T.shape
        start, end = self.length, self.length + t
        x = F.embedding(ids_B_T, self.embed)
        cos = self.cos_L_D[pos_B_T].to(x.dtype)[:, None]  # B x 1 x T x D
        sin = self.sin_L_D[pos_B_T].to(x.dtype)[:, None]
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer.ln_in)
            q, k, v = F.linear(h, layer.qkv, layer.qkv_bias).split(self.split, dim=-1)
            q = q.view(b, t, self.heads, self.head_dim)
            k = k.view(b, t, self.kv_heads, self.head_dim)
            v = v.reshape(b, t, self.kv_heads, self.head_dim)
            if layer.q_norm is not None:
                q, k = self._rms(q, layer.q_norm), self._rms(k, layer.k_norm)  # type: ignore[arg-type]
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            self.k_cache[i][:, :, start:end] = k
            self.v_cache[i][:, :, start:end] = v
            att = self._attend(q, self.k_cache[i][:, :, :end], self.v_cache[i][:, :, :end], mask_B_1_T_S)
            x = x + F.linear(att.transpose(1, 2).reshape(b, t, -1), *layer.o)
            h = self._rms(x, layer.ln_post)
            gate, up = F.linear(h, layer.gate_up).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, layer.down)
        self.length = end
        return self._rms(x[:, -1], self.norm)

    def _attend(self, q_B_H_T_D: torch.Tensor, k_B_K_S_D: torch.Tensor, v_B_K_S_D: torch.Tensor,
                mask_B_1_T_S: torch.Tensor) -> torch.Tensor:
        """softmax(q k^T * scale, masked) v, with the query heads of one KV head in one matmul.

        For these sizes (a handful of keys, tens of heads) plain matmuls beat SDPA's CPU kernel,
        whose per-head blocking dominates; the arithmetic is the same.
        """
        b, h, t, d = q_B_H_T_D.shape
        kv = k_B_K_S_D.size(1)
        q = q_B_H_T_D.reshape(b, kv, (h // kv) * t, d)
        scores = torch.matmul(q, k_B_K_S_D.transpose(-1, -2)) * self.scaling  # B x K x (G*T) x S
        scores = scores.view(b, kv, h // kv, t, -1).masked_fill(~mask_B_1_T_S[:, :, None], float("-inf"))
        probs = torch.softmax(scores, dim=-1).view(b, kv, (h // kv) * t, -1).to(v_B_K_S_D.dtype)
        return torch.matmul(probs, v_B_K_S_D).view(b, h, t, d)

    def _logits(self, hidden_B_H: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden_B_H, self.head, self.head_bias).float()

    # ---- the engine's calls ---------------------------------------------------------------------------
    def prefill(self, ids_B_L: torch.Tensor, mask_B_L: torch.Tensor, pos_B_L: torch.Tensor) -> torch.Tensor:
        """Logits (float32) of the next token after left-padded prompts."""
        n = ids_B_L.size(1)
        self.keys_B_L[:, :n] = mask_B_L.bool()
        causal_L_L = torch.ones(n, n, dtype=torch.bool).tril()
        # a padding query attends to itself only, so no row of the mask is empty (no NaN)
        mask = (causal_L_L[None] & self.keys_B_L[:, None, :n]) | torch.eye(n, dtype=torch.bool)[None]
        return self._logits(self._forward(ids_B_L, pos_B_L, mask[:, None]))

    def step(self, tok_B: torch.Tensor, pos_B: torch.Tensor) -> torch.Tensor:
        """Logits (float32) after appending one token to every row."""
        self.keys_B_L[:, self.length] = True
        mask = self.keys_B_L[:, None, None, : self.length + 1]
        return self._logits(self._forward(tok_B[:, None], pos_B[:, None], mask))

    def select(self, keep_B: torch.Tensor) -> None:
        """Keep only these rows (finished rows leave the batch)."""
        self.k_cache = [c[keep_B] for c in self.k_cache]
        self.v_cache = [c[keep_B] for c in self.v_cache]
        self.keys_B_L = self.keys_B_L[keep_B]
