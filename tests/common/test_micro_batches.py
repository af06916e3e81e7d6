"""The update's micro-batches (`trainer.micro_batch_tokens`, `trainer.micro_batch_rows`): rows cut in
order by a padded-token budget, and a gradient that does not depend on the cut."""

from __future__ import annotations

import copy
import random
from typing import Any

import pytest
import torch

from common.batch import Row, build_rows, micro_batches
from common.config import RunConfig
from common.credit import Advantages
from common.engines.base import SamplingParams
from common.engines.hf import HFEngine
from common.method import Method, MethodConfig, RunView
from common.policy import Policy
from common.records import RunDir
from common.rollout import Rollout
from common.trainer import RLModule
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult


class _Turns(EpisodeState):
    def __init__(self, task: dict[str, Any]):
        self.task, self.turn = task, 0

    def start(self) -> Observation:
        return Observation("solver", f"Q: {self.task['n']}+{self.task['n'] % 9}\nA:")

    def step(self, action: str) -> StepResult:
        self.turn += 1
        if self.turn == self.task["turns"]:
            return StepResult(None, reward=1.0)
        return StepResult(Observation("solver", f" then +{self.turn}\nA:"))

    def expert_action(self) -> str:
        return "1"


class _TurnsEnv(Environment):
    """`turns` turns of one role, whatever it answers."""

    name, roles, stop = "turns", ("solver",), ("\n",)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        return {"n": rng.randrange(50), "turns": 1 + rng.randrange(5)}

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1,)

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        return _Turns(task)


def _row(n: int) -> Row:
    return Row("policy", "solver", 0, tuple(range(n)), ())


def test_rows_are_cut_in_order_by_padded_tokens_and_rows():
    rows = [_row(n) for n in (3, 5, 2, 9, 1, 1)]
    # padded size = rows x longest: [3, 5] = 10; + 2 -> 15 > 12; [2] then + 9 -> 18 > 12; 9 alone; [1, 1]
    assert micro_batches(rows, max_tokens=12) == [[0, 1], [2], [3], [4, 5]]
    assert micro_batches(rows, max_tokens=8) == [[0], [1], [2], [3], [4, 5]]  # 9 > 8: a chunk of its own
    assert micro_batches(rows, max_rows=4) == [[0, 1, 2, 3], [4, 5]]
    assert micro_batches(rows, max_rows=1, max_tokens=100) == [[i] for i in range(6)]
    assert micro_batches(rows) == [list(range(6))] and micro_batches([]) == []


def _module(tiny_parts, tmp_path, **trainer):
    env, model_cfg, tok, base = tiny_parts
    cfg = RunConfig()
    for key, value in trainer.items():
        setattr(cfg.trainer, key, value)
    policy = Policy(copy.deepcopy(base), tok, copy.deepcopy(model_cfg), env.roles)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in policy.trainable_parameters():
            prm.add_(0.05 * torch.randn(prm.shape, generator=gen))
    m = RLModule(cfg, Method(MethodConfig(), RunView.of(cfg, env)), env, policy, HFEngine(policy),
                 RunDir(tmp_path / "run", tmp_path / "ck"))
    opt = m.configure_optimizers()
    grads: list[list[torch.Tensor]] = []
    step = opt.step
    opt.step = lambda *a, **k: (grads.append([p.grad.clone() for p in policy.trainable_parameters()]),  # type: ignore[method-assign]
                                step(*a, **k))[1]
    m.optimizers = lambda: opt  # outside a Lightning Trainer: plain optimizer and backward
    m.manual_backward = lambda loss: loss.backward()
    return m, grads


@pytest.mark.parametrize("loss_agg", ["token-mean", "seq-mean"])
def test_the_gradient_does_not_depend_on_the_micro_batches(tiny_parts, tmp_path, loss_agg):
    """Multi-turn rows of different lengths: the whole minibatch at once, and cut by a token budget
    into chunks of one to a few rows, give the same loss and gradient (to float rounding)."""
    env = _TurnsEnv(EnvConfig(train_size=16, heldout_size=4))
    runs = []
    for budget in (0, 64):
        m, grads = _module(tiny_parts, tmp_path / str(budget), micro_batch_tokens=budget, loss_agg=loss_agg,
                           entropy_coef=0.01)
        p = m.policy
        rollout = Rollout(env, m.engine, p.tokenizer, p.role_adapter, p.trainable_adapters,
                          SamplingParams(1.0, 1.0, 12, ("\n",)), 512, seed=0)
        groups = rollout.play_groups([env.task_set()["train"][i] for i in range(4)], [3] * 4, step=0)
        episodes = [e for g in groups for e in g.episodes]
        advantages = Advantages({(i, t): (-1.0) ** i * (1 + t) for i, e in enumerate(episodes)
                                 for t in range(len(e.turns))})
        rows = build_rows(episodes, None)
        chunks = micro_batches(rows, max_tokens=budget)
        stats = m.update(rows, advantages, step=0)
        runs.append((rows, chunks, stats, grads[0]))
        assert max(len(e.turns) for e in episodes) > 1  # multi-turn rows
    (rows0, chunks0, stats0, g0), (rows1, chunks1, stats1, g1) = runs
    assert [r.ids for r in rows0] == [r.ids for r in rows1]  # the same episodes
    assert len(chunks0) == 1 and len(chunks1) >= 6
    assert stats0["loss"] == pytest.approx(stats1["loss"], rel=1e-5, abs=1e-7)
    for a, b in zip(g0, g1, strict=True):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-7), (a - b).abs().max()
    assert any(g.abs().sum() > 0 for g in g0)
