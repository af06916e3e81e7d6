"""A lean forward for Qwen3- and Llama-style models: the HF engine's decode path and the trainer's scoring.

Per token, HF's forward walks a module tree (peft's LoRA wrappers around every linear layer, mask
builders, a DynamicCache that concatenates keys and values each step). Here a forward is a flat
sequence of tensor ops: the q, k and v projections are one matmul, the gate and up projections
another, and attention is two matmuls (SDPA's CPU kernel is slow at these sizes). The arithmetic
is HF's own (the same RMSNorm, rotary tables and softmax), so log-probabilities equal what HF's
forward gives, to float32 rounding. The stacked projections and a layer's weights are
`common.engines.fast_weights`'s.

- `FastDecoder` (generation, no gradients): one adapter's LoRA delta is merged into a copy of each
  weight once per `generate` call (the base weights are never touched), and keys and values go
  into buffers preallocated for the whole generation.
- `FastScorer` (the trainer's update and reference passes): LoRA stays unmerged, x W^T + s (x A^T) B^T,
  with the adapters' own parameters, so gradients reach them as through peft; the stacked base
  weights are built once per model and reused while they do not change.

Under bf16 autocast, autocast casts every float32 weight to bf16 on every call (it caches casts
only of leaf tensors that require grad, which frozen or merged weights are not). Both paths
therefore hold their weights (and the decoder its KV buffers) in the autocast dtype from the start:
the same cast, done once, so the arithmetic is what autocast gives (on SmolLM2-135M a rollout's 15
decode steps took 1.97 s instead of 2.35). LoRA's A and B stay the trainable float32 parameters.

It is a CPU path (on a GPU, HF's forward with its fused attention kernels runs instead). Models
outside this shape (other attention or RoPE types, sliding windows, biases on MLPs, LoRA
variants such as DoRA, LoRA dropout while training) use HF's forward (`supports` says which).
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F

from common.engines.fast_weights import (
    _base,
    _cast,
    _groups,
    _Layer,
    _lora_layers,
    _plain,
    _Proj,
    _stack,
    _stack_bias,
)
from common.engines.kv_reuse import place_prefixes

SUPPORTED = ("Qwen3ForCausalLM", "LlamaForCausalLM")


def autocast_dtype() -> torch.dtype | None:
    """The dtype CPU autocast casts matmul inputs to now, or None when it is off."""
    return torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else None


# Stacked base weights per model and dtype (the LM head's under "head"), reused while every
# constituent tensor is unchanged (same storage and version): the trainer scores with frozen base
# weights many times per step.
_BASE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _stacked_base(base: Any,
                  dtype: torch.dtype | None) -> list[dict[str, tuple[torch.Tensor, torch.Tensor | None]]]:
    groups = [_groups(layer) for layer in base.model.layers] + [{"head": [base.lm_head]}]
    key = tuple((w.data_ptr(), w._version) for g in groups for ms in g.values() for w, _ in map(_plain, ms))
    per_dtype = _BASE_CACHE.setdefault(base, {})
    hit = per_dtype.get(dtype)
    if hit is not None and hit[0] == key:
        return hit[1]
    if any(k != key for k, _ in per_dtype.values()):
        per_dtype.clear()  # the weights changed: every dtype's copy is stale
    with torch.no_grad():
        stacked = [{name: (_cast(_stack([_plain(m)[0] for m in ms]), dtype),
                           _cast(_stack_bias([_plain(m) for m in ms]), dtype))
                    for name, ms in g.items()} for g in groups]
    per_dtype[dtype] = (key, stacked)
    return stacked


class _FastModel:
    """The model's weights as flat tensors, and its forward as plain tensor ops."""

    @staticmethod
    def supports(model: Any) -> bool:
        return _FastModel._supports(model, _lora_layers(model))

    @staticmethod
    def _supports(model: Any, lora_layers: list[Any]) -> bool:
        base = _base(model)
        cfg = base.config
        if base.model.embed_tokens.weight.device.type != "cpu":  # a CPU path: on GPUs HF's fused kernels win
            return False
        if type(base).__name__ not in SUPPORTED or getattr(cfg, "hidden_act", "silu") != "silu":
            return False
        rope = getattr(base.model, "rotary_emb", None)
        if rope is None or getattr(rope, "rope_type", None) != "default" or getattr(cfg, "mlp_bias", False):
            return False
        layer_types = getattr(cfg, "layer_types", None) or []
        if any(t != "full_attention" for t in layer_types) or getattr(cfg, "use_sliding_window", False):
            return False
        # plain LoRA only: an adapter already merged into the base, or DoRA, is not x W^T + s (x A^T) B^T
        return not any(getattr(m, "merged", False) or any(getattr(m, "use_dora", {}).values())
                       for m in lora_layers)

    def __init__(self, model: Any, adapter: str | None, max_len: int, merge: bool):
        base = _base(model)
        cfg = base.config
        self.eps = cfg.rms_norm_eps
        self.heads, self.kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scaling = self.head_dim**-0.5
        use = adapter if hasattr(model, "get_base_model") else None
        self.dtype = autocast_dtype()  # weights held in the dtype autocast would cast them to on every call
        stacked = None if merge else _stacked_base(base, self.dtype)
        self.layers = []
        for i, layer in enumerate(base.model.layers):
            att = layer.self_attn
            projs = {name: _Proj(ms, use, merge, None if stacked is None else stacked[i][name], self.dtype)
                     for name, ms in _groups(layer).items()}
            self.layers.append(_Layer(
                layer.input_layernorm.weight, layer.post_attention_layernorm.weight,
                att.q_norm.weight if hasattr(att, "q_norm") else None,
                att.k_norm.weight if hasattr(att, "k_norm") else None,
                **projs))
        self.split = [self.heads * self.head_dim, self.kv_heads * self.head_dim,
                      self.kv_heads * self.head_dim]
        self.embed = base.model.embed_tokens.weight
        self.norm = base.model.norm.weight
        self.head = _Proj([base.lm_head], use, merge, None if stacked is None else stacked[-1]["head"],
                          self.dtype)
        rope = base.model.rotary_emb
        pos_L = torch.arange(max_len, dtype=torch.float32)
        freqs_L_D = pos_L[:, None] * rope.inv_freq.float()[None, :]
        emb_L_D = torch.cat((freqs_L_D, freqs_L_D), dim=-1)
        self.cos_L_D, self.sin_L_D = (emb_L_D.cos() * rope.attention_scaling,
                                      emb_L_D.sin() * rope.attention_scaling)

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

    def _keys_values(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values layer i attends to, given this forward's new ones."""
        return k, v

    def _forward(self, ids_B_T: torch.Tensor, pos_B_T: torch.Tensor, mask_B_1_T_S: torch.Tensor,
                 kv_only: bool = False) -> torch.Tensor:
        """Hidden states (before the final norm) of T new tokens at positions `pos_B_T`. With
        `kv_only` the last layer stops once its keys and values are made (they are what is wanted)."""
        b, t = ids_B_T.shape
        x = F.embedding(ids_B_T, self.embed)
        cos = self.cos_L_D[pos_B_T].to(x.dtype)[:, None]  # B x 1 x T x D
        sin = self.sin_L_D[pos_B_T].to(x.dtype)[:, None]
        for i, layer in enumerate(self.layers):
            h = self._rms(x, layer.ln_in)
            q, k, v = layer.qkv(h).split(self.split, dim=-1)
            q = q.view(b, t, self.heads, self.head_dim)
            k = k.view(b, t, self.kv_heads, self.head_dim)
            v = v.reshape(b, t, self.kv_heads, self.head_dim)
            if layer.q_norm is not None:
                q, k = self._rms(q, layer.q_norm), self._rms(k, layer.k_norm)  # type: ignore[arg-type]
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            keys, values = self._keys_values(i, k, v)
            if kv_only and i == len(self.layers) - 1:
                break
            att = self._attend(q, keys, values, mask_B_1_T_S)
            x = x + layer.o(att.transpose(1, 2).reshape(b, t, -1))
            h = self._rms(x, layer.ln_post)
            gate, up = layer.gate_up(h).chunk(2, dim=-1)
            x = x + layer.down(F.silu(gate) * up)
        return x

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

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head(self._rms(hidden, self.norm))

    @staticmethod
    def _prompt_mask(keys_B_L: torch.Tensor) -> torch.Tensor:
        """Causal mask over left-padded rows (B x 1 x L x L); a padding query attends to itself only,
        so no row of the mask is empty (no NaN)."""
        n = keys_B_L.size(1)
        causal_L_L = torch.ones(n, n, dtype=torch.bool).tril()
        return ((causal_L_L[None] & keys_B_L[:, None, :]) | torch.eye(n, dtype=torch.bool)[None])[:, None]


class FastDecoder(_FastModel):
    """One generation's worth of merged weights and KV buffers for `rows` sequences."""

    def __init__(self, model: Any, adapter: str | None, rows: int, max_len: int):
        super().__init__(model, adapter, max_len, merge=True)
        dtype = self.dtype or self.embed.dtype  # keys and values as the projections give them
        self.k_cache = [torch.zeros(rows, self.kv_heads, max_len, self.head_dim, dtype=dtype)
                        for _ in self.layers]
        self.v_cache = [torch.zeros(rows, self.kv_heads, max_len, self.head_dim, dtype=dtype)
                        for _ in self.layers]
        self.keys_B_L = torch.zeros(rows, max_len, dtype=torch.bool)  # which cache columns hold real tokens
        self.length = 0
        # `select` copies the caches into these and keeps the old ones as the next spares
        self._spare: list[torch.Tensor] = []

    def _keys_values(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start, end = self.length, self.length + k.size(2)
        self.k_cache[i][:, :, start:end] = k
        self.v_cache[i][:, :, start:end] = v
        return self.k_cache[i][:, :, :end], self.v_cache[i][:, :, :end]

    def _last_logits(self, ids_B_T: torch.Tensor, pos_B_T: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = self._forward(ids_B_T, pos_B_T, mask)
        self.length += ids_B_T.size(1)
        return self._logits(x[:, -1]).float()

    def prefill(self, ids_B_L: torch.Tensor, mask_B_L: torch.Tensor, pos_B_L: torch.Tensor) -> torch.Tensor:
        """Logits (float32) of the next token after left-padded prompts."""
        n = ids_B_L.size(1)
        self.keys_B_L[:, :n] = mask_B_L.bool()
        return self._last_logits(ids_B_L, pos_B_L, self._prompt_mask(self.keys_B_L[:, :n]))

    def prefill_after(self, hits: list[Any], width: int, ids_B_S: torch.Tensor, mask_B_S: torch.Tensor,
                      pos_B_S: torch.Tensor) -> torch.Tensor:
        """Logits (float32) of the next token after cached prefixes and left-padded suffixes.

        Row b's cached keys and values (`hits[b]`, a `kv_reuse.Hit`, or None) fill the first `width`
        columns right-aligned; its suffix tokens (at positions `pos_B_S`, after its prefix) attend
        to them and, causally, to each other: per token the arithmetic of a whole-prompt prefill.
        """
        self.keys_B_L[:, :width] = place_prefixes(hits, self.k_cache, self.v_cache, width)
        self.length = width
        s = ids_B_S.size(1)
        self.keys_B_L[:, width : width + s] = mask_B_S.bool()
        cached_B_1_S_C = self.keys_B_L[:, None, None, :width].expand(-1, 1, s, -1)
        mask = torch.cat((cached_B_1_S_C, self._prompt_mask(self.keys_B_L[:, width : width + s])), dim=-1)
        return self._last_logits(ids_B_S, pos_B_S, mask)

    def export(self, row: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Row `row`'s keys and values over the columns that hold its tokens (copies, in order)."""
        cols = self.keys_B_L[row, : self.length].nonzero().squeeze(-1)
        return ([k[row].index_select(1, cols) for k in self.k_cache],
                [v[row].index_select(1, cols) for v in self.v_cache])

    def step(self, tok_B: torch.Tensor, pos_B: torch.Tensor) -> torch.Tensor:
        """Logits (float32) after appending one token to every row."""
        self.keys_B_L[:, self.length] = True
        mask = self.keys_B_L[:, None, None, : self.length + 1]
        return self._last_logits(tok_B[:, None], pos_B[:, None], mask)

    def select(self, keep_B: torch.Tensor) -> None:
        """Keep these rows, in this order (finished rows leave the batch; a repeated row is copied).

        The rows are gathered into spare buffers allocated once (a row count above their capacity
        allocates larger ones) and the old buffers become the spares: no allocation per call."""
        m, caches = keep_B.numel(), self.k_cache + self.v_cache
        if len(self._spare) != len(caches) or self._spare[0].size(0) < m:
            self._spare = [c.new_empty((m, *c.shape[1:])) for c in caches]
        taken = [torch.index_select(c, 0, keep_B, out=spare[:m])
                 for c, spare in zip(caches, self._spare, strict=True)]
        self._spare = [c if c._base is None else c._base for c in caches]
        half = len(self.layers)
        self.k_cache, self.v_cache = taken[:half], taken[half:]
        self.keys_B_L = self.keys_B_L[keep_B]


class FastScorer(_FastModel):
    """A differentiable forward over left-padded rows with the model's active adapter (or none).

    The adapter is read from peft's own state, exactly as its forward would use it: none inside
    `disable_adapter()`, else the active one. Gradients flow to the adapters' parameters; the
    frozen base weights get none (they need none: requires_grad is off).
    """

    @staticmethod
    def supports(model: Any) -> bool:
        lora_layers = _lora_layers(model)  # one walk over the modules for every check
        if not _FastModel._supports(model, lora_layers):
            return False
        base = _base(model)
        if any(p.requires_grad for n, p in base.named_parameters() if "lora_" not in n):
            return False  # the stacked base weights are copies outside autograd: for frozen bases only
        for m in lora_layers:
            if m.training and any(not isinstance(d, torch.nn.Identity) for d in m.lora_dropout.values()):
                return False
            if len(getattr(m, "active_adapters", [])) > 1:
                return False
        return True

    @staticmethod
    def adapter_in_use(model: Any) -> str | None:
        for m in _lora_layers(model):
            return None if m.disable_adapters else m.active_adapters[0]
        return None

    def __init__(self, model: Any, max_len: int):
        super().__init__(model, self.adapter_in_use(model), max_len, merge=False)
        # a prefix's keys and values, per layer
        self._kv: list[tuple[torch.Tensor, torch.Tensor]] | None = None
        self._capture = False

    def _keys_values(self, i: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self._capture:
            assert self._kv is not None
            self._kv.append((k, v))
        elif self._kv is not None:
            return torch.cat((self._kv[i][0], k), dim=2), torch.cat((self._kv[i][1], v), dim=2)
        return k, v

    def logits_at(self, ids_B_L: torch.Tensor, mask_B_L: torch.Tensor, pos_B_L: torch.Tensor,
                  at_B_T: torch.Tensor) -> torch.Tensor:
        """Logits (B x T x V) at the positions `at_B_T` of each row: the hidden states are gathered
        first, so the final norm and the LM head run on those positions only."""
        x_B_L_D = self._forward(ids_B_L, pos_B_L, self._prompt_mask(mask_B_L.bool()))
        return self._logits(x_B_L_D.gather(1, at_B_T[..., None].expand(-1, -1, x_B_L_D.size(-1))))

    def logits_shared(self, prefix_ids_U_P: torch.Tensor, prefix_mask_U_P: torch.Tensor,
                      owner_B: torch.Tensor, suffix_ids_B_S: torch.Tensor,
                      at_B_T: torch.Tensor) -> torch.Tensor:
        """Logits (B x T x V) at positions `at_B_T` of B rows that share prefixes: row b is the prefix
        `owner_B[b]` (left-padded, U distinct ones) followed by its own suffix (right-padded).

        Each distinct prefix runs through the layers once; its keys and values (with their autograd
        history) are copied to the rows that own it, whose suffix tokens attend to them and then to
        their own, causally. Per token the arithmetic is the full forward's (same positions, same
        keys; padding masked), so log-probs and gradients equal scoring the whole rows, to rounding.
        A GRPO group's rows share their prompt: it is scored once instead of once per completion.
        """
        prefix_keys_U_P = prefix_mask_U_P.bool()
        pos_U_P = (prefix_mask_U_P.cumsum(-1) - 1).clamp(min=0)
        self._kv, self._capture = [], True
        try:
            self._forward(prefix_ids_U_P, pos_U_P, self._prompt_mask(prefix_keys_U_P), kv_only=True)
            self._kv = [(k[owner_B], v[owner_B]) for k, v in self._kv]
            self._capture = False
            b, s = suffix_ids_B_S.shape
            pos_B_S = prefix_mask_U_P.sum(-1)[owner_B, None] + torch.arange(s, device=owner_B.device)[None]
            # only a padding slot can pass the longest row
            pos_B_S = pos_B_S.clamp(max=self.cos_L_D.size(0) - 1)
            causal_S_S = torch.ones(s, s, dtype=torch.bool, device=owner_B.device).tril()
            mask_B_1_S_PS = torch.cat((prefix_keys_U_P[owner_B][:, None, None, :].expand(b, 1, s, -1),
                                       causal_S_S[None, None].expand(b, 1, s, s)), dim=-1)
            x_B_S_D = self._forward(suffix_ids_B_S, pos_B_S, mask_B_1_S_PS)
        finally:
            self._kv, self._capture = None, False
        return self._logits(x_B_S_D.gather(1, at_B_T[..., None].expand(-1, -1, x_B_S_D.size(-1))))
