"""What batching across live episodes buys: multi-turn, multi-role rollouts with our batched engine
against the same engine fed one sequence at a time.

The environment is the first multi-role environment of the registry (`ENVS`), else `arith` in its
multi-turn `stepwise` mode. Every role gets its own LoRA adapter (`model.roles={role: role}`), so the
batched engine also batches across roles' turns of many episodes (one forward per adapter per
round). The one-at-a-time engine plays the same episodes (same environment seeds) but generates
every action alone: what a rollout loop without cross-episode batching does. The model is the tiny
one after a short SFT warm start (cached), so the episodes run their real number of turns.
"""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from bench.work import CONF, Setting, model_config
from common.config import SFTConfig
from common.engines.base import Engine, Request, Sample, SamplingParams
from common.rollout import Rollout, derive_seed


class OneAtATimeEngine(Engine):
    """Wraps an engine and generates each request alone (batch size 1), in request order."""

    def __init__(self, inner: Engine):
        self.inner = inner

    def generate(self, requests: list[Request], params: SamplingParams, seed: int) -> list[Sample]:
        return [self.inner.generate([r], params, derive_seed(seed, i))[0] for i, r in enumerate(requests)]

    def forget(self) -> None:
        self.inner.forget()


def multi_role_env() -> Any:
    """The first multi-role environment of ENVS (built from its config file), else arith stepwise."""
    from envs.registry import ENVS

    for name, cls in ENVS.items():
        if len(cls.roles) > 1:
            path = CONF / "env" / f"{name}.yaml"
            data: dict[str, Any] = OmegaConf.to_container(OmegaConf.load(path)) if path.exists() else {}  # type: ignore[assignment]
            data.pop("tag", None)
            return cls(cls.config_class(**data))
    from envs.testbeds.arith import ArithConfig, ArithEnv

    return ArithEnv(ArithConfig(mode="stepwise", min_ops=2, max_ops=4, max_value=20))


def measure_multiturn(s: Setting, tasks: int, group: int, max_new_tokens: int, sft_steps: int, reps: int,
                      one_at_a_time_reps: int = 1) -> dict[str, Any]:
    """Throughput of batched vs one-at-a-time rollouts of `tasks` x `group` episodes, `reps` times
    batched and `one_at_a_time_reps` times one at a time (the first reps' episodes: its throughput
    does not depend on how many episodes it plays, and each rollout of it takes ~8 s here)."""
    from common.engines.hf import HFEngine
    from common.policy import Policy
    from common.warmstart import warm_started_base

    env = multi_role_env()
    mcfg = copy.deepcopy(model_config(s.model))
    mcfg.roles = {r: r for r in env.roles}
    sft = SFTConfig(steps=sft_steps, demos=256)
    with torch.random.fork_rng():
        tok, base, _ = warm_started_base(mcfg, sft, env, s.seed, str(Path(s.work_dir)))
    policy = Policy(base, tok, mcfg, env.roles)
    params = SamplingParams(s.temperature, 1.0, max_new_tokens, tuple(env.stop))
    batched = HFEngine(policy, bf16=s.precision == "bf16")
    pool = env.task_set()["train"]
    out: dict[str, Any] = {"env": env.name, "roles": list(env.roles), "episodes": tasks * group,
                           "max_new_tokens": max_new_tokens}
    for name, engine, n in (("batched", batched, reps),
                            ("one_at_a_time", OneAtATimeEngine(batched), min(reps, one_at_a_time_reps))):
        rollout = Rollout(env, engine, tok, policy.role_adapter, [], params, mcfg.max_length, s.seed)
        times, turns, eps = [], 0, 0
        for k in range(n):
            chosen = [pool[(k * tasks + i) % len(pool)] for i in range(tasks)]
            t0 = time.perf_counter()
            groups = rollout.play_groups(chosen, [group] * tasks, step=k)
            times.append(time.perf_counter() - t0)
            episodes = [e for g in groups for e in g.episodes]
            eps += len(episodes)
            turns += sum(len(e.turns) for e in episodes)
        compute = rollout.counters()
        total = sum(times)
        out[name] = {"time_s": total, "episodes_per_s": eps / total,
                     "tokens_per_s": compute["generated_tokens_total"] / total,
                     "generated_tokens": compute["generated_tokens_total"],
                     "model_calls": compute["model_calls_total"],
                     "turns_per_episode": turns / max(eps, 1), "rollouts": n}
    out["speedup"] = out["batched"]["tokens_per_s"] / out["one_at_a_time"]["tokens_per_s"]
    out["speedup_episodes"] = out["batched"]["episodes_per_s"] / out["one_at_a_time"]["episodes_per_s"]
    return out
