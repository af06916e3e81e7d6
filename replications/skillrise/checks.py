"""What `SkillRise.validate` checks besides the core's checks: a chain arm needs an environment with a
curate turn (checked before the core's checks), and the settings must be in range and have an effect."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replications.skillrise.method import SkillRise, SkillRiseConfig


def check_env(m: SkillRise) -> None:
    """A chain arm plays solve and curate turns: roles solver and curator and a 'curate' variant."""
    c = m.cfg
    if m.chains and ("curate" not in m.env.variants() or set(m.env.roles) != {"solver", "curator"}):
        raise ValueError(f"method.arm={c.arm} plays chains of solve and curate turns: the environment needs "
                         "roles solver and curator and a 'curate' variant (env=skill_families has them, and "
                         f"env=textworld or env=chain_tasks with env.families=true); {m.env.name} has roles "
                         f"{m.env.roles} and variants {m.env.variants()}: it needs a curate turn first")


def check_settings(m: SkillRise, defaults: type[SkillRiseConfig]) -> None:
    """decay in [0, 1], a curate loss weight >= 0 (neither changed from `defaults` in the grpo arm); the
    chain arms need chains of at least two tasks, one process, and no KL penalty in the reward."""
    c, run = m.cfg, m.run
    if not 0 <= c.decay <= 1 or c.curate_loss_weight < 0:
        raise ValueError("need method.decay in [0, 1] and method.curate_loss_weight >= 0; "
                         f"got {c.decay}, {c.curate_loss_weight}")
    if not m.chains:
        if c.decay != defaults.decay or c.curate_loss_weight != defaults.curate_loss_weight:
            raise ValueError("method.decay and method.curate_loss_weight have no effect with "
                             "method.arm=grpo; drop them")
        return
    if m.chain_length < 2:
        raise ValueError("a chain needs at least 2 tasks (the environment's plan lengths); "
                         f"{m.env.name} has tiers {m.env.tiers}")
    if run.world_size > 1:
        raise ValueError("method.arm=skillrise/current plays whole chains in one process: use "
                         "trainer.devices=1, trainer.num_nodes=1")
    if run.kl_placement == "reward":
        raise ValueError("the chain arms return advantages, so trainer.kl.placement=reward has no effect; "
                         "use loss or none")
