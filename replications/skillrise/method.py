"""SkillRise: one policy solves a chain of related tasks and curates the skill document they share
(arXiv 2607.26784; public reproduction of the official code: lyq1119/SkillRise-reproduction-and-refinement).

GRPO treats every task alone: what one task taught is gone by the next. SkillRise plays a *chain*
of K related tasks (one family, ordered by plan length) and lets the same policy, between tasks,
rewrite a skill document that lives only in the prompt:

    solve(0) -> curate(0) -> solve(1) -> curate(1) -> ... -> solve(K-1)

The document starts empty; each curate turn writes it anew between `<skill>` tags and solve(p+1) reads
it. N chains of the same K tasks form a chain group. Rewards (`chain.py`):

    solve p:   r_p                                   (the task's own reward, invalid actions penalized)
    curate p:  R_p = sum_{j>p} decay^(j-p) r_j       (decay 0.6: later tasks, the only cross-task credit)
    advantage: score - mean over its (chain group, position, role); no std division;
               curate advantages x curate_loss_weight

The arms (`method.arm`), on the same steps, learning rate, warm start and seeds:

- `grpo`: no document, each task alone, group size `trainer.group_size` x K (as many task plays);
- `skillrise`: chains, curate rewarded by the later tasks (the paper);
- `current`: chains, curate rewarded by the task it just watched (r_p), which nothing it writes can
  change: the control for the curate reward;
- `oracle`: no curate turn, task p + 1 reads the right document (`oracle_doc`): the design check's
  positive control (#41). Step sizes (#41): `advantage_norm=std` divides the chain advantages by their
  key's std as GRPO does; `token_norm=role` averages each role's tokens on their own (`role_token_scales`).

Hooks: `tasks` draws whole families, `play` plays the chains position by position, `credit` returns the
chain advantages. Evaluation plays chains too (a task's `eval.k` samples are its k chains), so per-tier
scores are success by chain position; the curate plays are summarized under `extra/curate`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import numpy as np

from common.credit import Credit
from common.episode import Group, Task
from common.method import Method, MethodConfig, Mode, RunView
from replications.skillrise.chain import (
    DOC_KINDS,
    Slot,
    chain_scores,
    chain_slots,
    chain_spec,
    chains_of,
    curate_rewards,
    current_task_rewards,
    family_indices,
    grouped_advantages,
    oracle_doc,
    play_metrics,
    play_specs,
    role_token_scales,
)
from replications.skillrise.checks import check_env, check_settings

if TYPE_CHECKING:
    import random

    from common.rollout import Rollout

__all__ = ["DOC_KINDS", "SkillRise", "SkillRiseConfig", "Slot", "chains_of", "curate_rewards",
           "current_task_rewards", "grouped_advantages"]


@dataclass
class SkillRiseConfig(MethodConfig):
    """The `method.*` settings of skillrise: [P] the paper (and its official code), [I] our own choice."""

    name: str = "skillrise"
    # the grpo arm's group normalization (chain arms return advantages themselves) [P: GRPO]
    estimator: str = "grpo"
    # grpo (no document) | skillrise | current (control) [I]
    arm: Literal["grpo", "skillrise", "current", "oracle"] = "skillrise"
    decay: float = 0.6  # the curate reward's discount over later tasks (official traj_gamma) [P]
    curate_loss_weight: float = 1.0  # multiplies curate advantages [P]
    advantage_norm: Literal["paper", "std"] = "paper"  # chain arms: mean-centred [P] | / std too, as GRPO [I]
    token_norm: Literal["all", "role"] = "all"  # one token mean | each role's tokens on their own [I, #41]


class SkillRise(Method):
    Config = SkillRiseConfig
    needs = frozenset({"task_families"})  # chains of related tasks with a curate turn
    paper_data_hint = ""
    cfg: SkillRiseConfig

    def __init__(self, cfg: SkillRiseConfig, run: RunView):
        super().__init__(cfg, run)
        self.chain_length = len(self.env.tiers)  # K: one task per plan length
        self._families: tuple[Sequence[Task], list[list[int]]] | None = None

    @property
    def chains(self) -> bool:
        return self.cfg.arm != "grpo"

    def validate(self) -> None:
        """A chain arm's environment needs a curate turn; the core's checks; the settings' (`checks.py`)."""
        check_env(self)
        super().validate()
        check_settings(self, SkillRiseConfig)

    # ---- tasks ------------------------------------------------------------------------------------
    def families(self, pool: Sequence[Task]) -> list[list[int]]:
        """Indices of each family's tasks in `pool`, each family's by plan length (cached per pool)."""
        if self._families is None or self._families[0] is not pool:
            self._families = (pool, family_indices(pool))
        return self._families[1]

    def tasks(self, pool: Sequence[Task], step: int, rng: random.Random) -> list[Task]:
        """Chain arms: `trainer.tasks_per_step` distinct families at random, each family's K rows in
        chain order; grpo: as many single tasks (drawn as GRPO draws them)."""
        if not self.chains:
            return super().tasks(pool, step, rng)
        fams = self.families(pool)
        if self.run.tasks_per_step > len(fams):
            raise ValueError(f"trainer.tasks_per_step={self.run.tasks_per_step} families per step, but the "
                             f"train split has {len(fams)}: raise env.train_size or lower "
                             "trainer.tasks_per_step")
        picked = rng.sample(fams, self.run.tasks_per_step)
        return [pool[i] for fam in picked for i in fam]

    def group_size(self, task: Task, mode: Mode = "train") -> int:
        """grpo: `trainer.group_size` x K episodes per task in training, so task plays match the chains."""
        if mode == "train" and not self.chains:
            return self.run.group_size * self.chain_length
        return super().group_size(task, mode)

    # ---- play -------------------------------------------------------------------------------------
    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        if not self.chains or variant != "main":
            return super().play(rollout, tasks, step, mode, variant)
        return self.play_chains(rollout, tasks, step, mode)

    def play_chains(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode) -> list[Group]:
        """N chains per family of `tasks` (rows grouped by family, in plan-length order), position by
        position. Training returns one group per (family, position, role); evaluation returns the solve
        groups with their curate plays under `extra["curate"]`."""
        families = chains_of(tasks)
        n = self.run.group_size if mode == "train" else self.run.eval_k
        docs = [[""] * n for _ in families]
        solve: dict[tuple[int, int], Group] = {}
        curate: dict[tuple[int, int], Group] = {}
        for p in range(max(len(f) for f in families)):
            live = [(f, fam[p]) for f, fam in enumerate(families) if p < len(fam)]
            specs = [chain_spec(row, mode, "main", skill=docs[f][c]) for f, row in live for c in range(n)]
            episodes = play_specs(rollout, specs, step, mode, f"solve{p}")
            for j, (f, row) in enumerate(live):
                solve[f, p] = Group(row.id, row.tier, episodes[j * n:(j + 1) * n])
            live = [(f, row) for f, row in live if p + 1 < len(families[f])]
            if self.cfg.arm == "oracle":  # no curate turn: the next task reads the right document
                for f, row in live:
                    docs[f] = [oracle_doc(row)] * n
            if self.cfg.arm == "oracle" or not live:
                continue
            specs = [chain_spec(row, mode, "curate", skill=docs[f][c],
                                found=solve[f, p].episodes[c].info.get("found", []))
                     for f, row in live for c in range(n)]
            episodes = play_specs(rollout, specs, step, mode, f"curate{p}")
            for j, (f, row) in enumerate(live):
                curate[f, p] = Group(f"{row.id}/curate", row.tier, episodes[j * n:(j + 1) * n])
                docs[f] = [str(e.info.get("skill", "")) for e in curate[f, p].episodes]
        if mode == "eval":
            for key, g in curate.items():
                solve[key].extra["curate"] = g.episodes
            return [solve[key] for key in sorted(solve)]
        return [g for key in sorted(solve) for g in ([solve[key]] + ([curate[key]] if key in curate else []))]

    # ---- credit -----------------------------------------------------------------------------------
    def credit(self, groups: list[Group], step: int) -> Credit:
        """grpo: the outcome, broadcast (GRPO). Chain arms: every solve and curate episode's score
        (r_p; R_p or, in `current`, r_p, plus the curate turn's own invalid-action penalty), mean-centered
        within its (chain group, position, role) (and divided by its std with advantage_norm=std), curate
        advantages x curate_loss_weight (each role's x N / N_role with token_norm=role)."""
        metrics = play_metrics(groups, self.env.tiers)
        if not self.chains:
            return Credit.outcome(groups, metrics)
        slots = [[Slot(f, p, role, c) for c in range(len(g.episodes))]
                 for g, (f, p, role) in zip(groups, chain_slots(groups), strict=True)]
        rewards = (functools.partial(curate_rewards, decay=self.cfg.decay) if self.cfg.arm == "skillrise"
                   else current_task_rewards)
        flat, scores, keys, weights = chain_scores(groups, slots, rewards, self.excluded,
                                                   self.cfg.curate_loss_weight)
        if self.cfg.token_norm == "role":
            scales = role_token_scales(groups, slots, self.excluded)
            weights = [w * scales.get(str(k[2]), 1.0) for w, k in zip(weights, keys, strict=True)]
            metrics.update({f"token_scale_{role}": v for role, v in scales.items()})
        advantages = grouped_advantages(scores, keys, weights, std=self.cfg.advantage_norm == "std")
        values: list[list[dict[str, float]]] = [[{} for _ in g.episodes] for g in groups]
        for (gi, i), a in zip(flat, advantages, strict=True):
            values[gi][i] = {"*": a}
        curate_scores = [s for s, k in zip(scores, keys, strict=True) if k[2] == "curate"]
        metrics["curate_reward_mean"] = float(np.mean(curate_scores)) if curate_scores else 0.0
        return Credit("advantage", values, metrics=metrics)
