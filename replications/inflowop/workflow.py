"""InFlowOp's workflow for one task, as plain functions: plan it under an arm, run it with contracts
and repair (`prepare`, `solve`), warm the profiles up by exploration (`warm_up`), and what an episode
records of a run (`record`). `method.py` plays these over a split; `tune.py` over the dev split."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from envs.testbeds.braid import DOMAINS, BraidTask
from replications.inflowop.agents import AgentCard, ModelAgent, Prior, Profile, model_agent, reliability
from replications.inflowop.execute import Answer, Executor, RepairMode, Trace, drive
from replications.inflowop.plan import Subtask, Weights, coalesce, greedy_split, single_plan, template_plan
from replications.inflowop.pools import HAND_SET, Pool

if TYPE_CHECKING:
    from replications.inflowop.method import InFlowOpConfig

Arm = Literal["single", "single-retry", "template", "rerun-all", "greedy", "no-repair", "no-profile",
              "inflowop"]

ARMS: dict[str, dict[str, Any]] = {  # arm -> planner, repair mode, profiles (warm-up and updates)
    "single": {"planner": "single", "repair": "none", "profiles": False},
    # the single agent re-runs the whole task (at most max_repairs times) when a contract breaks (#42)
    "single-retry": {"planner": "single", "repair": "rerun", "profiles": False},
    "template": {"planner": "template", "repair": "none", "profiles": False},
    "rerun-all": {"planner": "coalesce", "repair": "rerun", "profiles": True},
    "greedy": {"planner": "greedy", "repair": "local", "profiles": True},
    "no-repair": {"planner": "coalesce", "repair": "none", "profiles": True},
    "no-profile": {"planner": "coalesce", "repair": "local", "profiles": False},
    "inflowop": {"planner": "coalesce", "repair": "local", "profiles": True},
}


def _task_rng(seed: int, tag: str) -> random.Random:
    return random.Random(f"inflowop/{seed}/{tag}")


def pool_of(cfg: InFlowOpConfig) -> list[ModelAgent]:
    """The policy agents `cfg.policy_agents` names (none by default)."""
    return [model_agent(spec.split("+")) for spec in cfg.policy_agents]


def solve(task: BraidTask, cfg: InFlowOpConfig, profile: Profile | None, rng: random.Random,
          models: Sequence[ModelAgent] = (), answer: Answer | None = None, pool: Pool = HAND_SET,
          single_agent: str | None = None) -> Trace:
    """Plan and run one task under `cfg.arm`; `profile` is read for reliability and, when given,
    updated by the run. `models`: policy agents in the pool, whose operations `answer` computes."""
    executor, plan = prepare(task, cfg, profile, rng, models, pool, single_agent)
    return executor.run(plan, answer)


def prepare(task: BraidTask, cfg: InFlowOpConfig, profile: Profile | None, rng: random.Random,
            models: Sequence[ModelAgent] = (), pool: Pool = HAND_SET,
            single_agent: str | None = None) -> tuple[Executor, list[Subtask]]:
    """The plan of one task under `cfg.arm` (from the profile as it is now) and the executor that runs it.
    `pool`: the scripted agents and platform facts (the hand-set table unless a drawn pool);
    `single_agent`: the single-agent arms' agent (default `cfg.single_agent`). With a profile,
    `cfg.explore` > 0 plans with optimistic reliabilities (exploration, `agents.reliability`)."""
    spec = ARMS[cfg.arm]
    agents: dict[str, Any] = {**pool.by_name(with_created=cfg.create), **{m.name: m for m in models}}
    cards: list[AgentCard] = [a.card for a in agents.values()]
    prior = Prior(cfg.prior_declared, cfg.prior_undeclared, cfg.prior_strength)
    explore = cfg.explore if profile is not None else 0.0
    rel = (lambda card, c: reliability(card, c, profile, prior, explore))  # noqa: E731
    w = Weights(cfg.beta, cfg.gamma, pool.handoff, pool.composition)
    planner = spec["planner"]
    if planner == "single":
        plan = single_plan(task, single_agent or cfg.single_agent)
    elif planner == "template":
        plan = template_plan(task, cards)
    elif planner == "greedy":
        plan = greedy_split(task, cards, rel, w)
    else:
        plan = coalesce(task, cards, rel, w)
    repair: RepairMode = spec["repair"]
    return (Executor(task, agents, cards, rel, w, rng, repair=repair, max_repairs=cfg.max_repairs,
                     tau=cfg.tau, profile=profile, handoff=pool.handoff), plan)


def warm_up(tasks: list[BraidTask], profile: Profile, rng: random.Random, models: Sequence[ModelAgent] = (),
            answer: Answer | None = None, batch: int = 1, pool: Pool = HAND_SET) -> Profile:
    """Build profiles from exploration runs: every step of every task to a uniformly random agent of
    `pool` (policy agents included), no repair; the contracts judge each run (no labels). `batch`
    tasks run side by side (their policy agents' operations generated together). Returns `profile`,
    updated."""
    members: list[Any] = [*pool.agents, *models]
    agents: dict[str, Any] = {**pool.by_name(with_created=False), **{m.name: m for m in models}}
    cards = [a.card for a in members]
    for start in range(0, len(tasks), batch):
        runs = []
        for task in tasks[start:start + batch]:
            plan = [Subtask(frozenset({n.index}), rng.choice(members).name) for n in task.nodes]
            runs.append(Executor(task, agents, cards, lambda card, c: 0.5, Weights(0.0, 0.0), rng,
                                 repair="none", profile=profile, handoff=pool.handoff).steps(plan))
        drive(runs, answer)
    return profile


def record(task: BraidTask, trace: Trace, models: Sequence[ModelAgent] = ()) -> dict[str, Any]:
    """An episode's `info`: overall and per-domain numbers (evaluation averages each over the episodes
    reporting it); with policy agents in the pool, the share of subtasks they hold in the final plan."""
    truth = task.truth()
    success = all(trace.values.get(i) == truth[i] for i in task.sinks)
    d = DOMAINS[task.domain][0]
    merged = sum(1 for s in trace.plan if len(s.nodes) > 1)
    return {
        "success": success, "latency": trace.latency, "repair_latency": trace.repair_latency,
        "calls": trace.calls, "repair_calls": trace.repair_calls, "violations": trace.violations,
        "faults_assignment": trace.faults["assignment"],
        "faults_decomposition": trace.faults["decomposition"],
        "subtasks": len(trace.plan), "merged_share": merged / max(len(trace.plan), 1),
        "created_share": sum(s.agent.startswith("new-") for s in trace.plan) / max(len(trace.plan), 1),
        f"success_{d}": success, f"latency_{d}": trace.latency, f"repair_latency_{d}": trace.repair_latency,
    } | ({"policy_share": sum(s.agent in {m.name for m in models} for s in trace.plan)
          / max(len(trace.plan), 1)}
         if models else {})
