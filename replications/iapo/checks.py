"""What `IAPO.validate` checks besides the core's checks: the real benchmarks of the small and paper
scales are registered (checked before the core's checks), and the settings are in range, have an
effect, and name an annotator that can run."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replications.iapo.method import IAPO, IAPOConfig

# the real benchmarks of the small and paper scales (envs/benchmarks/tau2/, envs/benchmarks/bfcl/)
BENCHMARK_ENVS = ("tau2", "bfcl")


def check_benchmarks(m: IAPO) -> None:
    """scale=small and scale=paper train on env=tau2 and evaluate on env=bfcl: both must be registered."""
    run = m.run
    if run.scale in ("small", "paper"):
        from envs.registry import ENVS

        missing = [name for name in BENCHMARK_ENVS if name not in ENVS]
        if missing:
            raise ValueError(f"scale={run.scale} trains on env=tau2 and evaluates on env=bfcl; {missing} "
                             "not registered in envs.registry.ENVS yet: use scale=cpu (env=service_desk) "
                             "until they are")


def check_settings(m: IAPO, defaults: type[IAPOConfig]) -> None:
    """clip > 0 and beta_plus >= 0 (neither changed from `defaults` with credit=broadcast), no KL penalty
    in the reward when the credit returns advantages, and the llm annotator only at the small and paper
    scales, with a local model."""
    c, run = m.cfg, m.run
    if c.clip <= 0 or c.beta_plus < 0:
        raise ValueError(f"method.clip must be > 0 and method.beta_plus >= 0; got {c.clip}, {c.beta_plus}")
    if c.credit == "broadcast" and (c.beta_plus != defaults.beta_plus or c.clip != defaults.clip):
        raise ValueError("method.beta_plus and method.clip have no effect with method.credit=broadcast "
                         "(GRPO); drop them")
    if c.credit != "broadcast" and run.kl_placement == "reward":
        raise ValueError("method.credit=iapo/shuffled/oracle returns advantages, so "
                         "trainer.kl.placement=reward has no effect; use trainer.kl.placement=loss or none")
    if c.annotator == "llm":
        if run.scale not in ("small", "paper"):
            raise ValueError("method.annotator=llm is the paper-scale annotator (a frozen model at "
                             f"temperature 0); at scale={run.scale} use method.annotator=provenance")
        if not (c.annotator_model and Path(c.annotator_model).exists()):
            raise ValueError("method.annotator=llm needs method.annotator_model, a local model folder; got "
                             f"{c.annotator_model!r}: download e.g. Qwen/Qwen3-8B and pass its folder")
    elif c.annotator_model is not None:
        raise ValueError(f"method.annotator_model has no effect with method.annotator={c.annotator}; drop it")
