"""From episodes to training rows, and the forward pass that scores them.

A row is one token sequence of one adapter: a role's context chain within an episode. Because a
role's context only ever grows (its prompt, its own sampled tokens, then observations appended),
all turns of that role share one row: the last turn's prompt + action contains every earlier
turn's action exactly, so the row is scored once, not once per turn. A role whose context was
reset (`new_context`) starts a new row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from common.credit import Advantages
from common.engines.fast import FastScorer
from common.episode import Episode, Turn


@dataclass(frozen=True)
class Span:
    """One trained turn inside a row: where its prompt ends in the row's ids, and which turn it is."""

    start: int  # index in Row.ids of the turn's first action token
    turn_index: int  # the turn's index in its episode's `turns`
    turn: Turn  # read, never written

    @property
    def num_action_tokens(self) -> int:
        return self.turn.num_action_tokens


@dataclass(frozen=True)
class Row:
    """One token sequence of one adapter: a role's context chain within one episode of the step.

    `episode` is the episode's index in the step's list of episodes (`common.episode.step_episodes`),
    the key every later stage (advantages, KL penalties) uses: rows hold no per-step state of their own.
    """

    adapter: str
    role: str
    episode: int
    ids: tuple[int, ...]
    spans: tuple[Span, ...]

    @property
    def num_action_tokens(self) -> int:
        return sum(s.num_action_tokens for s in self.spans)

    def behaviour_logprobs(self) -> list[float]:
        return [lp for s in self.spans for lp in s.turn.logprobs]

    def advantages(self, advantages: Advantages) -> list[float]:
        """One advantage per action token of the row, in order."""
        return [a for s in self.spans for a in advantages.tokens((self.episode, s.turn_index), s.turn)]

    def positions(self) -> list[int]:
        """Indices in `ids` of the action tokens (predicted from the position before each)."""
        return [s.start + j for s in self.spans for j in range(s.num_action_tokens)]


def build_rows(episodes: list[Episode], roles: set[str] | None,
               excluded: Callable[[Episode], bool] = lambda e: e.faulted) -> list[Row]:
    """Rows of every trainable turn of the step's episodes (roles=None: every role); a row's `episode`
    is its episode's index in `episodes`.

    Scored-only plays (`counts_for_training=False`) and `excluded` episodes (the method's choice;
    by default faulted ones) never become rows.
    """
    rows: list[Row] = []
    for e_idx, ep in enumerate(episodes):
        if not ep.counts_for_training or excluded(ep):
            continue
        # role -> (adapter, ids, spans) of its open row
        open_rows: dict[str, tuple[str, list[int], list[Span]]] = {}
        chains: list[tuple[str, str, list[int], list[Span]]] = []
        for t_idx, turn in enumerate(ep.turns):
            if not turn.trainable or turn.adapter is None or not turn.action_ids:
                continue
            if roles is not None and turn.role not in roles:
                continue
            row = open_rows.get(turn.role)
            extends = row is not None and row[0] == turn.adapter and turn.prompt_ids[: len(row[1])] == row[1]
            if not extends:
                row = (turn.adapter, [], [])
                chains.append((turn.role, *row))
                open_rows[turn.role] = row
            assert row is not None
            row[2].append(Span(len(turn.prompt_ids), t_idx, turn))
            row[1][:] = list(turn.prompt_ids) + list(turn.action_ids)
        rows += [Row(adapter, role, e_idx, tuple(ids), tuple(spans)) for role, adapter, ids, spans in chains]
    return rows


def micro_batches(rows: Sequence[Row], max_rows: int = 0, max_tokens: int = 0) -> list[list[int]]:
    """`rows` cut, in order, into chunks of at most `max_rows` rows whose padded size (rows x longest
    row, the positions one forward runs) is at most `max_tokens` (0: no limit); a row longer than
    `max_tokens` is a chunk of its own. Lists of indices into `rows`."""
    out: list[list[int]] = []
    chunk: list[int] = []
    longest = 0
    for i, row in enumerate(rows):
        grown = max(longest, len(row.ids))
        full = (max_rows and len(chunk) >= max_rows) or (max_tokens and (len(chunk) + 1) * grown > max_tokens)
        if chunk and full:
            out.append(chunk)
            chunk, grown = [], len(row.ids)
        chunk.append(i)
        longest = grown
    return out + [chunk] if chunk else out


@dataclass
class Scored:
    logp_B_T: torch.Tensor  # log-probabilities of the action tokens, padded with 0
    mask_B_T: torch.Tensor  # 1 on action tokens
    entropy_B_T: torch.Tensor | None


# Score shared prefixes once (`FastScorer.logits_shared`) when that leaves at most this fraction of
# the token positions a plain left-padded batch would run: the two-phase forward runs twice the ops
# per layer, which only pays when the tokens saved are many.
SHARE_MAX_FRACTION = 0.75
# The lean forward keeps each layer's attention scores and probabilities (B x H x T x S, fp32) for the
# backward; rows whose layers would keep more than this in all run through HF's forward instead (SDPA,
# whose memory grows with T, and the recompute of trainer.gradient_checkpointing). A tau2 row of ~6k tokens
# on SmolLM2 (30 layers, 9 heads) would keep ~18 GB: the first small-scale tau2 step was OOM-killed so.
LEAN_ATTENTION_BYTES = 4 << 30


def lean_fits(model: Any, n_rows: int, width: int) -> bool:
    """Whether the lean forward may score `n_rows` rows of up to `width` tokens with `model`: not when the
    model recomputes its layers (gradient checkpointing, which only HF's forward does), nor when the
    attention it keeps for the backward (two fp32 B x H x T x S tensors a layer) exceeds
    LEAN_ATTENTION_BYTES."""
    if getattr(model, "is_gradient_checkpointing", False):
        return False
    config = getattr(model, "config", None)
    heads, layers = (int(getattr(config, k, 0) or 0) for k in ("num_attention_heads", "num_hidden_layers"))
    return 2 * 4 * layers * n_rows * heads * width * width <= LEAN_ATTENTION_BYTES


@dataclass
class SharedLayout:
    """Rows as distinct prefixes (left-padded) plus one suffix per row (right-padded); the prefix of
    a row is everything before the position that predicts its first action token."""

    prefix_ids_U_P: torch.Tensor
    prefix_mask_U_P: torch.Tensor
    owner_B: torch.Tensor  # which prefix each row continues
    suffix_ids_B_S: torch.Tensor
    gather_B_T: torch.Tensor  # suffix positions whose logits predict the action tokens

    @staticmethod
    def of(rows: list[Row], positions: list[list[int]], pad_id: int,
           max_fraction: float | None = None) -> SharedLayout | None:
        """The layout, or None when rows share too little (more than `max_fraction`, default
        SHARE_MAX_FRACTION, of the plain batch's positions) or a row has no prefix to share."""
        max_fraction = SHARE_MAX_FRACTION if max_fraction is None else max_fraction
        if not rows or any(not pos or pos[0] < 2 for pos in positions):
            return None
        cuts = [pos[0] - 1 for pos in positions]
        owners: dict[tuple[int, ...], int] = {}
        owner = [owners.setdefault(tuple(r.ids[:c]), len(owners)) for r, c in zip(rows, cuts, strict=True)]
        p_max = max(cuts)
        s_max = max(len(r.ids) - c for r, c in zip(rows, cuts, strict=True))
        if len(owners) * p_max + len(rows) * s_max > max_fraction * len(rows) * max(len(r.ids) for r in rows):
            return None
        t_max = max(len(p) for p in positions)
        prefix_ids = torch.tensor([[pad_id] * (p_max - len(p)) + list(p) for p in owners], dtype=torch.long)
        prefix_mask = torch.tensor([[0] * (p_max - len(p)) + [1] * len(p) for p in owners], dtype=torch.long)
        suffix_ids = torch.tensor([list(r.ids[c:]) + [pad_id] * (s_max - len(r.ids) + c)
                                   for r, c in zip(rows, cuts, strict=True)],
                                  dtype=torch.long)
        # logits at t-1 predict token t
        gather = torch.tensor([[p - 1 - c for p in pos] + [0] * (t_max - len(pos))
                               for c, pos in zip(cuts, positions, strict=True)], dtype=torch.long)
        return SharedLayout(prefix_ids, prefix_mask, torch.tensor(owner), suffix_ids, gather)

    def to(self, device: torch.device) -> SharedLayout:
        return SharedLayout(*(t.to(device) for t in (self.prefix_ids_U_P, self.prefix_mask_U_P, self.owner_B,
                                                     self.suffix_ids_B_S, self.gather_B_T)))


def score_rows(model: Any, rows: list[Row], pad_id: int, with_entropy: bool, entropy_grad: bool = False,
               temperature: float = 1.0, fast: bool = True, share_prefix: bool = True) -> Scored:
    """One forward pass over `rows` (left-padded); log-probs of each row's action tokens.

    Only the positions that predict action tokens are kept: rows are left-padded so that their
    action tokens line up at the end, and the LM head runs only from the earliest position that
    predicts one (`logits_to_keep`), so neither the head nor the log-softmax spends work on prompt
    tokens. `temperature` is the rollout's: the scored distribution is softmax(logits / T), the one
    the engine sampled from (as verl does), so the recomputed log-probabilities equal the behaviour
    ones and the ratio starts at 1. `fast` runs the lean forward (`FastScorer`: stacked matmuls,
    LoRA unmerged with the adapters' own parameters) where the model supports it, else HF's; with
    `share_prefix` it scores a prefix several rows share once (`SharedLayout`: a GRPO group's prompt).
    The index tensors are filled on the CPU and moved to the model's device in one copy each.
    """
    width = max(len(r.ids) for r in rows)
    positions = [r.positions() for r in rows]
    t_max = max(len(p) for p in positions)
    device = next(model.parameters()).device
    # each matrix is built as nested lists and made a tensor in one call (a call per row cost more)
    fill = [[0] * (t_max - len(pos)) for pos in positions]
    targets_B_T = torch.tensor([[r.ids[p] for p in pos] + f
                                for r, pos, f in zip(rows, positions, fill, strict=True)],
                               dtype=torch.long).to(device)
    mask_B_T = torch.tensor([[1.0] * len(pos) + f for pos, f in zip(positions, fill, strict=True)]).to(device)
    lean = fast and lean_fits(model, len(rows), width) and FastScorer.supports(model)
    shared = SharedLayout.of(rows, positions, pad_id) if lean and share_prefix else None
    if shared is not None:
        s = shared.to(device)
        logits_B_T_V = FastScorer(model, width).logits_shared(s.prefix_ids_U_P, s.prefix_mask_U_P, s.owner_B,
                                                              s.suffix_ids_B_S, s.gather_B_T)
    else:
        offsets = [width - len(r.ids) for r in rows]
        first = min((off + pos[0] - 1 for off, pos in zip(offsets, positions, strict=True) if pos),
                    default=width - 1)
        ids_B_L = torch.tensor([[pad_id] * off + list(r.ids) for r, off in zip(rows, offsets, strict=True)],
                               dtype=torch.long).to(device)
        attn_B_L = torch.tensor([[0] * off + [1] * len(r.ids) for r, off in zip(rows, offsets, strict=True)],
                                dtype=torch.long).to(device)
        # logits at t-1 predict token t
        gather_B_T = torch.tensor([[p + off - 1 - first for p in pos] + f
                                   for pos, off, f in zip(positions, offsets, fill, strict=True)],
                                  dtype=torch.long).to(device)
        pos_B_L = (attn_B_L.cumsum(-1) - 1).clamp(min=0)
        if lean:
            logits_B_T_V = FastScorer(model, width).logits_at(ids_B_L, attn_B_L, pos_B_L, gather_B_T + first)
        else:
            hidden = model(input_ids=ids_B_L, attention_mask=attn_B_L, position_ids=pos_B_L,
                           logits_to_keep=width - first).logits  # B x (width - first) x V
            logits_B_T_V = hidden.gather(1, gather_B_T[..., None].expand(-1, -1, hidden.size(-1)))
    z_B_T_V = logits_B_T_V.float()
    if temperature != 1.0:
        z_B_T_V = z_B_T_V / temperature
    # log p(target) = z_target - logsumexp(z): no B x T x V log-softmax is materialized (nor, in the
    # backward, a scatter into one); the vocabulary pass is one logsumexp
    lse_B_T = torch.logsumexp(z_B_T_V, dim=-1)
    logp_B_T = (z_B_T_V.gather(-1, targets_B_T[..., None]).squeeze(-1) - lse_B_T) * mask_B_T
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            # H = lse - E_p[z]
            entropy = (lse_B_T - (torch.softmax(z_B_T_V, dim=-1) * z_B_T_V).sum(-1)) * mask_B_T
    return Scored(logp_B_T, mask_B_T, entropy)


def padded(values: Sequence[Sequence[float] | torch.Tensor], t_max: int,
           device: torch.device | str | None = None) -> torch.Tensor:
    """Per-row values right-padded with 0 into a B x t_max float32 tensor on `device` (None: the CPU).

    Lists (behaviour log-probs, advantages) are filled on the CPU and moved in one copy; tensors
    (reference log-probs, already on the model's device) are copied where they are.
    """
    if not any(isinstance(v, torch.Tensor) for v in values):
        out = torch.zeros((len(values), t_max))
        for b, v in enumerate(values):
            out[b, : len(v)] = torch.tensor(v, dtype=torch.float32)
        return out if device is None else out.to(device)
    out = torch.zeros((len(values), t_max), device=device)
    for b, v in enumerate(values):
        out[b, : len(v)] = torch.as_tensor(v, dtype=torch.float32, device=out.device)
    return out
