"""GRPO, the baseline every method is compared against (Shao et al. 2024, arXiv 2402.03300).

For each task, G episodes are sampled from the current policy; each episode's outcome reward is
normalized within its group, A_i = (r_i - mean(r)) / (std(r) + eps) (eq. 3 of the paper, outcome
supervision), and broadcast to every action token of the episode. The policy maximizes the
clipped surrogate of PPO on those tokens (common/loss.py), optionally with a KL penalty to the
reference model (the warm start, adapters disabled).

Every hook is the default of `common.method.Method`; this class exists so that GRPO is a method
like any other (its own folder, card and configs) and so that the estimator can be switched to
Dr. GRPO (`method.estimator=drgrpo`), RLOO (`method.estimator=rloo`) or online rejection-sampling
fine-tuning (`method.estimator=rft`: supervised training on the group's own successes, the
comparison of DeepSeekMath's section 5) as arms.

`method.update=clean_sft` is the supervised control at equal updates: every step, the same tasks
and group sizes, played by the environment's scripted demonstrator with the settings of
`method.demonstrator_env` (e.g. its injected errors off), teacher-forced, each demonstrated token
trained with advantage 1 through the same strictly on-policy update (ratio 1: the token-mean
negative log-likelihood of the demonstrations). Nothing is sampled from the policy in training.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

from common.credit import BROADCAST, Credit
from common.episode import Group, Task
from common.method import Method, MethodConfig, Mode, RunView
from common.rollout import Rollout
from envs.api.base import Environment


@dataclass
class GRPOConfig(MethodConfig):
    name: str = "grpo"
    # grpo (Shao et al. 2024) | drgrpo (Liu et al. 2025) | rloo (Ahmadian et al. 2024) | rft
    estimator: str = "grpo"
    # clean_sft: train on the demonstrator's plays (see the module doc)
    update: Literal["rl", "clean_sft"] = "rl"
    # env settings of the clean_sft demonstrator
    demonstrator_env: dict[str, Any] = field(default_factory=dict)


class GRPO(Method):
    Config = GRPOConfig

    def __init__(self, cfg: GRPOConfig, run: RunView):
        super().__init__(cfg, run)
        self.cfg: GRPOConfig = cfg
        self._demonstrator: Environment | None = None

    def validate(self) -> None:
        super().validate()
        known = {f.name for f in dataclasses.fields(self.env.cfg)}
        unknown = sorted(set(self.cfg.demonstrator_env) - known)
        if unknown:
            raise ValueError(f"method.demonstrator_env: unknown {self.env.name} setting(s) {unknown}; "
                             f"it accepts {sorted(known)}")
        if self.cfg.demonstrator_env and self.cfg.update != "clean_sft":
            raise ValueError("method.demonstrator_env is read only with method.update=clean_sft")

    @property
    def demonstrator(self) -> Environment | None:
        """The clean_sft arm's demonstrator environment (None for the RL arms)."""
        if self.cfg.update == "clean_sft" and self._demonstrator is None:
            self._demonstrator = type(self.env)(dataclasses.replace(self.env.cfg,
                                                                    **self.cfg.demonstrator_env))
        return self._demonstrator

    def play(self, rollout: Rollout, tasks: list[Task], step: int, mode: Mode = "train",
             variant: str = "main") -> list[Group]:
        if mode != "train" or self.demonstrator is None:
            return super().play(rollout, tasks, step, mode, variant)
        sizes = [self.group_size(t, mode) for t in tasks]
        return rollout.play_groups(tasks, sizes, step, mode=mode, variant=variant,
                                   demonstrator=self.demonstrator)

    def credit(self, groups: list[Group], step: int) -> Credit:
        if self.demonstrator is None:
            return super().credit(groups, step)
        return Credit("advantage", [[{BROADCAST: 1.0} for _ in g.episodes] for g in groups])
