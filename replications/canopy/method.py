"""CANOPY: "Explore More, Drift Less" (arXiv 2609.01245; code: AlibabaResearch/CANOPY-RL).

Outcome-only RL on long-horizon interactive tasks fails in two ways. *Signal starvation*: a group
whose episodes all fail (or all succeed) has zero group-normalized advantage, so it carries no
gradient; on the hardest tasks almost every small group is like that. *Drift*: updates that wander
from the base model collapse the policy's entropy and lose what the base could do. CANOPY adds no
new estimator (GRPO with std normalization, r in {0, 1}); it is a protocol:

1. Explore more. The probability that a group of n episodes at success rate p carries signal is
   P_sig(p, n) = 1 - p^n - (1 - p)^n. A pilot on the hardest tier measures p_min, and the group
   size is the smallest n with at least one success with probability tau:
   n >= ln(1 - tau) / ln(1 - p_min). At p = 0.05: 34% of groups carry signal at n = 8, 81% at
   n = 32 (the paper's numbers; `signal_probability`, `group_size` in `signal.py`).
2. Quarantine. Episodes that failed because the environment itself failed (an infrastructure
   fault, `Episode.faulted`) are dropped from group statistics and from training (`excluded`):
   they are not the policy's doing. `quarantine=false` keeps them in both.
3. Drift less. L = (1/N) sum_i sum_t M_it [-min(rho A, clip(rho, 1 +- 0.2) A) + beta KL_k3(pi || pi_base)]
   over the non-quarantined episodes: N = all action tokens of the batch (token-mean), environment
   tokens masked, no entropy bonus, mini-batch = batch and one update per step (so rho = 1), and a
   k3 KL to the fixed base. These are settings of the shared trainer (`conf/config.yaml`), not
   code here; the ablation arms change them.

The hooks: `play` runs the pilot once (before the first training step, on the warm start) and
then plays groups of the sized n; `excluded` quarantines; `credit` is GRPO's and logs the measured
share of groups with signal per tier (`signal_check` sets it against P_sig at the measured
success rates); `tasks` can leave out the hardest tier (an ablation).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from common.credit import Credit
from common.episode import Episode, Group, Task, tasks_of
from common.method import Method, MethodConfig, Mode, RunView
from common.rollout import PlaySpec, Rollout, derive_seed
from replications.canopy.signal import (  # noqa: F401
    group_size,
    signal_check,
    signal_metrics,
    signal_probability,
)


@dataclass
class CanopyConfig(MethodConfig):
    name: str = "canopy"
    estimator: str = "grpo"  # GRPO with std normalization [P]
    # tau: P(a hardest-tier group has a success) the group size aims at; null = fixed n
    coverage: float | None = 0.8
    pilot_tasks: int = 16  # hardest-tier train tasks the pilot plays (coverage set only)
    pilot_samples: int = 4  # episodes per pilot task (coverage set only)
    min_group: int = 2  # the sized n is clipped to [min_group, trainer.group_size]
    quarantine: bool = True  # drop faulted episodes from group statistics and training [P]
    drop_hardest_tier: bool = False  # ablation: train without the hardest tier (the pilot still sizes on it)


class Canopy(Method):
    Config = CanopyConfig
    compare_arm = "full"  # the whole recipe; it needs nothing of an environment (any env)
    paper_data_hint = ("install AppWorld and its data, or SWE-bench Verified with its task images, and pass "
                       "method.paper_data=/local/folder")
    cfg: CanopyConfig

    def __init__(self, cfg: CanopyConfig, run: RunView):
        super().__init__(cfg, run)
        self.n: int | None = None if cfg.coverage is not None else run.group_size
        self.pilot: dict[str, float] = {}
        self._pool_index: list[int] | None = None

    def validate(self) -> None:
        super().validate()
        c, cap = self.cfg, self.run.group_size
        if c.coverage is not None and not 0.0 < c.coverage < 1.0:
            raise ValueError("method.coverage must be in (0, 1), or null for a fixed trainer.group_size; "
                             f"got {c.coverage}")
        if c.coverage is None and any(getattr(c, k) != getattr(CanopyConfig, k)
                                      for k in ("pilot_tasks", "pilot_samples", "min_group")):
            raise ValueError("method.pilot_tasks, pilot_samples and min_group have no effect with "
                             "method.coverage=null (fixed group size trainer.group_size); drop them or set a "
                             "coverage")
        if c.coverage is not None and not 2 <= c.min_group <= cap:
            raise ValueError("need 2 <= method.min_group <= trainer.group_size (the cap of the sized n); "
                             f"got {c.min_group}, {cap}")
        if min(c.pilot_tasks, c.pilot_samples) < 1:
            raise ValueError("method.pilot_tasks and method.pilot_samples must be >= 1")
        if c.drop_hardest_tier and len(self.env.tiers) < 2:
            raise ValueError("method.drop_hardest_tier needs an environment with 2+ tiers; "
                             f"{self.env.name} has {self.env.tiers}")

    def tasks(self, pool: Sequence[Task], step: int, rng: random.Random) -> list[Task]:
        if not self.cfg.drop_hardest_tier:
            return super().tasks(pool, step, rng)
        if self._pool_index is None:
            self._pool_index = [i for i, task in enumerate(pool) if task.tier != max(self.env.tiers)]
        return [pool[self._pool_index[rng.randrange(len(self._pool_index))]]
                for _ in range(self.run.tasks_per_step)]

    def group_size(self, task: Task, mode: Mode = "train") -> int:
        assert mode == "eval" or self.n is not None, "the pilot sizes the group before the first step"
        return super().group_size(task, mode) if mode == "eval" else int(self.n)  # type: ignore[arg-type]

    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        if mode == "train" and self.n is None:
            self.n = self.size_groups(rollout)
        return super().play(rollout, tasks, step, mode, variant)

    def size_groups(self, rollout: Rollout) -> int:
        """The pilot: play the warm start on hardest-tier train tasks; n from its success rate."""
        c, cap = self.cfg, self.run.group_size
        pool = tasks_of(self.env.task_set()["train"])
        index = [i for i, task in enumerate(pool) if task.tier == max(self.env.tiers)]
        picks = random.Random(derive_seed(self.run.seed, "pilot")).sample(
            index, min(c.pilot_tasks, len(index)))
        specs = [PlaySpec(pool[i], tag="pilot", trainable=False)
                 for i in picks for _ in range(c.pilot_samples)]
        episodes = [e for e in rollout.play(specs, step=-1, salt="pilot") if not e.faulted]
        p = float(np.mean([e.success for e in episodes])) if episodes else 0.0
        n = (cap if p == 0.0 else c.min_group if p == 1.0
             else group_size(p, c.coverage))  # type: ignore[arg-type]
        n = int(min(max(n, c.min_group), cap))
        self.pilot = {"pilot_success": p, "pilot_episodes": float(len(episodes)),
                      "pilot_group_size": float(n), "pilot_coverage": 1.0 - (1.0 - p) ** n}
        return n

    def excluded(self, episode: Episode) -> bool:  # quarantine: a faulted episode is not the policy's doing
        return ((episode.faulted and self.cfg.quarantine)
                or (episode.truncated and not self.cfg.train_truncated))

    def credit(self, groups: list[Group], step: int) -> Credit:
        """GRPO over the non-quarantined episodes (the core leaves `excluded` ones out); signal vs P_sig."""
        kept = [Group(g.task_id, g.tier, [e for e in g.episodes if not self.excluded(e)]) for g in groups]
        quarantined = float(sum(len(g.episodes) - len(k.episodes) for g, k in zip(groups, kept, strict=True)))
        return Credit.outcome(groups, {"group_size": float(self.n or 0), "quarantined": quarantined,
                                       **signal_metrics(kept), **self.pilot})

    # the pilot ran on the warm start: a resumed run must not rerun it
    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n, "pilot": self.pilot}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n, self.pilot = state["n"], dict(state["pilot"])
