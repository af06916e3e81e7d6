"""Key/value reuse across turns (the HF engine's `kv_reuse`): a multi-turn episode's next prompt is its
last prompt, its sampled action and the environment's observation, all as token ids
(`common.rollout` never re-tokenizes a context). The keys and values computed for a finished turn
are kept here, keyed by their exact tokens; a later request whose prompt starts with those tokens
prefills only the rest (the action's last token and the observation) on top of them, so a turn costs
what its new tokens cost, not what the whole context costs.

A cached prefix is only ever used by a request of the same adapter (keys and values depend on it),
under the same weights (every parameter's storage and version: an optimizer step changes them and
empties the store), the same dtype and the same decoder kind. The match is on token ids, so a
prompt that does not literally extend a cached one (a chat template that re-renders earlier turns,
a role whose context was reset) simply misses and is prefilled whole, as without reuse.

Memory is bounded (`max_bytes`): least recently used entries go first; an entry a request used
whole is dropped once that request's own (longer) entry replaces it, and the rollout empties the
store when a play ends (`Engine.forget`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class Cached:
    """The keys and values (per layer, KV heads x n x head_dim) of the tokens `tokens`."""

    tokens: tuple[int, ...]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    used: int = 0  # the store's clock at the last use (least recently used goes first)

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)


@dataclass
class Hit:
    """A request's reusable prefix: the first `n` tokens of `entry` (n < the prompt's length)."""

    entry: Cached
    n: int

    def kv(self) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        if self.n == len(self.entry.tokens):
            return self.entry.keys, self.entry.values
        return [k[:, : self.n] for k in self.entry.keys], [v[:, : self.n] for v in self.entry.values]


def weights_key(model: Any) -> tuple:
    """Every parameter's storage and version: changes whenever a weight is written in place."""
    return tuple((p.data_ptr(), p._version) for p in model.parameters())


class PrefixStore:
    """Cached prefixes per adapter, valid for one weights key (see the module's docstring)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.world: tuple | None = None  # (weights, dtype, decoder kind) the entries were computed under
        self.entries: dict[str | None, dict[tuple[int, ...], Cached]] = {}
        self.nbytes = 0
        self.clock = 0
        self.hits = self.misses = self.reused_tokens = 0  # counters (the bench and tests read them)

    def clear(self) -> None:
        self.entries.clear()
        self.nbytes = 0

    def enter(self, world: tuple) -> None:
        """Start a batch computed under `world`: entries from another one are stale and dropped."""
        if world != self.world:
            self.clear()
            self.world = world
        self.clock += 1

    def lookup(self, adapter: str | None, prompt: list[int] | tuple[int, ...]) -> Hit | None:
        """The longest cached prefix of `prompt` (at most all but its last token) of this adapter."""
        best: Hit | None = None
        last = len(prompt) - 1
        for entry in self.entries.get(adapter, {}).values():
            n = min(len(entry.tokens), last)
            if n < 1 or (best is not None and n <= best.n):
                continue
            if entry.tokens[n - 1] != prompt[n - 1] or entry.tokens[0] != prompt[0]:
                continue
            if tuple(prompt[:n]) == entry.tokens[:n]:
                best = Hit(entry, n)
        if best is None:
            self.misses += 1
        else:
            self.hits += 1
            self.reused_tokens += best.n
            best.entry.used = self.clock
        return best

    def put(self, adapter: str | None, tokens: tuple[int, ...], keys: list[torch.Tensor],
            values: list[torch.Tensor]) -> None:
        per = self.entries.setdefault(adapter, {})
        old = per.pop(tokens, None)
        if old is not None:
            self.nbytes -= old.nbytes
        entry = Cached(tokens, keys, values, self.clock)
        if entry.nbytes > self.max_bytes:
            return
        per[tokens] = entry
        self.nbytes += entry.nbytes
        while self.nbytes > self.max_bytes:
            adapter_, key_ = min(((a, k) for a, es in self.entries.items() for k in es),
                                 key=lambda ak: self.entries[ak[0]][ak[1]].used)
            self.nbytes -= self.entries[adapter_].pop(key_).nbytes

    def discard(self, adapter: str | None, hits: list[Hit | None]) -> None:
        """Drop the entries these hits used whole (the requests' own entries now extend them)."""
        per = self.entries.get(adapter, {})
        for hit in hits:
            if hit is not None and hit.n == len(hit.entry.tokens):
                gone = per.pop(hit.entry.tokens, None)
                if gone is not None:
                    self.nbytes -= gone.nbytes


def place_prefixes(hits: list[Hit | None], keys: list[torch.Tensor], values: list[torch.Tensor],
                   width: int) -> torch.Tensor:
    """Write the hits' keys and values right-aligned into the first `width` columns of `keys` and
    `values` (per layer, B x KV heads x >= width x head_dim; other columns left as they are); returns
    which of those columns hold a cached token (B x width, bool)."""
    mask_B_C = torch.zeros(len(hits), width, dtype=torch.bool, device=keys[0].device)
    for r, hit in enumerate(hits):
        if hit is None:
            continue
        ks, vs = hit.kv()
        for i in range(len(keys)):
            keys[i][r, :, width - hit.n : width] = ks[i]
            values[i][r, :, width - hit.n : width] = vs[i]
        mask_B_C[r, width - hit.n :] = True
    return mask_B_C
