"""The whole policy objective, in one place: clipped surrogate, KL to the reference, entropy,
aggregation, and a method's extra term.

Shapes: B rows (sequences), T action tokens per row (padded), V vocabulary. Every tensor that
enters a loss is masked by `mask_B_T` (1 on action tokens the update trains, 0 elsewhere), so
environment tokens, other roles' tokens and padding never carry gradient.

Per token, with rho = pi / pi_old and A the advantage (common/credit.py):

    l_t = -min(rho A, clip(rho, 1 - clip_low, 1 + clip_high) A)      (PPO, Schulman 2017, eq. 7)
          + beta * KL_t                                              (only with kl.placement=loss)
          - entropy_coef * H_t

and the chunk's share of the minibatch loss is `AGGREGATIONS[loss_agg](l, mask, ...)`, to which a
method's `extra_loss(batch, step)` is added as it is. KL placement and aggregation are registries
(`KL_PLACEMENTS`, `AGGREGATIONS`): a new variant is one function and one entry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from common.credit import BROADCAST

if TYPE_CHECKING:
    from common.batch import Row
    from common.config import KLConfig, TrainerConfig
    from common.credit import AgentOf
    from common.episode import Episode

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logp: torch.Tensor, logp_ref: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020).

    With log r = logp_ref - logp:
    - k1 = -log r: unbiased, high variance, can be negative per token. As a loss term its expected
      gradient is zero (E_pi[grad log pi] = 0), so it is refused with kl.placement=loss.
    - k2 = (log r)^2 / 2: biased, low variance, always >= 0. As a loss term its expected gradient
      is that of KL(pi || ref).
    - k3 = (r - 1) - log r: unbiased and always >= 0, lower variance than k1 (GRPO's choice). As a
      loss term its expected gradient is that of the *reverse* KL(ref || pi), not KL(pi || ref).
    """
    log_r = logp_ref - logp
    if kind == "k1":
        return -log_r
    if kind == "k2":
        return 0.5 * log_r.pow(2)
    if kind == "k3":
        return torch.expm1(log_r) - log_r
    raise ValueError(f"unknown KL estimator {kind!r}; choose one of {KL_ESTIMATORS}")


def clipped_surrogate(logp_B_T: torch.Tensor, old_logp_B_T: torch.Tensor, adv_B_T: torch.Tensor,
                      clip_low: float, clip_high: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's per-token loss -min(rho*A, clip(rho, 1-clip_low, 1+clip_high)*A) (Schulman 2017, eq. 7).

    Returns (loss_B_T, clipped_B_T) where clipped marks tokens whose clipped term was selected.
    """
    ratio_B_T = torch.exp(logp_B_T - old_logp_B_T)
    unclipped = ratio_B_T * adv_B_T
    clipped = torch.clamp(ratio_B_T, 1.0 - clip_low, 1.0 + clip_high) * adv_B_T
    loss_B_T = -torch.minimum(unclipped, clipped)
    return loss_B_T, (clipped < unclipped)


def entropy_from_logits(logits_B_T_V: torch.Tensor) -> torch.Tensor:
    """Entropy of softmax(logits) per position: logsumexp(z) - sum softmax(z) * z."""
    logp = torch.log_softmax(logits_B_T_V.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


# ---- aggregation: a chunk's share of the minibatch loss --------------------------------------------
Aggregation = Callable[[torch.Tensor, torch.Tensor, int, int], torch.Tensor]


def token_mean(x_B_T: torch.Tensor, mask_B_T: torch.Tensor, num_tokens: int, num_rows: int) -> torch.Tensor:
    """Sum over the chunk's action tokens / the minibatch's action tokens: every token weighs the
    same (DAPO, Dr. GRPO, CANOPY)."""
    return (x_B_T * mask_B_T.to(x_B_T.dtype)).sum() / max(num_tokens, 1)


def seq_mean(x_B_T: torch.Tensor, mask_B_T: torch.Tensor, num_tokens: int, num_rows: int) -> torch.Tensor:
    """Mean over tokens within each row, summed / the minibatch's rows: every sequence weighs the
    same (the original GRPO)."""
    mask = mask_B_T.to(x_B_T.dtype)
    per_row = (x_B_T * mask).sum(-1) / mask.sum(-1).clamp(min=1)
    return per_row.sum() / max(num_rows, 1)


AGGREGATIONS: dict[str, Aggregation] = {"token-mean": token_mean, "seq-mean": seq_mean}


def aggregate(x_B_T: torch.Tensor, mask_B_T: torch.Tensor, mode: str, num_tokens: int,
              num_rows: int) -> torch.Tensor:
    """This chunk's share of the minibatch loss under `mode` (chunks of a minibatch add up to its mean)."""
    if mode not in AGGREGATIONS:
        raise ValueError(f"unknown loss aggregation {mode!r}; choose one of {' | '.join(AGGREGATIONS)}")
    return AGGREGATIONS[mode](x_B_T, mask_B_T, num_tokens, num_rows)


# ---- the batch the objective (and a method's extra term) sees ------------------------------------
@dataclass
class LossBatch:
    """One chunk of one adapter's rows of a minibatch, scored by the current policy.

    All `_B_T` tensors are aligned: row b's action tokens, padded with 0 where `mask_B_T` is 0.
    `num_tokens` / `num_rows` are the whole minibatch's action tokens / rows: a term summed over
    this chunk and divided by them adds up, over the chunks, to the minibatch's mean (`mean`).
    """

    rows: list[Row]
    adapter: str
    logp_B_T: torch.Tensor  # log pi(a_t) under the current policy (carries the gradient)
    old_logp_B_T: torch.Tensor  # log pi_old: detached logp on the strictly on-policy path, else behaviour
    behaviour_logp_B_T: torch.Tensor  # log-probabilities the engine sampled with
    adv_B_T: torch.Tensor  # per-token advantages (common.credit.Advantages)
    mask_B_T: torch.Tensor  # 1 on the action tokens this update trains
    entropy_B_T: torch.Tensor  # entropy of the policy at each action position (grad only if entropy_coef > 0)
    ref_logp_B_T: torch.Tensor | None  # log pi_ref (the base, adapters off); None without a KL term
    num_tokens: int
    num_rows: int

    def mean(self, x_B_T: torch.Tensor) -> torch.Tensor:
        """This chunk's share of the minibatch's token mean of `x_B_T` (the scale `extra_loss` uses)."""
        return token_mean(x_B_T, self.mask_B_T, self.num_tokens, self.num_rows)

    def token_mean_of(self, x_B_T: torch.Tensor) -> float:
        """The chunk's own mean of `x_B_T` over its action tokens (for logging)."""
        return float((x_B_T.detach() * self.mask_B_T).sum() / self.mask_B_T.sum().clamp(min=1))


# ---- KL placement: where the KL to the reference enters --------------------------------------------
KLPlacement = Callable[[torch.Tensor, LossBatch, "KLConfig"], tuple[torch.Tensor, float | None]]


def kl_none(per_token_B_T: torch.Tensor, batch: LossBatch, kl: KLConfig) -> tuple[torch.Tensor, float | None]:
    """No KL term."""
    return per_token_B_T, None


def kl_in_loss(per_token_B_T: torch.Tensor, batch: LossBatch,
               kl: KLConfig) -> tuple[torch.Tensor, float | None]:
    """+ beta * KL_t on every action token (GRPO, CANOPY)."""
    assert batch.ref_logp_B_T is not None, "kl.placement=loss needs the reference log-probabilities"
    kl_B_T = kl_estimate(batch.logp_B_T, batch.ref_logp_B_T, kl.estimator)
    return per_token_B_T + kl.coef * kl_B_T, batch.token_mean_of(kl_B_T)


def kl_in_reward(per_token_B_T: torch.Tensor, batch: LossBatch,
                 kl: KLConfig) -> tuple[torch.Tensor, float | None]:
    """The penalty was subtracted from the rewards before normalization (`common.trainer`): the
    loss is unchanged; the current KL is logged."""
    assert batch.ref_logp_B_T is not None, "kl.placement=reward needs the reference log-probabilities"
    return per_token_B_T, batch.token_mean_of(kl_estimate(batch.logp_B_T.detach(), batch.ref_logp_B_T,
                                                          kl.estimator))


KL_PLACEMENTS: dict[str, KLPlacement] = {"none": kl_none, "loss": kl_in_loss, "reward": kl_in_reward}


@dataclass
class LossTerms:
    """What one chunk's objective logs."""

    loss: torch.Tensor
    clip_fraction: float
    entropy: float
    kl: float | None
    logprob_diff_max: float


def policy_loss(batch: LossBatch, t: TrainerConfig, extra: torch.Tensor | None = None) -> LossTerms:
    """The chunk's share of the minibatch objective: surrogate, KL placement, entropy, aggregation,
    then a method's `extra` term (already at the minibatch scale: see `LossBatch.mean`)."""
    per_token_B_T, clipped_B_T = clipped_surrogate(batch.logp_B_T, batch.old_logp_B_T, batch.adv_B_T,
                                                   t.clip_low, t.clip_high)
    per_token_B_T, kl_value = KL_PLACEMENTS[t.kl.placement](per_token_B_T, batch, t.kl)
    if t.entropy_coef > 0:
        per_token_B_T = per_token_B_T - t.entropy_coef * batch.entropy_B_T
    loss = aggregate(per_token_B_T, batch.mask_B_T, t.loss_agg, batch.num_tokens, batch.num_rows)
    if extra is not None:
        loss = loss + extra
    mask = batch.mask_B_T
    n = float(mask.sum())
    return LossTerms(
        loss=loss,
        clip_fraction=float((clipped_B_T.float() * mask).sum()) / n,
        entropy=float((batch.entropy_B_T.detach() * mask).sum()) / n,
        kl=kl_value,
        logprob_diff_max=float(((batch.logp_B_T.detach() - batch.behaviour_logp_B_T).abs() * mask).max()),
    )


def kl_reward_penalty(rows: list[Row], reference: list[torch.Tensor], episodes: list[Episode], coef: float,
                      estimator: str, agent_of: AgentOf) -> Callable[[int, str], float]:
    """KL in the reward: r_key <- r_key - beta * sum_t KL_t over that key's trained tokens of the
    episode (the broadcast key `*`: over all of the episode's trained tokens). `reference` is aligned
    with `rows`; the penalty is asked by episode index in `episodes` and agent key."""
    sums: dict[tuple[int, str], float] = defaultdict(float)
    for row, ref_T in zip(rows, reference, strict=True):  # ref_T on the model's device
        kl_T = kl_estimate(torch.tensor(row.behaviour_logprobs(), device=ref_T.device), ref_T, estimator)
        offset = 0
        for span in row.spans:
            turn_kl = float(kl_T[offset : offset + span.num_action_tokens].sum())
            offset += span.num_action_tokens
            sums[(row.episode, agent_of(episodes[row.episode], span.turn_index))] += turn_kl
            sums[(row.episode, BROADCAST)] += turn_kl

    def penalty(episode: int, key: str) -> float:
        return coef * sums.get((episode, key), 0.0)

    return penalty
