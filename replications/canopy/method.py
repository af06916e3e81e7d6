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
   n = 32 (the paper's numbers; `signal_probability`, `group_size`).
2. Quarantine. Episodes that failed because the environment itself failed (an infrastructure
   fault, `Episode.faulted`) are dropped before group statistics: they are not the policy's doing.
3. Drift less. L = (1/N) sum_i sum_t M_it [-min(rho A, clip(rho, 1 +- 0.2) A) + beta KL_k3(pi || pi_base)]
   over the non-quarantined episodes: N = all action tokens of the batch (token-mean), environment
   tokens masked, no entropy bonus, mini-batch = batch and one update per step (so rho = 1), and a
   k3 KL to the fixed base. These are settings of the shared trainer (`conf/config.yaml`), not
   code here; the ablation arms change them.

The hooks: `play` runs the pilot once (before the first step, on the warm start) and then plays
groups of the sized n; `credit` quarantines faulted episodes and logs the measured share of
groups with signal per tier (`signal_check` sets it against P_sig at the measured success rates);
`tasks` can leave out the hardest tier (an ablation).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from common.credit import assign_outcome_credit
from common.episode import Group
from common.method import Method, MethodConfig
from common.rollout import PlaySpec, derive_seed

if TYPE_CHECKING:
    from datasets import Dataset

    from common.config import RunConfig
    from common.envs.base import Environment
    from common.rollout import Rollout


def signal_probability(p: float, n: int) -> float:
    """P_sig(p, n) = 1 - p^n - (1 - p)^n: the chance that n episodes at success rate p are not all
    equal, i.e. that a GRPO group carries a non-zero advantage (CANOPY, signal starvation).

    >>> round(signal_probability(0.05, 8), 2), round(signal_probability(0.05, 32), 2)
    (0.34, 0.81)
    """
    if not 0.0 <= p <= 1.0 or n < 1:
        raise ValueError(f"need 0 <= p <= 1 and n >= 1; got p={p}, n={n}")
    return 1.0 - p**n - (1.0 - p) ** n


def group_size(p_min: float, coverage: float) -> int:
    """The smallest n with P(at least one success in n) >= coverage at success rate p_min:
    n = ceil(ln(1 - coverage) / ln(1 - p_min)) (CANOPY's group sizing from a pilot).

    >>> group_size(0.05, 0.8), group_size(0.1, 0.8)
    (32, 16)
    """
    if not 0.0 < p_min < 1.0:
        raise ValueError(f"p_min must be in (0, 1); got {p_min} (a pilot with no success sizes no group: cap it)")
    if not 0.0 < coverage < 1.0:
        raise ValueError(f"coverage must be in (0, 1); got {coverage}")
    n = math.log(1.0 - coverage) / math.log(1.0 - p_min)
    return max(1, math.ceil(n - 1e-9))  # the tolerance keeps an exact integer from rounding up


@dataclass
class CanopyConfig(MethodConfig):
    name: str = "canopy"
    estimator: str = "grpo"  # GRPO with std normalization [P]
    coverage: float | None = 0.8  # tau: P(a hardest-tier group has a success) the group size aims at; null = fixed n
    pilot_tasks: int = 16  # hardest-tier train tasks the pilot plays (coverage set only)
    pilot_samples: int = 4  # episodes per pilot task (coverage set only)
    min_group: int = 2  # the sized n is clipped to [min_group, trainer.group_size]
    quarantine: bool = True  # drop faulted episodes before group statistics [P]
    drop_hardest_tier: bool = False  # ablation: train without the hardest tier (the pilot still sizes on it)
    paper_data: str | None = None  # scale=paper: the benchmark (AppWorld, SWE-bench Verified) in a local folder


class Canopy(Method):
    """GRPO with pilot-sized groups and fault quarantine; the loss settings live in conf/."""

    Config = CanopyConfig
    cfg: CanopyConfig

    def __init__(self, cfg: CanopyConfig, run: RunConfig, env: Environment):
        super().__init__(cfg, run, env)
        self.n: int | None = None if cfg.coverage is not None else run.trainer.group_size
        self.pilot: dict[str, float] = {}
        self._pool_index: list[int] | None = None

    def validate(self) -> None:
        c, cap = self.cfg, self.run.trainer.group_size
        if self.run.scale == "paper" and not (c.paper_data and Path(c.paper_data).exists()):
            raise ValueError(f"scale=paper needs the paper's benchmark locally; method.paper_data={c.paper_data!r} does not "
                             "exist (install AppWorld and its data, or SWE-bench Verified with its task images, and pass "
                             "method.paper_data=/local/folder)")
        if c.coverage is not None and not 0.0 < c.coverage < 1.0:
            raise ValueError(f"method.coverage must be in (0, 1), or null for a fixed trainer.group_size; got {c.coverage}")
        pilot = ("pilot_tasks", "pilot_samples", "min_group")
        if c.coverage is None and any(getattr(c, k) != getattr(CanopyConfig, k) for k in pilot):
            raise ValueError("method.pilot_tasks, pilot_samples and min_group have no effect with method.coverage=null "
                             "(fixed group size trainer.group_size); drop them or set a coverage")
        if c.coverage is not None and not 2 <= c.min_group <= cap:
            raise ValueError(f"need 2 <= method.min_group <= trainer.group_size (the cap of the sized n); got {c.min_group}, {cap}")
        if c.pilot_tasks < 1 or c.pilot_samples < 1:
            raise ValueError("method.pilot_tasks and method.pilot_samples must be >= 1")
        if c.drop_hardest_tier and len(self.env.tiers) < 2:
            raise ValueError(f"method.drop_hardest_tier needs an environment with 2+ tiers; {self.env.name} has {self.env.tiers}")

    # ---- hooks ----------------------------------------------------------------------------------
    def tasks(self, pool: Dataset, step: int, rng: random.Random) -> list[dict[str, Any]]:
        if not self.cfg.drop_hardest_tier:
            return super().tasks(pool, step, rng)
        if self._pool_index is None:
            hardest = max(self.env.tiers)
            self._pool_index = [i for i, tier in enumerate(pool["tier"]) if tier != hardest]
        picks = [self._pool_index[rng.randrange(len(self._pool_index))] for _ in range(self.run.trainer.tasks_per_step)]
        return [pool[i] for i in picks]

    def group_size(self, task: dict[str, Any]) -> int:
        assert self.n is not None, "the pilot sizes the group before the first step"
        return self.n

    def play(self, rollout: Rollout, tasks: list[dict[str, Any]], step: int) -> list[Group]:
        if self.n is None:
            self.n = self.size_groups(rollout)
        return super().play(rollout, tasks, step)

    def size_groups(self, rollout: Rollout) -> int:
        """The pilot: play the warm start on hardest-tier train tasks; n from its success rate."""
        c, cap = self.cfg, self.run.trainer.group_size
        pool = self.env.task_set()["train"]
        hardest = max(self.env.tiers)
        index = [i for i, tier in enumerate(pool["tier"]) if tier == hardest]
        rng = random.Random(derive_seed(self.run.seed, "pilot"))
        picks = rng.sample(index, min(c.pilot_tasks, len(index)))
        specs = [PlaySpec(pool[i], tag="pilot", trainable=False) for i in picks for _ in range(c.pilot_samples)]
        episodes = [e for e in rollout.play(specs, step=-1, salt="pilot") if not e.faulted]
        p = float(np.mean([e.success for e in episodes])) if episodes else 0.0
        n = cap if p == 0.0 else c.min_group if p == 1.0 else group_size(p, c.coverage)  # type: ignore[arg-type]
        n = int(min(max(n, c.min_group), cap))
        self.pilot = {"pilot_success": p, "pilot_episodes": float(len(episodes)), "pilot_group_size": float(n),
                      "pilot_coverage": 1.0 - (1.0 - p) ** n}
        return n

    def credit(self, groups: list[Group], step: int) -> dict[str, float]:
        """GRPO over the non-quarantined episodes of each group; signal measured vs P_sig."""
        kept = [Group(g.task_id, g.tier, [e for e in g.episodes if not (self.cfg.quarantine and e.faulted)]) for g in groups]
        for g in groups:
            for e in g.episodes:
                for t in e.turns:
                    t.advantage = 0.0  # quarantined episodes keep 0 (the trainer never trains a faulted episode)
        assign_outcome_credit(kept, self.estimator)
        return {"group_size": float(self.n or 0), "quarantined": float(sum(len(g.episodes) - len(k.episodes)
                                                                            for g, k in zip(groups, kept, strict=True))),
                **signal_metrics(kept), **self.pilot}

    # ---- resume: the pilot ran on the warm start, so a resumed run must not run it again ------------
    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n, "pilot": self.pilot}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.n, self.pilot = state["n"], dict(state["pilot"])


def signal_metrics(groups: list[Group]) -> dict[str, float]:
    """Per tier: groups, groups with signal (rewards not all equal), episodes and successes, of the
    non-quarantined episodes, plus the measured share of groups with signal over all tiers.
    `signal_check` turns these counts into the measured share next to P_sig's prediction."""
    out: dict[str, float] = {}
    kept = [g for g in groups if g.episodes]
    for g in kept:
        for key, value in ((f"groups/tier{g.tier}", 1.0), (f"signal_groups/tier{g.tier}", float(len(set(g.rewards)) > 1)),
                           (f"episodes/tier{g.tier}", float(len(g.episodes))),
                           (f"successes/tier{g.tier}", float(sum(e.success for e in g.episodes)))):
            out[key] = out.get(key, 0.0) + value
    if kept:
        out["signal_measured"] = float(np.mean([len(set(g.rewards)) > 1 for g in kept]))
    return out


def signal_check(rows: list[dict[str, Any]], window: int = 10) -> dict[str, float]:
    """The share of groups with signal in a run, measured and as P_sig predicts.

    `rows` are a run's metrics (one per step, with `signal_metrics`' counts). Steps are taken in
    windows of `window`; within a window and tier, p is the success rate of all its episodes and
    each group is predicted to carry signal with P_sig(p, its mean size). Pooling a window keeps
    each group's own outcomes a small part of the p it is predicted from (a group's own p would
    predict less signal than it has), and short windows follow p as training moves it. Tasks of
    one tier still differ in difficulty; P_sig is concave in p, so the measured share may sit a
    little below the prediction. Returns {"groups", "measured", "predicted"} over the whole run.
    """
    groups = measured = predicted = 0.0
    for start in range(0, len(rows), window):
        chunk = rows[start : start + window]
        tiers = {key.split("/", 1)[1] for row in chunk for key in row if key.startswith("groups/")}
        for tier in tiers:
            g = sum(row.get(f"groups/{tier}", 0.0) for row in chunk)
            n = sum(row.get(f"episodes/{tier}", 0.0) for row in chunk)
            p = sum(row.get(f"successes/{tier}", 0.0) for row in chunk) / n
            groups += g
            measured += sum(row.get(f"signal_groups/{tier}", 0.0) for row in chunk)
            predicted += sum(row.get(f"groups/{tier}", 0.0) * signal_probability(p, max(1, round(
                row.get(f"episodes/{tier}", 0.0) / row[f"groups/{tier}"]))) for row in chunk if row.get(f"groups/{tier}"))
    if not groups:
        return {"groups": 0.0, "measured": math.nan, "predicted": math.nan}
    return {"groups": groups, "measured": measured / groups, "predicted": predicted / groups}
