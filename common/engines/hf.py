"""The HF engine: batched sampling with a KV cache, on CPU or GPU, from the trained module itself.

Requests are grouped by adapter (one peft adapter is active per forward), sorted by prompt length
to keep left padding small, and decoded together; finished rows leave the batch (their KV cache
rows are dropped), so a long straggler does not make the whole batch pay. A prompt sent several
times (a GRPO group's completions of one task) is prefilled once and its KV cache rows copied to
each of its rows (`share_prefill`). With `kv_reuse` (the default) a row's keys and values are kept
when it finishes, and a later prompt that extends them (the episode's next turn: the same context,
the action, the observation) prefills only its new tokens on top of them
(common/engines/kv_reuse.py): multi-turn rollouts cost what their new tokens cost, not the whole
context every turn. Log-probabilities are
those of softmax(logits / T), the distribution sampled from, in float32.

Every tensor handed to the model is on the model's device (the trainer's module, which Lightning
moves); the random uniforms come from a CPU generator and are then moved, so a seed draws the same
numbers on every device.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch
from transformers import DynamicCache

from common.engines.base import Engine, Request, Sample, SamplingParams
from common.engines.fast import FastDecoder
from common.engines.kv_reuse import Hit, PrefixStore, place_prefixes, weights_key


def kv_bytes_per_token(config: Any, element_size: int) -> int:
    """Bytes of keys and values one token of one row holds in a decoder of this config."""
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return 2 * config.num_hidden_layers * heads * head_dim * element_size


def chunks(lengths: list[int], max_rows: int, max_tokens: int) -> list[tuple[int, int]]:
    """Consecutive [start, stop) runs of rows (`lengths` ascending: each row's prompt plus new tokens) of at
    most `max_rows` rows whose padded size (rows x the longest) stays within `max_tokens`; a row alone
    over the budget is its own chunk."""
    out: list[tuple[int, int]] = []
    start = 0
    for i, n in enumerate(lengths):
        if i > start and (i - start >= max_rows or (i - start + 1) * n > max_tokens):
            out.append((start, i))
            start = i
    if lengths:
        out.append((start, len(lengths)))
    return out


class HFEngine(Engine):
    def __init__(self, policy: Any, max_batch: int = 256, bf16: bool = False, fast: bool = True,
                 share_prefill: bool = True, kv_reuse: bool = True, kv_reuse_bytes: int = 4 << 30,
                 max_batch_kv_bytes: int = 2 << 30):
        self.policy = policy
        # a forward's keys and values (rows x (longest prompt + new tokens) x bytes a token) stay under this:
        # 64 tau2 rows of ~6k tokens on SmolLM2 at fp32 need ~18 GB in one batch (they ran out of memory)
        self.max_batch_kv_bytes = max_batch_kv_bytes
        # keys and values of finished turns, reused by the episode's next turn (common/engines/kv_reuse.py)
        self.store = PrefixStore(kv_reuse_bytes) if kv_reuse else None
        self.fast = fast  # the lean decode path (common/engines/fast.py) where the model supports it
        self.share_prefill = share_prefill  # prefill each distinct prompt once
        self.tokenizer = policy.tokenizer
        self.max_batch = max_batch
        self.bf16 = bf16
        self.eos_id = self.tokenizer.eos_token_id
        self.pad_id = self.tokenizer.pad_token_id
        self._piece: dict[int, str] = {}

    def piece(self, token_id: int) -> str:
        text = self._piece.get(token_id)
        if text is None:
            text = self._piece[token_id] = self.tokenizer.decode([token_id])
        return text

    def generate(self, requests: list[Request], params: SamplingParams, seed: int) -> list[Sample]:
        gen = torch.Generator().manual_seed(seed)
        out: list[Sample | None] = [None] * len(requests)
        by_adapter: dict[str | None, list[int]] = {}
        for i, r in enumerate(requests):
            by_adapter.setdefault(r.adapter, []).append(i)
        per_token = kv_bytes_per_token(self.policy.model.config, 2 if self.bf16 else 4)
        for adapter, idxs in by_adapter.items():
            idxs = sorted(idxs, key=lambda i: (len(requests[i].prompt_ids), i))
            lengths = [len(requests[i].prompt_ids) + params.max_new_tokens for i in idxs]
            for start, stop in chunks(lengths, self.max_batch, self.max_batch_kv_bytes // max(per_token, 1)):
                chunk = idxs[start:stop]
                samples = self._generate_batch([requests[i].prompt_ids for i in chunk], adapter, params, gen)
                for i, s in zip(chunk, samples, strict=True):
                    out[i] = s
        return [s for s in out if s is not None]

    def sync(self) -> None:
        self.forget()  # new weights: every cached key and value is stale (the weights key says so too)

    def forget(self) -> None:
        if self.store is not None:
            self.store.clear()

    def _autocast(self, device: torch.device) -> contextlib.AbstractContextManager[Any]:
        """bf16 autocast on the model's device type ('cuda', 'cpu'), or nothing at full precision."""
        return torch.autocast(device.type, dtype=torch.bfloat16) if self.bf16 else contextlib.nullcontext()

    @torch.inference_mode()
    def _generate_batch(self, prompts: list[list[int]], adapter: str | None, params: SamplingParams,
                        gen: torch.Generator) -> list[Sample]:
        n = len(prompts)
        firsts: list[Any] = prompts  # the prompts prefilled, and the one each row continues
        of_row = list(range(n))
        if self.share_prefill:
            distinct: dict[tuple[int, ...], int] = {}
            of_row = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
            firsts = list(distinct)
        tokens: list[list[int]] = [[] for _ in range(n)]
        logps: list[list[float]] = [[] for _ in range(n)]
        tails = [""] * n
        stopped = [False] * n
        alive = torch.arange(n)  # original row of each row still decoding
        stop_strings = params.stop
        tail_keep = max((len(s) for s in stop_strings), default=1)
        with self.policy.use(adapter) as model, self._autocast(device := next(model.parameters()).device):
            fast = self.fast and FastDecoder.supports(model)
            hits: list[Hit | None] = [None] * len(firsts)
            store = self.store if fast or _full_attention(model) else None
            if store is not None:
                store.enter((weights_key(model), self.bf16, fast, str(device)))
                hits = [store.lookup(adapter, p) for p in firsts]
            cut = [0 if h is None else h.n for h in hits]  # cached tokens of each prefilled row
            cached = max(cut)
            suffix = max(len(p) - c for p, c in zip(firsts, cut, strict=True))
            # B: the prefilled rows, each the part of its prompt after its cached prefix (left-padded)
            ids_B_L = torch.full((len(firsts), suffix), self.pad_id, dtype=torch.long)
            mask_B_L = torch.zeros((len(firsts), suffix), dtype=torch.long)
            for r, (p, c) in enumerate(zip(firsts, cut, strict=True)):
                ids_B_L[r, suffix - len(p) + c :] = torch.tensor(p[c:], dtype=torch.long)
                mask_B_L[r, suffix - len(p) + c :] = 1
            ids_B_L, mask_B_L = ids_B_L.to(device), mask_B_L.to(device)
            pos_B_L = (mask_B_L.cumsum(-1) - 1).clamp(min=0) + torch.tensor(cut, device=device)[:, None]
            dec = (FastDecoder(model, adapter, len(firsts), cached + suffix + params.max_new_tokens) if fast
                   else _HFDecoder(model))
            logits_B_V = (dec.prefill_after(hits, cached, ids_B_L, mask_B_L, pos_B_L) if cached
                          else dec.prefill(ids_B_L, mask_B_L, pos_B_L))
            next_pos_B = pos_B_L[:, -1] + 1
            if len(firsts) < n:  # copy each shared prompt's cache and logits to all of its rows
                rows_n = torch.tensor(of_row, device=device)
                dec.select(rows_n)
                logits_B_V, next_pos_B = logits_B_V[rows_n], next_pos_B[rows_n]
            for t in range(params.max_new_tokens):
                tok_B, lp_B = self._sample(logits_B_V, params, gen)
                keep: list[int] = []
                rows = alive.tolist()
                for j, (row, tid, lp) in enumerate(zip(rows, tok_B.tolist(), lp_B.tolist(), strict=True)):
                    tokens[row].append(tid)
                    logps[row].append(lp)
                    done = tid == self.eos_id
                    if not done and stop_strings:
                        tails[row] = (tails[row] + self.piece(tid))[-(tail_keep + 32) :]
                        done = any(s in tails[row] for s in stop_strings)
                    if done:
                        stopped[row] = True
                    else:
                        keep.append(j)
                if not keep or t == params.max_new_tokens - 1:
                    break
                if store is not None and len(keep) < len(alive):  # the finished rows' keys and values, kept
                    kept = set(keep)
                    self._keep(dec, adapter, [j for j in range(len(rows)) if j not in kept], rows, prompts,
                               tokens)
                if len(keep) < len(alive):
                    keep_t = torch.tensor(keep, device=device)
                    dec.select(keep_t)
                    alive, tok_B, next_pos_B = alive[keep], tok_B[keep_t], next_pos_B[keep_t]
                logits_B_V = dec.step(tok_B, next_pos_B)
                next_pos_B = next_pos_B + 1
            if store is not None:
                self._keep(dec, adapter, list(range(len(alive))), alive.tolist(), prompts, tokens)
                store.discard(adapter, hits)
        return [self._finish(tokens[r], logps[r], stopped[r], stop_strings) for r in range(n)]

    def _keep(self, dec: Any, adapter: str | None, batch_rows: list[int], rows: list[int],
              prompts: list[list[int]], tokens: list[list[int]]) -> None:
        """Store the keys and values of these rows (their positions `batch_rows` in the decoder's
        batch): the prompt and every sampled token but the last, which was never fed."""
        assert self.store is not None
        for j in batch_rows:
            row = rows[j]
            keys, values = dec.export(j)
            ids = (*prompts[row], *tokens[row][:-1])
            if keys[0].size(1) == len(ids):  # always, unless a decoder's bookkeeping is off: then not kept
                self.store.put(adapter, ids, keys, values)

    @staticmethod
    def _sample(logits_B_V: torch.Tensor, params: SamplingParams,
                gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """Sampled token ids and their log-probabilities under softmax(logits / T) (float32).

        Sampling inverts the CDF with one uniform per row (a cumulative sum and a binary search):
        the same distribution as `torch.multinomial`, which draws one exponential per vocabulary
        entry, at a fraction of the random numbers.
        """
        if params.temperature == 0:
            logp_B_V = torch.log_softmax(logits_B_V, dim=-1)
            tok_B = logp_B_V.argmax(dim=-1)
            return tok_B, logp_B_V.gather(-1, tok_B[:, None]).squeeze(-1)
        logp_B_V = torch.log_softmax(logits_B_V / params.temperature, dim=-1)
        probs_B_V = logp_B_V.exp()
        if params.top_p < 1.0:
            sorted_p, order = probs_B_V.sort(dim=-1, descending=True)
            drop = sorted_p.cumsum(-1) - sorted_p > params.top_p
            sorted_p = sorted_p.masked_fill(drop, 0.0)
            probs_B_V = torch.zeros_like(probs_B_V).scatter(-1, order, sorted_p)
        cdf_B_V = probs_B_V.double().cumsum(-1)
        u_B_1 = (torch.rand((cdf_B_V.size(0), 1), generator=gen, dtype=torch.float64).to(cdf_B_V.device)
                 * cdf_B_V[:, -1:])
        tok_B = torch.searchsorted(cdf_B_V, u_B_1, right=True).clamp_(max=cdf_B_V.size(-1) - 1).squeeze(-1)
        return tok_B, logp_B_V.gather(-1, tok_B[:, None]).squeeze(-1)

    def _finish(self, ids: list[int], logps: list[float], stopped: bool, stops: tuple[str, ...]) -> Sample:
        text = self.tokenizer.decode([i for i in ids if i != self.eos_id])
        cut = min((text.find(s) for s in stops if s in text), default=-1)
        if cut >= 0:
            text = text[:cut]
        return Sample(action_ids=ids, logprobs=logps, text=text, stopped=stopped)


def _full_attention(model: Any) -> bool:
    """Every layer attends to the whole context (no sliding window, no recurrent state): the layers a
    DynamicCache rebuilt from cached keys and values stands for (`_HFDecoder.prefill_after`)."""
    cfg = model.config
    types = getattr(cfg, "layer_types", None)
    if types:
        return all(t == "full_attention" for t in types)
    return getattr(cfg, "sliding_window", None) is None


class _HFDecoder:
    """HF's own forward with a DynamicCache (models the fast path does not support)."""

    def __init__(self, model: Any):
        self.model = model
        self.cache = DynamicCache()
        self.mask_B_L = torch.zeros(0)

    def prefill(self, ids_B_L: torch.Tensor, mask_B_L: torch.Tensor, pos_B_L: torch.Tensor) -> torch.Tensor:
        self.mask_B_L = mask_B_L
        return self.model(input_ids=ids_B_L, attention_mask=mask_B_L, position_ids=pos_B_L,
                          past_key_values=self.cache, use_cache=True, logits_to_keep=1).logits[:, -1].float()

    def prefill_after(self, hits: list[Hit | None], width: int, ids_B_S: torch.Tensor, mask_B_S: torch.Tensor,
                      pos_B_S: torch.Tensor) -> torch.Tensor:
        """`FastDecoder.prefill_after` with HF's forward: the cached prefixes become a DynamicCache."""
        like = next(h for h in hits if h is not None).entry.keys
        keys = [k.new_zeros(len(hits), k.size(0), width, k.size(-1)) for k in like]
        values = [k.new_zeros(len(hits), k.size(0), width, k.size(-1)) for k in like]
        cached_B_C = place_prefixes(hits, keys, values, width)
        self.cache = DynamicCache(ddp_cache_data=list(zip(keys, values, strict=True)))
        return self.prefill(ids_B_S, torch.cat((cached_B_C.to(mask_B_S.dtype), mask_B_S), dim=1), pos_B_S)

    def export(self, row: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        cols = self.mask_B_L[row].nonzero().squeeze(-1)
        layers: list[Any] = list(self.cache.layers)
        return ([layer.keys[row].index_select(1, cols) for layer in layers],
                [layer.values[row].index_select(1, cols) for layer in layers])

    def step(self, tok_B: torch.Tensor, pos_B: torch.Tensor) -> torch.Tensor:
        self.mask_B_L = torch.cat([self.mask_B_L, self.mask_B_L.new_ones((len(tok_B), 1))], dim=1)
        return self.model(input_ids=tok_B[:, None], attention_mask=self.mask_B_L, position_ids=pos_B[:, None],
                          past_key_values=self.cache, use_cache=True).logits[:, -1].float()

    def select(self, keep_B: torch.Tensor) -> None:
        self.cache.batch_select_indices(keep_B)
        self.mask_B_L = self.mask_B_L[keep_B]
