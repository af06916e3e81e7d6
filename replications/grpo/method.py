"""GRPO, the baseline every method is compared against (Shao et al. 2024, arXiv 2402.03300).

For each task, G episodes are sampled from the current policy; each episode's outcome reward is
normalized within its group, A_i = (r_i - mean(r)) / (std(r) + eps) (eq. 3 of the paper, outcome
supervision), and broadcast to every action token of the episode. The policy maximizes the
clipped surrogate of PPO on those tokens (common/loss.py), optionally with a KL penalty to the
reference model (the warm start, adapters disabled).

Every hook is the default of `common.method.Method`; this class exists so that GRPO is a method
like any other (its own folder, card and configs) and so that the estimator can be switched to
Dr. GRPO (`method.estimator=drgrpo`) or RLOO (`method.estimator=rloo`) as arms.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.method import Method, MethodConfig


@dataclass
class GRPOConfig(MethodConfig):
    name: str = "grpo"
    estimator: str = "grpo"  # grpo (Shao et al. 2024) | drgrpo (Liu et al. 2025) | rloo (Ahmadian et al. 2024)


class GRPO(Method):
    Config = GRPOConfig
