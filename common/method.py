"""The method contract: everything a method may provide, declared here with a typed default.

The defaults are GRPO. A method is a class in `replications/<name>/method.py` that subclasses
`Method` and overrides only the hooks its paper changes. It is built from its own settings (its
`Config`) and a `RunView`: the environment and the few run settings a hook may read, never the whole
run config. It sees typed values: `Task`s (id, tier, data), `Group`s of `Episode`s of `Turn`s, and
returns a `Credit`. The core (`common/trainer.py`) calls the hooks in this order every RL step:

| hook                                        | default (GRPO)                                      |
| ------------------------------------------- | --------------------------------------------------- |
| `tasks(pool, step, rng)`                    | `trainer.tasks_per_step` tasks uniformly at random  |
| `play(rollout, tasks, step, mode, variant)` | `group_size(task, mode)` episodes per task          |
| `credit(groups, step) -> Credit`            | each episode's outcome, broadcast to all its turns  |
| `agent_of(episode, index)`                  | the turn's role (the key credit is normalized by)   |
| `excluded(episode)`                         | faulted episodes (and truncated ones if configured) |
| `trainable_roles(step)`                     | every role bound to a trainable adapter             |
| `extra_loss(batch, step)`                   | none                                                |
| `credit_metrics(groups, advantages)`        | none                                                |

and, outside the step: `validate()` (before any run starts), `env_protocols()` (environment
features the method needs, checked before the run), `group_size(task, mode)`, `state_dict()` /
`load_state_dict()` (what a checkpoint keeps of the method), and the class attributes
`paper_data_hint` (what the `paper` scale needs on local disk), `needs` (what it needs of an
environment, `envs/api/features.py`) and `compare_arm` (the arm `make compare` runs).

`play` is the only way episodes are made, in training (`mode="train"`) and in held-out
evaluation (`mode="eval"`): what a method plays is what gets evaluated (extra plays it makes go in
`Group.extra` and are evaluated under their tag). A method with zero RL steps (training-free)
runs through the same path: evaluation only, with the same records.

Each method declares its settings as a dataclass `Config` (fields documented where declared);
`method.*` keys in the Hydra config must match it exactly, and fields typed `Literal[...]` accept
only those values, so a typo fails before anything runs.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from common.credit import Advantages, Credit, get_estimator
from common.episode import Episode, Group, Task

if TYPE_CHECKING:
    import torch

    from common.config import ModelConfig, RunConfig, SFTConfig
    from common.loss import LossBatch
    from common.rollout import Rollout
    from envs.api.base import Environment

Mode = Literal["train", "eval"]


@dataclass(frozen=True)
class RunView:
    """What a method knows of the run besides its own settings: the environment and the few run settings
    a method's hooks read (never the whole `RunConfig`). Built by `RunView.of` in `common.fit.resolve`."""

    env: Environment
    scale: str  # smoke | cpu | small | paper (or a method's own paper_* scale)
    seed: int
    steps: int  # trainer.steps: RL steps (0: a training-free method)
    tasks_per_step: int  # trainer.tasks_per_step
    group_size: int  # trainer.group_size: episodes per task in training
    eval_k: int  # eval.k: episodes per task in evaluation
    kl_placement: str  # trainer.kl.placement: none | reward | loss
    world_size: int  # trainer.devices x trainer.num_nodes
    engine: str  # engine.name: hf | vllm
    work_dir: str  # caches a method may keep (a filter's audit, agents' warm starts)
    model: ModelConfig  # the base model (a method that builds models of its own: InFlowOp's agents)
    sft: SFTConfig  # the warm start's settings (likewise)

    @classmethod
    def of(cls, cfg: RunConfig, env: Environment) -> RunView:
        t = cfg.trainer
        return cls(env, cfg.scale, cfg.seed, t.steps, t.tasks_per_step, t.group_size, cfg.eval.k,
                   t.kl.placement, t.devices * t.num_nodes, cfg.engine.name, cfg.work_dir, cfg.model, cfg.sft)


@dataclass
class MethodConfig:
    """Settings shared by every method."""

    name: str = "grpo"
    estimator: str = "grpo"  # advantage estimator from common.credit.CREDIT: grpo | drgrpo | rloo
    # episodes whose context ran out train as failures (reward 0); false: drop them
    train_truncated: bool = True
    # scale=paper: the paper's data on local disk (see the method's paper_data_hint)
    paper_data: str | None = None
    # scale=paper: data sets of envs/benchmarks/paper_math/data.py that must be staged in paper_data
    # (checked before the run; an environment that reads its data, like paper_math, checks its own)
    paper_datasets: list[str] = field(default_factory=list)


class Method:
    """GRPO: sample tasks, play G episodes each, broadcast the group-normalized outcome."""

    Config: ClassVar[type[MethodConfig]] = MethodConfig
    # what scale=paper needs in method.paper_data (empty: nothing beyond the model)
    paper_data_hint: ClassVar[str] = ""
    # what the method needs of an environment (envs/api/features.py); empty: any environment. `make compare`
    # runs it on every environment that offers all of these
    needs: ClassVar[frozenset[str]] = frozenset()
    # the arm of conf/replication.yaml that `make compare` runs (its method.* settings); None: the arm named
    # after the method
    compare_arm: ClassVar[str | None] = None

    def __init__(self, cfg: MethodConfig, run: RunView):
        self.cfg = cfg
        self.run = run
        self.env = run.env
        self.estimator = get_estimator(cfg.estimator)

    # ---- before the run ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError for settings that make no sense together (called before any run).

        Subclasses call `super().validate()`: it checks the paper scale's local data.
        """
        if self.run.scale == "paper" and self.paper_data_hint and not (
                self.cfg.paper_data and Path(self.cfg.paper_data).exists()):
            raise ValueError("scale=paper needs the paper's data locally; "
                             f"method.paper_data={self.cfg.paper_data!r} does not exist: "
                             f"{self.paper_data_hint}")
        if self.run.scale == "paper" and self.cfg.paper_datasets:
            from envs.benchmarks.paper_math.data import check_staged, spec

            check_staged(self.cfg.paper_data,
                         {name: list(spec(name).files) for name in self.cfg.paper_datasets})

    def env_protocols(self) -> tuple[type, ...]:
        """Runtime-checkable protocols the environment must implement with these settings
        (`envs.api.protocols`); checked before the run starts."""
        return ()

    # ---- one step ---------------------------------------------------------------------------------
    def tasks(self, pool: Sequence[Task], step: int, rng: random.Random) -> list[Task]:
        """This step's tasks (from the train split)."""
        n = self.run.tasks_per_step
        idx = [rng.randrange(len(pool)) for _ in range(n)]
        return [pool[i] for i in idx]

    def group_size(self, task: Task, mode: Mode = "train") -> int:
        """Episodes per task: `trainer.group_size` in training, `eval.k` in evaluation."""
        return self.run.group_size if mode == "train" else self.run.eval_k

    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        """The episodes of this step (or of an evaluation); extra (counterfactual) plays go in
        `Group.extra` under their tag. `variant` plays an environment variant instead."""
        sizes = [self.group_size(t, mode) for t in tasks]
        return rollout.play_groups(tasks, sizes, step, mode=mode, variant=variant)

    def credit(self, groups: list[Group], step: int) -> Credit:
        """What each agent of each episode earned (a value: nothing is written into the episodes)."""
        return Credit.outcome(groups)

    def agent_of(self, episode: Episode, index: int) -> str:
        """The key under which turn `index` of `episode` reads its credit (and is normalized)."""
        return episode.turns[index].role

    def excluded(self, episode: Episode) -> bool:
        """Episodes left out of group statistics and training (not of evaluation)."""
        return episode.faulted or (episode.truncated and not self.cfg.train_truncated)

    def trainable_roles(self, step: int) -> set[str] | None:
        """Roles whose adapters train this step (None: every trainable role)."""
        return None

    def extra_loss(self, batch: LossBatch, step: int) -> torch.Tensor | None:
        """An extra term added to the chunk's share of the minibatch loss (None: nothing).

        Return it at the minibatch scale, e.g. `batch.mean(x_B_T)` for a per-token term: chunks of a
        minibatch add up, so a term that is not divided by the minibatch's size grows with it.
        """
        return None

    def credit_metrics(self, groups: list[Group], advantages: Advantages) -> dict[str, float]:
        """Numbers to log that need the final advantages (e.g. how credit separated good from bad actions)."""
        return {}

    # ---- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the method (running statistics, a pilot's result, counters)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` on resume."""
