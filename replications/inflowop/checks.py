"""The part of `InFlowOp.validate` that reads only the `method.*` settings: ranges, and an agent pool
whose names are known and distinct."""

from __future__ import annotations

from typing import TYPE_CHECKING

from replications.inflowop.agents import POOL
from replications.inflowop.workflow import pool_of

if TYPE_CHECKING:
    from replications.inflowop.method import InFlowOpConfig


def check_settings(cfg: InFlowOpConfig, engine: str, eval_k: int | None = None) -> None:
    """Raise ValueError unless the `method.*` settings are in range and the agent pool is well named
    (`engine`: the run's; policy agents need the HF engine; `eval_k`: the run's, = method.pools when
    pools are drawn)."""
    c = cfg
    if c.beta < 0 or c.gamma < 0 or c.max_repairs < 0 or c.warmup_tasks < 0 or c.prior_strength <= 0:
        raise ValueError("method.beta, gamma, max_repairs, warmup_tasks must be >= 0 and prior_strength > 0")
    if not (0 < c.prior_undeclared < 1 and 0 < c.prior_declared < 1 and 0 < c.tau <= 1):
        raise ValueError("method.prior_declared and prior_undeclared must be in (0, 1), tau in (0, 1]")
    models = pool_of(c)  # raises on an unknown category
    if len({m.name for m in models}) != len(models):
        raise ValueError(f"method.policy_agents names an agent twice: {c.policy_agents}")
    names = [a.name for a in POOL] + [m.name for m in models]
    if c.single_agent not in names:
        raise ValueError(f"method.single_agent must be a pool agent {names}; got {c.single_agent!r}")
    if (min(c.agent_steps, c.agent_batch_size, c.agent_demos, c.agent_max_tokens, c.play_batch) < 1
            or c.agent_lr <= 0):
        raise ValueError("method.agent_steps, agent_batch_size, agent_demos, agent_max_tokens, play_batch "
                         "must be >= 1 and agent_lr > 0")
    if c.explore < 0 or c.pools < 0 or any(b < 0 for b in c.frontier):
        raise ValueError("method.explore, pools and every beta of method.frontier must be >= 0")
    if c.pools:
        from replications.inflowop.pools import PoolPrior

        PoolPrior.of(c.pool_prior).check()  # unknown keys or values out of range
        if eval_k is not None and eval_k != c.pools:
            raise ValueError(f"method.pools={c.pools} plays pool j of a cell as play j of every task: "
                             f"set eval.k={c.pools} (got {eval_k})")
        if models:
            raise ValueError("method.pools (pools drawn from the prior) takes scripted agents only: "
                             "no method.policy_agents")
    if c.frontier and (not c.pools or c.arm in ("single", "single-retry", "template")):
        raise ValueError("method.frontier (other betas per pool) needs method.pools > 0 and an arm whose "
                         "plan "
                         f"has a cost (not {c.arm})")
    if models and engine != "hf":
        raise ValueError("policy agents are adapters of the HF engine's policy: set engine=hf "
                         f"(got {engine})")
