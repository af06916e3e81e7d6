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

Policy agents (`method.policy_agents`, e.g. `[list, num, text+cipher]`; empty by default, the
scripted pool of the committed replication): LoRA adapters of the run's model warm-started on those
categories join the pool (`policy_agents.py`); their competence per category is measured on the
dev split and recorded in the run's metrics (`competence_<agent>_<category>`), and the optimizer
treats them like any agent (card prior, profile from their own runs). With them, `play_batch`
tasks are planned and run side by side so that their operations are generated in batches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from common.episode import Episode, Group, Task, Turn, tasks_of
from common.method import Method, MethodConfig, Mode, RunView
from envs.testbeds.braid import BraidEnv, BraidTask
from replications.inflowop.agents import ModelAgent, Profile, model_agent, reliability
from replications.inflowop.checks import check_settings
from replications.inflowop.execute import Answer, classify, drive
from replications.inflowop.plan import Subtask, Weights, best_agent, coalesce, cost, greedy_split, latency
from replications.inflowop.workflow import ARMS, Arm, _task_rng, pool_of, prepare, record, solve, warm_up

if TYPE_CHECKING:
    from common.rollout import Rollout

__all__ = ["InFlowOp", "InFlowOpConfig", "Subtask", "Weights", "best_agent", "classify", "coalesce", "cost",
           "greedy_split", "latency", "model_agent", "pool_of", "prepare", "reliability", "solve", "warm_up"]


@dataclass
class InFlowOpConfig(MethodConfig):
    """The `method.*` settings of inflowop. Marks: [P] the paper, [S] a secondary source, [I] ours.
    beta, gamma, tau and single_agent were fixed on the dev split (tune.py), before any held-out run."""

    name: str = "inflowop"
    arm: Arm = "inflowop"  # which workflow plays (module docstring)
    beta: float = 0.02  # eq. C: cost per second of latency [I: dev split, tune.py]
    gamma: float = 0.0  # eq. C: cost of creating an on-demand specialist [I: dev split, tune.py]
    # a merged subtask's agent rated >= tau at every step: a fault is a decomposition fault [I]
    tau: float = 0.85
    max_repairs: int = 4  # repairs (or re-runs) per task before the run goes on without repair [I]
    warmup_tasks: int = 128  # train tasks run by random pool agents to build the profiles first [I]
    prior_declared: float = 0.9  # eq. R: reliability prior of a category the card declares [I]
    prior_undeclared: float = 0.5  # eq. R: ... of one it does not declare [I]
    prior_strength: float = 4.0  # eq. R: the card prior is worth this many runs [I]
    create: bool = True  # on-demand specialists may be created (gamma) [I]
    # the single-agent arm's agent: the best single agent on the dev split [I: tune.py]
    single_agent: str = "generalist"
    # policy agents (issue #22): LoRA adapters of the run's model, one per entry, warm-started on its
    # categories ("list", "text+cipher", ...); empty: the scripted pool only [I]
    policy_agents: list[str] = field(default_factory=list)
    agent_steps: int = 300  # SFT steps per adapter (policy_agents.AgentTraining) [I]
    agent_lr: float = 3e-3  # SFT learning rate of the adapters [I]
    agent_batch_size: int = 32  # SFT batch [I]
    agent_demos: int = 256  # train tasks whose nodes of the agent's categories are demonstrated [I]
    agent_seed: int = 0  # the adapters' SFT seed: the same adapters for every run seed (paired arms) [I]
    agent_temperature: float = 0.0  # policy agents decode greedily (their best guess) [I]
    agent_max_tokens: int = 40  # longest output: a 12-item list of two-digit numbers [I]
    # with policy agents: tasks planned and run side by side (their generations batched) [I]
    play_batch: int = 128
    # pools drawn from the prior (issue #42; conf/pool/prior.yaml, pools.py, pool_play.py): 0 = the hand-set
    # pool of agents.py; P > 0: each cell plays P pools (eval.k = P), pool ids seed * P .. seed * P + P - 1
    pools: int = 0
    pool_prior: dict[str, Any] = field(default_factory=dict)  # PoolPrior's fields; missing: its defaults
    # exploration: the planner reads the profile's mean + `explore` posterior sds (agents.reliability)
    explore: float = 0.0
    frontier: list[float] = field(default_factory=list)  # betas also played per pool (pool_play.py)


class InFlowOp(Method):
    Config = InFlowOpConfig
    needs = frozenset({"typed_operation_dags"})  # plans and repairs braid's DAGs
    paper_data_hint = ("the paper's Braid benchmark and its six LLM backbones are not public: stage Braid's "
                       "tasks in a local folder and pass method.paper_data=<folder> (and "
                       "model.path=<backbone>); not implemented yet")
    cfg: InFlowOpConfig

    def __init__(self, cfg: InFlowOpConfig, run: RunView):
        super().__init__(cfg, run)
        self.profile = Profile()
        self.agent_records: dict[str, dict[str, Any]] = {}  # policy agents' warm starts (cached or trained)
        # policy agents' measured competence (dev split)
        self.competence: dict[str, dict[str, dict[str, float]]] = {}

    def validate(self) -> None:
        """Training-free on `braid`, with settings in range; scale=paper (no data) refuses. scale=small (#46)
        plays SmolLM2 adapters as policy agents, their warm start sized to an hour (conf/scale/small.yaml)."""
        super().validate()
        if self.run.scale == "paper":
            raise ValueError(f"scale=paper needs {self.paper_data_hint}")
        if not isinstance(self.env, BraidEnv):
            raise ValueError("inflowop plans DAGs of typed operations: set env=braid "
                             f"(got env={self.env.name})")
        if self.run.steps != 0:
            raise ValueError(f"inflowop is training-free: set trainer.steps=0 (got {self.run.steps})")
        check_settings(self.cfg, self.run.engine, self.run.eval_k)  # method.* in range, the pool well named

    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        """The held-out evaluation: warm up the profiles (profile arms), then solve every task
        `eval.k` times in order, each with its own seeded randomness; one Group per task."""
        if mode != "eval":
            raise ValueError("inflowop is training-free: it only plays evaluations (trainer.steps=0)")
        seed = self.run.seed
        if self.cfg.pools:  # pools drawn from the prior (issue #42)
            from replications.inflowop.pool_play import play_pools
            return play_pools(self.env, self.cfg, seed, tasks)  # type: ignore[arg-type]  # braid: validate()
        spec = ARMS[self.cfg.arm]
        models = pool_of(self.cfg)
        answer, extra = self._policy_pool(rollout, models) if models else (None, {})
        batch = self.cfg.play_batch if models else 1  # scripted only: one task at a time, exactly as before
        names = {m.name for m in models}
        profile = Profile() if spec["profiles"] else None
        if profile is not None and self.cfg.warmup_tasks:
            train = tasks_of(self.env.task_set()["train"])
            rows = [train[i] for i in _task_rng(seed, "warmup").sample(
                range(len(train)), min(self.cfg.warmup_tasks, len(train)))]
            warm_up([BraidTask.parse(r.data) for r in rows], profile, _task_rng(seed, "warmup-runs"), models,
                    answer, batch)
        plays = [(row, BraidTask.parse(row.data), j)
                 for row in tasks for j in range(self.group_size(row, mode))]
        episodes: dict[str, list[Episode]] = {row.id: [] for row in tasks}
        for start in range(0, len(plays), batch):
            chunk = plays[start:start + batch]
            runs, planned = [], []
            for row, task, j in chunk:  # planned from the profile as it stands before the chunk runs
                executor, plan = prepare(task, self.cfg, profile, _task_rng(seed, f"{row.id}/{j}"), models)
                runs.append(executor.steps(plan))
                planned.append({"policy_share_planned": sum(s.agent in names for s in plan) / len(plan)}
                               if models else {})
            for (row, task, _), trace, before in zip(chunk, drive(runs, answer), planned, strict=True):
                info = record(task, trace, models) | before | extra
                turns = [Turn(role="agent", adapter=None, prompt_ids=[], action_ids=[], logprobs=[],
                              text=line, trainable=False)
                         for line in trace.log if line.startswith("call")]
                episodes[row.id].append(Episode(row.id, row.tier, turns=turns, reward=float(info["success"]),
                                                success=bool(info["success"]), info=info,
                                                counts_for_training=False))
        self.profile = profile or Profile()
        return [Group(row.id, row.tier, episodes[row.id]) for row in tasks]

    def _policy_pool(self, rollout: Rollout, models: list[ModelAgent]) -> tuple[Answer, dict[str, float]]:
        """The policy agents' adapters (warm-started or loaded) and their competence on the dev split."""
        from replications.inflowop.policy_agents import policy_pool

        assert isinstance(self.env, BraidEnv)  # validate() made sure
        answer, self.agent_records, self.competence = policy_pool(rollout, models, self.env, self.cfg,
                                                                  self.run)
        return answer, {f"competence_{agent}_{cat}": row["accuracy"]
                        for agent, table in self.competence.items() for cat, row in table.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"profile": {f"{a}|{c}": v for (a, c), v in self.profile.counts.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.profile = Profile({tuple(k.split("|", 1)): list(v)  # type: ignore[misc]
                                for k, v in state.get("profile", {}).items()})

