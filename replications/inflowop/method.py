"""InFlowOp: "Pay for the Fault, Not the Flow": cost-based decomposition, assignment and in-flow
repair of multi-agent workflows (arXiv 2610.01017; no public code). Not an RL method.

The paper's idea. A multi-agent workflow must decide how finely to split a task and which agent
takes each piece. InFlowOp gives every such decision one cost that weighs an agent's competence
(a rubric match of the piece's demands against the agent's card and its profile, a record of its
own past runs: no labels) against time and the cost of creating a new specialist:

    cost(S, a) = rel(S, a) + beta * lat(S, a) + gamma * create(a)                          (eq. C)

It decides granularity and assignment before execution with COALESCE (split top-down to atomic
steps, merge bottom-up while the cost says merging is cheaper), checks every subtask's
input/output contracts during execution, classifies a broken contract as an assignment or a
decomposition fault, and repairs it in flow: re-assign first, then re-decompose, re-running only
the faulty subtask and what depends on it (the rest is cached). The paper reports +7.15% to
+11.97% over single-agent baselines on its Braid benchmark (COALESCE +6.72 over greedy search,
in-flow repair +1.59, profile updates +1.33).

Where each part is (the exact forms are not public: every concrete form is ours, CARD.md):
- eq. C, COALESCE, the greedy split, the template and single-agent plans: `plan.py`;
- cards, profiles, reliability (eq. R) and the scripted agent pool: `agents.py`;
- contracts at run time, fault classification, repair and the cache: `execute.py`;
- the arms and the evaluation: this file. Training-free: `trainer.steps=0`; the core calls `play`
  once (`mode="eval"`) on the held-out tasks and records it like any run. Before that, the profiles
  warm up on `warmup_tasks` train tasks, each step run by a random pool agent (exploration; the
  contracts judge every run, no labels). Arms that keep updating profiles do so on held-out tasks
  too, from the contracts only.

The arms (`method.arm`): `single` (the best single agent runs the whole task in one call; which
agent is chosen on the dev split), `template` (a fixed workflow: atomic steps, each to the first
agent whose card declares its category, no repair), `rerun-all` (InFlowOp's plan; any fault re-runs
everything), `greedy` (the greedy split instead of COALESCE, otherwise InFlowOp), `no-repair`,
`no-profile` (reliability from the cards alone: no warm-up, no updates), `inflowop` (all of it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from common.envs.braid import DOMAINS, BraidEnv, BraidTask
from common.episode import Episode, Group, Turn
from common.method import Method, MethodConfig, Mode
from replications.inflowop.agents import POOL, AgentCard, Prior, Profile, agents_by_name, reliability
from replications.inflowop.execute import Executor, RepairMode, Trace, classify
from replications.inflowop.plan import (
    Subtask,
    Weights,
    best_agent,
    coalesce,
    cost,
    greedy_split,
    latency,
    single_plan,
    template_plan,
)

if TYPE_CHECKING:
    from common.config import RunConfig
    from common.envs.base import Environment
    from common.rollout import Rollout

__all__ = ["InFlowOp", "InFlowOpConfig", "Subtask", "Weights", "best_agent", "classify", "coalesce", "cost",
           "greedy_split", "latency", "reliability", "solve", "warm_up"]

Arm = Literal["single", "template", "rerun-all", "greedy", "no-repair", "no-profile", "inflowop"]


@dataclass
class InFlowOpConfig(MethodConfig):
    """The `method.*` settings of inflowop. Marks: [P] the paper, [S] a secondary source, [I] ours.
    beta, gamma, tau and single_agent were fixed on the dev split (tune.py), before any held-out run."""

    name: str = "inflowop"
    arm: Arm = "inflowop"  # which workflow plays (module docstring)
    beta: float = 0.02  # eq. C: cost per second of latency [I: dev split, tune.py]
    gamma: float = 0.0  # eq. C: cost of creating an on-demand specialist [I: dev split, tune.py]
    tau: float = 0.85  # a merged subtask's agent rated >= tau at every step: a fault is a decomposition fault [I]
    max_repairs: int = 4  # repairs (or re-runs) per task before the run goes on without repair [I]
    warmup_tasks: int = 128  # train tasks run by random pool agents to build the profiles first [I]
    prior_declared: float = 0.9  # eq. R: reliability prior of a category the card declares [I]
    prior_undeclared: float = 0.5  # eq. R: ... of one it does not declare [I]
    prior_strength: float = 4.0  # eq. R: the card prior is worth this many runs [I]
    create: bool = True  # on-demand specialists may be created (gamma) [I]
    single_agent: str = "generalist"  # the single-agent arm's agent: the best single agent on the dev split [I: tune.py]


ARMS: dict[str, dict[str, Any]] = {  # arm -> planner, repair mode, profiles (warm-up and updates)
    "single": {"planner": "single", "repair": "none", "profiles": False},
    "template": {"planner": "template", "repair": "none", "profiles": False},
    "rerun-all": {"planner": "coalesce", "repair": "rerun", "profiles": True},
    "greedy": {"planner": "greedy", "repair": "local", "profiles": True},
    "no-repair": {"planner": "coalesce", "repair": "none", "profiles": True},
    "no-profile": {"planner": "coalesce", "repair": "local", "profiles": False},
    "inflowop": {"planner": "coalesce", "repair": "local", "profiles": True},
}


def _task_rng(seed: int, tag: str) -> random.Random:
    return random.Random(f"inflowop/{seed}/{tag}")


def solve(task: BraidTask, cfg: InFlowOpConfig, profile: Profile | None, rng: random.Random) -> Trace:
    """Plan and run one task under `cfg.arm`; `profile` is read for reliability and, when given, updated by the run."""
    spec = ARMS[cfg.arm]
    agents = agents_by_name(with_created=cfg.create)
    cards: list[AgentCard] = [a.card for a in agents.values()]
    prior = Prior(cfg.prior_declared, cfg.prior_undeclared, cfg.prior_strength)
    rel = (lambda card, c: reliability(card, c, profile, prior))  # noqa: E731
    w = Weights(cfg.beta, cfg.gamma)
    planner = spec["planner"]
    if planner == "single":
        plan = single_plan(task, cfg.single_agent)
    elif planner == "template":
        plan = template_plan(task, cards)
    elif planner == "greedy":
        plan = greedy_split(task, cards, rel, w)
    else:
        plan = coalesce(task, cards, rel, w)
    repair: RepairMode = spec["repair"]
    return Executor(task, agents, cards, rel, w, rng, repair=repair, max_repairs=cfg.max_repairs, tau=cfg.tau,
                    profile=profile).run(plan)


def warm_up(tasks: list[BraidTask], profile: Profile, rng: random.Random) -> Profile:
    """Build profiles from exploration runs: every step of every task to a uniformly random pool
    agent, no repair; the contracts judge each run (no labels). Returns `profile`, updated."""
    agents = agents_by_name(with_created=False)
    cards = [a.card for a in POOL]
    for task in tasks:
        plan = [Subtask(frozenset({n.index}), rng.choice(POOL).name) for n in task.nodes]
        Executor(task, agents, cards, lambda card, c: 0.5, Weights(0.0, 0.0), rng, repair="none", profile=profile).run(plan)
    return profile


def record(task: BraidTask, trace: Trace) -> dict[str, Any]:
    """An episode's `info`: overall and per-domain numbers (evaluation averages each over the episodes reporting it)."""
    truth = task.truth()
    success = all(trace.values.get(i) == truth[i] for i in task.sinks)
    d = DOMAINS[task.domain][0]
    merged = sum(1 for s in trace.plan if len(s.nodes) > 1)
    return {
        "success": success, "latency": trace.latency, "repair_latency": trace.repair_latency,
        "calls": trace.calls, "repair_calls": trace.repair_calls, "violations": trace.violations,
        "faults_assignment": trace.faults["assignment"], "faults_decomposition": trace.faults["decomposition"],
        "subtasks": len(trace.plan), "merged_share": merged / max(len(trace.plan), 1),
        "created_share": sum(s.agent.startswith("new-") for s in trace.plan) / max(len(trace.plan), 1),
        f"success_{d}": success, f"latency_{d}": trace.latency, f"repair_latency_{d}": trace.repair_latency,
    }


class InFlowOp(Method):
    Config = InFlowOpConfig
    needs = frozenset({"typed_operation_dags"})  # plans and repairs braid's DAGs
    paper_data_hint = ("the paper's Braid benchmark and its six LLM backbones are not public: stage Braid's tasks in a "
                       "local folder and pass method.paper_data=<folder> (and model.path=<backbone>); not implemented yet")
    cfg: InFlowOpConfig

    def __init__(self, cfg: InFlowOpConfig, run: RunConfig, env: Environment):
        super().__init__(cfg, run, env)
        self.profile = Profile()

    def validate(self) -> None:
        """Training-free on `braid`, with settings in range; scale=small and paper refuse (no LLM agents here yet)."""
        if self.run.scale == "small":
            raise ValueError("scale=small would make SmolLM2 adapters pool agents (model=smollm2); InFlowOp's "
                             "LLM agents are not implemented yet: run scale=cpu (scripted agents) instead")
        super().validate()
        if self.run.scale == "paper":
            raise ValueError(f"scale=paper needs {self.paper_data_hint}")
        if not isinstance(self.env, BraidEnv):
            raise ValueError(f"inflowop plans DAGs of typed operations: set env=braid (got env={self.env.name})")
        if self.run.trainer.steps != 0:
            raise ValueError(f"inflowop is training-free: set trainer.steps=0 (got {self.run.trainer.steps})")
        c = self.cfg
        if c.beta < 0 or c.gamma < 0 or c.max_repairs < 0 or c.warmup_tasks < 0 or c.prior_strength <= 0:
            raise ValueError("method.beta, gamma, max_repairs, warmup_tasks must be >= 0 and prior_strength > 0")
        if not (0 < c.prior_undeclared < 1 and 0 < c.prior_declared < 1 and 0 < c.tau <= 1):
            raise ValueError("method.prior_declared and prior_undeclared must be in (0, 1), tau in (0, 1]")
        if c.single_agent not in {a.name for a in POOL}:
            raise ValueError(f"method.single_agent must be a pool agent {[a.name for a in POOL]}; got {c.single_agent!r}")

    def play(self, rollout: Rollout, tasks: list[dict[str, Any]], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        """The held-out evaluation: warm up the profiles (profile arms), then solve every task
        `eval.k` times in order, each with its own seeded randomness; one Group per task."""
        if mode != "eval":
            raise ValueError("inflowop is training-free: it only plays evaluations (trainer.steps=0)")
        seed = self.run.seed
        spec = ARMS[self.cfg.arm]
        profile = Profile() if spec["profiles"] else None
        if profile is not None and self.cfg.warmup_tasks:
            train = self.env.task_set()["train"]
            rows = [train[i] for i in _task_rng(seed, "warmup").sample(range(len(train)), min(self.cfg.warmup_tasks, len(train)))]
            warm_up([BraidTask.parse(_json(r["task"])) for r in rows], profile, _task_rng(seed, "warmup-runs"))
        groups = []
        for row in tasks:
            task = BraidTask.parse(_json(row["task"]))
            episodes = []
            for j in range(self.group_size(row, mode)):
                trace = solve(task, self.cfg, profile, _task_rng(seed, f"{row['id']}/{j}"))
                info = record(task, trace)
                turns = [Turn(role="agent", adapter=None, prompt_ids=[], action_ids=[], logprobs=[], text=line,
                              trainable=False) for line in trace.log if line.startswith("call")]
                episodes.append(Episode(row["id"], row["tier"], turns=turns, reward=float(info["success"]),
                                        success=bool(info["success"]), info=info, counts_for_training=False))
            groups.append(Group(row["id"], row["tier"], episodes))
        self.profile = profile or Profile()
        return groups

    def state_dict(self) -> dict[str, Any]:
        return {"profile": {f"{a}|{c}": v for (a, c), v in self.profile.counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.profile = Profile({tuple(k.split("|", 1)): list(v) for k, v in state.get("profile", {}).items()})  # type: ignore[misc]


def _json(text: str) -> dict[str, Any]:
    import json

    task: dict[str, Any] = json.loads(text)
    return task
