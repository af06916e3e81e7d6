"""River: environment filtering and a repetition penalty for terminal agents (arXiv 2608.22631).

River's claim: RL mostly refines how an agent orchestrates skills it already has, so the quality
of the reward matters more than the number of environments. Synthetic terminal environments are
often defective (the answer leaks into a file, the verifier accepts a shortcut or rejects a right
solution, the task is unsolvable, trivial or ambiguous); GRPO on all of them rewards the
shortcuts, which then carry over to clean tasks. River

1. filters the environments (`filter.py`): an audit keeps only those it judges Clean, then an
   oracle agent with two tries (pass@2) drops the tasks it cannot solve; GRPO then samples its
   tasks from what is left (the `tasks` hook);
2. adds a process-level regularizer against command loops (`penalty.py`), on top of GRPO's
   group-normalized outcome advantage A_i:

       Ã_{i,t} = A_i + s_{i,t},  s_{i,t} = -δ if turn t repeats an earlier turn (command and
       observation both Jaccard > 0.8), total capped at 0.15 per episode, δ = 0.05

   applied to that turn's tokens only (the `credit` hook returns advantages, the penalized turns'
   through `Credit.tokens`).

Arms (`method.pool`, `method.penalty`, `method.dynamic`): GRPO on the full train set (`full`), with
dynamic sampling (`dynamic.py`), on a random subset of the filtered set's size (`random`), River's filter
(`river`), with the penalty. Every arm is this class, so they share everything else.
Environments: those offering `env_pool_with_audit` (envs.api.protocols.AuditLabels): `terminal`, `arith`,
`service_desk` and `chain_tasks` (their defects: `env.share_*`, 0 by default). The penalty reads
`info["record"]`.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import numpy as np

from common.credit import BROADCAST, Credit
from common.episode import Group, Task, tasks_of
from common.method import Method, MethodConfig, Mode, RunView
from common.rollout import derive_seed
from envs.api.protocols import AuditLabels
from replications.river.behaviour import behaviour
from replications.river.dynamic import resample
from replications.river.filter import FilterReport, audit_rates, cached_filter, random_subset
from replications.river.penalty import jaccard, repeated_turns, repetition_penalty

if TYPE_CHECKING:
    from common.rollout import Rollout

__all__ = ["River", "RiverConfig", "jaccard", "repeated_turns", "repetition_penalty"]


@dataclass
class RiverConfig(MethodConfig):
    """The `method.*` settings of River. Marks: [P] the paper, [S] a secondary source, [I] ours."""

    name: str = "river"
    estimator: str = "grpo"  # group normalization of the outcome (common.credit.CREDIT) [P: GRPO]
    # which train tasks GRPO samples: full = all (the GRPO baseline) | random = a random subset of the
    # filtered set's size (the control) | river = the audit's Clean tasks the oracle solves in two tries [P]
    pool: Literal["full", "random", "river"] = "river"
    penalty: bool = True  # River's repetition penalty on looping turns [S]
    threshold: float = 0.8  # Jaccard similarity above which a turn repeats an earlier one [S]
    delta: float = 0.05  # penalty per repeated turn [S]
    cap: float = 0.15  # the most penalty per episode (no partial penalty past it) [S]
    # the simulated audit's quality, from the paper's re-judge: agreement, defect-flag and Clean precision [S]
    audit_agreement: float = 0.833
    audit_flag_precision: float = 0.895
    audit_clean_precision: float = 0.40
    oracle_tries: int = 2  # the oracle's attempts per task (pass@2) [S]
    # the audit's draws, the oracle's tries and the random subset: an int fixes one draw for every RL seed
    # (the first setting); None draws them per seed (filter_seed = the run's seed; the second setting) [I]
    filter_seed: int | None = 0
    # dynamic sampling (DAPO's; dynamic.py): zero-signal train groups dropped and tasks drawn again, up to
    # `dynamic_rounds` more plays; the update trains on as many groups as every other arm's [I]
    dynamic: bool = False
    dynamic_rounds: int = 4


class River(Method):
    Config = RiverConfig
    needs = frozenset({"env_pool_with_audit"})  # the filter reads the tasks' audit labels
    # scale=paper: River's synthetic environments and the terminal benchmarks are not public
    paper_data_hint = ("River's 14,399 synthetic terminal environments and the Terminal-Bench / "
                       "TerminalWorld tasks are not public (no code or data released): stage them in a local "
                       "folder and pass method.paper_data=<folder>")
    cfg: RiverConfig

    def __init__(self, cfg: RiverConfig, run: RunView):
        super().__init__(cfg, run)
        self._pool: list[int] | None = None
        self.report: FilterReport | None = None
        self.pool_stats: dict[str, float] = {}
        self.dynamic_stats: dict[str, float] = {}

    def validate(self) -> None:
        super().validate()
        if not 0 <= self.cfg.threshold <= 1 or self.cfg.delta < 0 or self.cfg.cap < 0:
            raise ValueError(f"method.threshold in [0, 1], method.delta >= 0 and method.cap >= 0; got "
                             f"{self.cfg.threshold}, {self.cfg.delta}, {self.cfg.cap}")
        if self.cfg.dynamic_rounds < 0:
            raise ValueError(f"method.dynamic_rounds must be >= 0; got {self.cfg.dynamic_rounds}")
        if self.cfg.oracle_tries < 1:
            raise ValueError(f"method.oracle_tries must be >= 1; got {self.cfg.oracle_tries}")
        if self.cfg.pool != "full" and not isinstance(self.env, AuditLabels):
            raise ValueError(f"method.pool={self.cfg.pool} filters train tasks by their audit labels; "
                             f"env={self.env.name} has none (it does not offer env_pool_with_audit): use "
                             "env=terminal, arith, service_desk or chain_tasks, or method.pool=full")
        audit_rates(self.cfg.audit_agreement, self.cfg.audit_flag_precision, self.cfg.audit_clean_precision)
        if self.run.scale == "paper" and not (Path(self.cfg.paper_data or "") / "terminal_bench").is_dir():
            raise ValueError(f"scale=paper needs {self.cfg.paper_data}/terminal_bench (no terminal_bench "
                             f"environment is in envs yet): {self.paper_data_hint}")

    # ---- the filter -------------------------------------------------------------------------------
    @property
    def filter_seed(self) -> int:
        """The seed of the audit, the oracle and the random subset: `method.filter_seed`, or the run's."""
        return self.run.seed if self.cfg.filter_seed is None else self.cfg.filter_seed

    def filter_report(self) -> FilterReport:
        """River's filter over the train split, computed once and cached under work_dir (it plays the
        oracle in the real sandbox: tens of seconds), keyed by everything it depends on."""
        if self.report is None:
            self.report = cached_filter(self.env, (self.cfg.audit_agreement, self.cfg.audit_flag_precision,
                                                   self.cfg.audit_clean_precision),
                                        self.cfg.oracle_tries, self.filter_seed, self.run.work_dir)
        return self.report

    def pool(self, n_train: int) -> list[int]:
        """The train indices this arm samples from."""
        if self._pool is None:
            if self.cfg.pool == "full":
                self._pool = list(range(n_train))
            else:
                kept = self.filter_report().kept
                if not kept:
                    raise ValueError("River's filter kept no train task: raise env.train_size")
                self._pool = (kept if self.cfg.pool == "river"
                              else random_subset(n_train, len(kept), self.filter_seed))
            train, env = tasks_of(self.env.task_set()["train"]), self.env
            if isinstance(env, AuditLabels):  # the pool's figures (pool=full on an env without labels: none)
                defects, shortcut = [env.defect_of(train[i].data) for i in self._pool], env.shortcut_defects()
                self.pool_stats = {"pool_size": float(len(defects)),
                                   "pool_defective": float(np.mean([d != "clean" for d in defects])),
                                   "pool_shortcut": float(np.mean([d in shortcut for d in defects]))}
        return self._pool

    def tasks(self, pool: Sequence[Task], step: int, rng: random.Random) -> list[Task]:
        """`trainer.tasks_per_step` tasks drawn uniformly, with replacement, from this arm's pool: a subset of
        the train split, whatever `pool` is given (the design check passes dev tasks; River's arms differ
        in which train tasks they sample, so its shared batch plays each arm's own train tasks)."""
        train = tasks_of(self.env.task_set()["train"])
        indices = self.pool(len(train))
        return [train[indices[rng.randrange(len(indices))]] for _ in range(self.run.tasks_per_step)]

    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        """GRPO's play; with `dynamic` (training only), zero-signal groups replaced (`dynamic.py`)."""
        groups = super().play(rollout, tasks, step, mode, variant)
        if mode != "train" or not self.cfg.dynamic:
            return groups
        rng = random.Random(derive_seed(self.run.seed, step, "dynamic"))
        groups, self.dynamic_stats = resample(rollout, groups, len(tasks), lambda r: self.tasks([], step, r),
                                              lambda t: self.group_size(t, mode), rng, step,
                                              self.cfg.dynamic_rounds, variant, self.excluded)
        return groups

    # ---- credit -----------------------------------------------------------------------------------
    def credit(self, groups: list[Group], step: int) -> Credit:
        """GRPO's A_i broadcast to every turn, plus, with `penalty`, s_{i,t} on the tokens of each repeated
        turn (Ã_{i,t} = A_i + s_{i,t}); and the step's behaviour metrics."""
        values: list[list[dict[str, float]]] = []
        tokens: dict[tuple[int, int, int], list[float]] = {}
        penalized, turns_seen = 0, 0
        for g, group in enumerate(groups):
            kept = [i for i, e in enumerate(group.episodes) if not self.excluded(e)]
            adv_G = self.estimator(np.array([group.episodes[i].reward for i in kept], dtype=np.float64))
            advantage = dict(zip(kept, (float(a) for a in adv_G), strict=True))
            values.append([{BROADCAST: advantage.get(i, 0.0)} for i in range(len(group.episodes))])
            for i in kept:
                episode = group.episodes[i]
                record = episode.info.get("record") or {}
                pairs = [tuple(p) for p in record.get("turns", [])]
                if len(pairs) != len(episode.turns):  # a truncated episode has no record of its last turn
                    continue
                turns_seen += len(pairs)
                if not self.cfg.penalty:
                    continue
                for t, s in enumerate(repetition_penalty(pairs, self.cfg.threshold, self.cfg.delta,
                                                         self.cfg.cap)):
                    if s:
                        penalized += 1
                        tokens[(g, i, t)] = [advantage[i] + s] * episode.turns[t].num_action_tokens
        metrics = {**behaviour(groups), **self.pool_stats, **self.dynamic_stats,
                   "penalized_turn_rate": penalized / max(turns_seen, 1)}
        return Credit("advantage", values, tokens, metrics)
