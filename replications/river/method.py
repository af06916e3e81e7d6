"""River: <the paper's title> (<first author> et al. <year>, arXiv <id>).

<The paper's idea, readable in one sitting: what goes wrong with GRPO's broadcast outcome (the
baseline, `replications/grpo`), what this method changes, and the equations it changes, cited by
number as the paper numbers them, e.g.

    A_{i,m} = (R_{i,m} - mean_G R_{.,m}) / (std_G R_{.,m} + eps)                          (eq. 4)

Then which hooks below carry each part of the idea.>

Scaffolded by `make new-method NAME=river`. Every hook of `common.method.Method` is below (the
hook table in `common/method.py` says when the core calls each), and each one calls the base class:
until a hook is edited, this method is GRPO. Override the hooks the paper changes and delete the others (GRPO's
own class overrides none). Formulas longer than a few lines go in a module of this folder as plain
functions, tested against hand-computed cases (SHARP's `shapley.py`, CCPO's `counterfactual.py`,
CANOPY's `signal.py`); an analysis of this method's own goes in `tables.py` (see paper/extras.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from common.credit import Advantages, Credit
from common.episode import Episode, Group
from common.method import Method, MethodConfig, Mode
from replications.river.penalty import jaccard, repeated_turns, repetition_penalty

__all__ = ["River", "RiverConfig", "jaccard", "repeated_turns", "repetition_penalty"]

if TYPE_CHECKING:
    import random

    import torch
    from datasets import Dataset

    from common.config import RunConfig
    from common.envs.base import Environment
    from common.loss import LossBatch
    from common.rollout import Rollout


@dataclass
class RiverConfig(MethodConfig):
    """The `method.*` settings of river. Document every knob where it is declared, with the paper's
    value and its mark: [P] the paper, [S] a secondary source, [I] our own choice."""

    name: str = "river"
    estimator: str = "grpo"  # group normalization (common.credit.CREDIT): grpo | drgrpo | rloo
    # An arm is a typed field: a `Literal` accepts only its values, checked before anything runs, e.g.
    # credit: Literal["broadcast", "river"] = "river"  # broadcast = GRPO (the baseline arm) | river


class River(Method):
    Config = RiverConfig
    # what scale=paper needs in method.paper_data (empty: nothing beyond the model), e.g.
    # "download <data set> to a local folder and pass method.paper_data=<folder>"
    paper_data_hint = ""
    cfg: RiverConfig

    def __init__(self, cfg: RiverConfig, run: RunConfig, env: Environment):
        """Build what the method keeps across steps (running statistics, a pilot's result, counters);
        whatever must survive a resume goes in `state_dict`."""
        super().__init__(cfg, run, env)

    # ---- before the run ---------------------------------------------------------------------------
    def validate(self) -> None:
        """Raise ValueError, saying how to fix it, for settings that make no sense together (called
        before any run starts, for every cell of a replication).

        Default: scale=paper needs `method.paper_data` on local disk when `paper_data_hint` is set.
        """
        super().validate()

    def env_protocols(self) -> tuple[type, ...]:
        """Environment features these settings need, as runtime-checkable protocols
        (`common.envs.protocols`, e.g. SHARP's `CounterfactualReplay`); the run refuses an
        environment without them before it starts.

        Default: none.
        """
        return super().env_protocols()

    # ---- one RL step (the hook table of common/method.py) -------------------------------------------
    def tasks(self, pool: Dataset, step: int, rng: random.Random) -> list[dict[str, Any]]:
        """This step's tasks: rows of the train split (`rng` is seeded by (run seed, step)).

        Default: `trainer.tasks_per_step` tasks drawn uniformly at random, with replacement.
        """
        return super().tasks(pool, step, rng)

    def group_size(self, task: dict[str, Any], mode: Mode = "train") -> int:
        """Episodes per task (called by `play`).

        Default: `trainer.group_size` in training, `eval.k` in evaluation.
        """
        return super().group_size(task, mode)

    def play(self, rollout: Rollout, tasks: list[dict[str, Any]], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        """Every episode of this step (`mode="train"`) or of a held-out evaluation (`mode="eval"`):
        what is played here is what gets evaluated. Extra plays (counterfactuals, solo plays) go in
        `Group.extra[tag]`, played with `rollout.play_groups(..., tag=tag, trainable=False)`; they
        are counted as compute under their tag and evaluated under `extra/<tag>`.

        Default: `group_size(task, mode)` episodes of each task, one Group per task.
        """
        return super().play(rollout, tasks, step, mode, variant)

    def credit(self, groups: list[Group], step: int) -> Credit:
        """What each agent of each episode earned, returned as a value (nothing is written into the
        episodes): `Credit(kind, values, tokens, metrics)` with `values[g][i]` = agent key -> scalar
        for episode i of group g. `kind="reward"`: the core normalizes each key within its group
        with `estimator` (after the KL-in-reward penalty); `kind="advantage"`: used as they are.
        Optional per-token advantages (`tokens`) and numbers to log (`metrics`).

        Default (GRPO): each episode's outcome reward under the key "*", broadcast to every turn.
        """
        return super().credit(groups, step)

    def agent_of(self, episode: Episode, index: int) -> str:
        """The key under which turn `index` of `episode` reads its credit, and is normalized (e.g.
        SHARP's `worker_<m>` for the m-th worker turn).

        Default: the turn's role.
        """
        return super().agent_of(episode, index)

    def excluded(self, episode: Episode) -> bool:
        """Episodes left out of group statistics and of training (never out of evaluation).

        Default: faulted episodes (the environment failed), and truncated ones (the context ran out)
        when `method.train_truncated=false`.
        """
        return super().excluded(episode)

    def trainable_roles(self, step: int) -> set[str] | None:
        """Roles whose adapters train this step (CCPO alternates its two roles).

        Default: None, every role bound to a trainable adapter.
        """
        return super().trainable_roles(step)

    def extra_loss(self, batch: LossBatch, step: int) -> torch.Tensor | None:
        """A term added to the policy loss of one chunk of one adapter's rows (`common.loss.LossBatch`,
        tensors `_B_T`). Return it at the minibatch scale, e.g. `batch.mean(x_B_T)` for a per-token
        term: the chunks of a minibatch add up.

        Default: None, no extra term.
        """
        return super().extra_loss(batch, step)

    def credit_metrics(self, groups: list[Group], advantages: Advantages) -> dict[str, float]:
        """Numbers to log that need the final advantages (e.g. how credit separated good actions from
        bad ones: `advantages.scalar(turn)`).

        Default: none.
        """
        return super().credit_metrics(groups, advantages)

    # ---- checkpoints ------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the method, so that a resumed run replays an uninterrupted one.

        Default: nothing.
        """
        return super().state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore `state_dict()` on resume.

        Default: nothing to restore.
        """
        super().load_state_dict(state)
