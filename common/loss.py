"""Token-level policy loss: the clipped surrogate, KL to the reference, entropy, aggregation.

Shapes: B rows (sequences), T action tokens per row (padded), V vocabulary. Every tensor that
enters a loss is masked by `mask_B_T` (1 on action tokens the update trains, 0 elsewhere), so
environment tokens, other roles' tokens and padding never carry gradient.
"""

from __future__ import annotations

import torch

KL_ESTIMATORS = ("k1", "k2", "k3")


def kl_estimate(logp: torch.Tensor, logp_ref: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020).

    With log r = logp_ref - logp:
    - k1 = -log r: unbiased, high variance, can be negative per token.
    - k2 = (log r)^2 / 2: biased (it estimates a second-order approximation of the KL), low
      variance, always >= 0; its gradient equals the gradient of the true KL to first order.
    - k3 = (r - 1) - log r: unbiased and always >= 0, lower variance than k1 (used by GRPO).
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


def aggregate(x_B_T: torch.Tensor, mask_B_T: torch.Tensor, mode: str, num_tokens: int, num_rows: int) -> torch.Tensor:
    """This chunk's share of the minibatch loss.

    token-mean: sum over all action tokens / `num_tokens` (the minibatch's action tokens), so each
      token weighs the same (DAPO, Dr. GRPO, CANOPY).
    seq-mean: mean over tokens within each row, then sum / `num_rows` (the minibatch's rows), so each
      sequence weighs the same (the original GRPO).
    Chunks of one minibatch add up to the minibatch's mean.
    """
    mask = mask_B_T.to(x_B_T.dtype)
    if mode == "token-mean":
        return (x_B_T * mask).sum() / max(num_tokens, 1)
    if mode == "seq-mean":
        per_row = (x_B_T * mask).sum(-1) / mask.sum(-1).clamp(min=1)
        return per_row.sum() / max(num_rows, 1)
    raise ValueError(f"unknown loss aggregation {mode!r}; choose token-mean | seq-mean")
