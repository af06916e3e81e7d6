"""The held-out evaluation over pools drawn from the prior (`method.pools` > 0; issue #42).

A cell of seed s plays pools s * P .. s * P + P - 1 (P = `method.pools`, = `eval.k`): play j of
every task is pool s * P + j's. For each pool, from scratch: the pool is drawn (`pools.draw_pool`),
the single-agent arms take the pool's best single agent on the dev split (`pools.best_single`),
the profile arms warm up on `warmup_tasks` train tasks by random pool agents (as the hand-set
pool's), then every held-out task is solved once, in order, the profile updating from the
contracts. Every randomness is seeded by (seed, pool, task), so two arms of one seed play the same
pools on the same tasks with the same draws (paired by pool).

Besides the usual per-episode numbers (`workflow.record`), each episode reports its pool's numbers
under `pool<id>_success` / `pool<id>_latency` (their means over the episodes that report them are
the pool's accuracy and latency: the per-pool claims table, `tables.py`), and, for each beta in
`method.frontier`, the same task solved by the same arm at that beta, after the same warm-up, its
profile updating from its own runs: `frontier_b<beta>_success` / `_latency` (the accuracy-latency
frontier; the main beta is the arm's own numbers).
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from common.episode import Episode, Group, Task, Turn, tasks_of
from envs.testbeds.braid import BraidTask
from replications.inflowop.agents import Profile
from replications.inflowop.pools import PoolPrior, best_single, draw_pool
from replications.inflowop.workflow import ARMS, _task_rng, record, solve, warm_up

if TYPE_CHECKING:
    from envs.testbeds.braid import BraidEnv
    from replications.inflowop.method import InFlowOpConfig


def beta_key(beta: float) -> str:
    """The metric prefix of a frontier point.

    >>> beta_key(0.05), beta_key(0.0), beta_key(0.5)
    ('frontier_b0.05', 'frontier_b0', 'frontier_b0.5')
    """
    return f"frontier_b{beta:g}"


def play_pools(env: BraidEnv, cfg: InFlowOpConfig, seed: int, tasks: list[Task]) -> list[Group]:
    """One Group per task, its episode j played by pool seed * cfg.pools + j (module docstring)."""
    prior = PoolPrior.of(cfg.pool_prior)
    spec = ARMS[cfg.arm]
    split = env.task_set()
    train = tasks_of(split["train"])
    dev = [BraidTask.parse(r.data) for r in tasks_of(split["dev"])]
    parsed = [(row, BraidTask.parse(row.data)) for row in tasks]
    episodes: dict[str, list[Episode]] = {row.id: [] for row in tasks}
    for j in range(cfg.pools):
        pool_id = seed * cfg.pools + j
        pool = draw_pool(pool_id, prior)
        single = best_single(pool, dev)[0] if spec["planner"] == "single" else None
        tag = f"pool-{pool_id}"
        profile = Profile() if spec["profiles"] else None
        if profile is not None and cfg.warmup_tasks:
            rows = [train[i] for i in _task_rng(seed, f"{tag}/warmup").sample(
                range(len(train)), min(cfg.warmup_tasks, len(train)))]
            warm_up([BraidTask.parse(r.data) for r in rows], profile, _task_rng(seed, f"{tag}/warmup-runs"),
                    pool=pool)
        frontier: dict[str, list[dict[str, Any]]] = {}
        for beta in cfg.frontier:
            other = replace(cfg, beta=float(beta))
            own = copy.deepcopy(profile)
            frontier[beta_key(beta)] = [
                record(task, solve(task, other, own, _task_rng(seed, f"{tag}/{row.id}"), pool=pool))
                for row, task in parsed]
        for i, (row, task) in enumerate(parsed):
            trace = solve(task, cfg, profile, _task_rng(seed, f"{tag}/{row.id}"), pool=pool,
                          single_agent=single)
            info = record(task, trace)
            info[f"pool{pool_id}_success"] = info["success"]
            info[f"pool{pool_id}_latency"] = info["latency"]
            for key, infos in frontier.items():
                info[f"{key}_success"] = infos[i]["success"]
                info[f"{key}_latency"] = infos[i]["latency"]
            turns = [Turn(role="agent", adapter=None, prompt_ids=[], action_ids=[], logprobs=[], text=line,
                          trainable=False)
                     for line in trace.log if line.startswith("call")]
            episodes[row.id].append(Episode(row.id, row.tier, turns=turns, reward=float(info["success"]),
                                            success=bool(info["success"]), info=info,
                                            counts_for_training=False))
    return [Group(row.id, row.tier, episodes[row.id]) for row in tasks]
