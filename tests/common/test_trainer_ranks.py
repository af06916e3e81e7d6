"""Several processes (common/trainer.py): the update of two gloo ranks, each with its own share of
the rows, computes the gradient one process computes on all of them; the step's metrics and the
evaluation's groups are gathered by explicit rules."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from common.batch import build_rows
from common.config import ModelConfig, RunConfig, SFTConfig
from common.credit import Advantages
from common.engines.base import SamplingParams
from common.engines.hf import HFEngine
from common.episode import Episode, Group, Turn
from common.method import Method, MethodConfig, RunView
from common.policy import Policy
from common.ranks import combine_rank_metrics, interleave, light
from common.records import RunDir
from common.rollout import Rollout
from common.trainer import RLModule
from common.warmstart import warm_started_base
from envs.testbeds.arith import ArithConfig, ArithEnv

# rank 0 and rank 1's rows of the 16 played: uneven, and then none at all on rank 1
SPLITS = {"uneven": (slice(0, 11), slice(11, 16)), "rank 1 empty": (slice(0, 16), slice(0, 0))}


def _module(work: Path, out: Path) -> RLModule:
    torch.set_num_threads(1)
    env = ArithEnv(ArithConfig(train_size=64, heldout_size=16, max_value=20))
    model_cfg = ModelConfig()
    tok, base, _ = warm_started_base(model_cfg, SFTConfig(enabled=False), env, 0, str(work))
    cfg = RunConfig()
    cfg.trainer.lr = 0.0  # the gradients are compared, the weights stay where they are
    cfg.trainer.micro_batch_rows = 2  # the ranks run different numbers of backward passes
    cfg.trainer.max_grad_norm = 1e9
    torch.manual_seed(0)
    policy = Policy(copy.deepcopy(base), tok, copy.deepcopy(model_cfg), env.roles)
    m = RLModule(cfg, Method(MethodConfig(), RunView.of(cfg, env)), env, policy, HFEngine(policy),
                 RunDir(out / "run", out / "ck"))
    opt = m.configure_optimizers()
    m.optimizers = lambda: opt  # type: ignore[method-assign]  # outside a Lightning Trainer
    m.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign]
    return m


def _gradients(rank: int, world: int, work: Path, out: Path) -> dict[str, dict[int, torch.Tensor | None]]:
    """Every process plays the same 16 episodes (same seeds) and updates on its share of the rows."""
    m = _module(work, out)
    env = m.env
    rollout = Rollout(env, m.engine, m.policy.tokenizer, m.policy.role_adapter, m.policy.trainable_adapters,
                      SamplingParams(1.0, 1.0, 16, ("\n",)), 512, seed=0)
    groups = rollout.play_groups([env.task_set()["train"][i] for i in range(4)], [4] * 4, step=0)
    episodes = [e for g in groups for e in g.episodes]
    advantages = Advantages({(i, t): 1.0 if i % 3 else -0.5
                             for i, e in enumerate(episodes) for t in range(len(e.turns))})
    rows = build_rows(episodes, None)
    assert len(rows) == 16
    grads = {}
    for name, split in SPLITS.items():
        m.update(rows[split[rank]] if world > 1 else rows, advantages, step=0)
        grads[name] = {i: None if p.grad is None else p.grad.clone()
                       for i, p in enumerate(m.policy.trainable_parameters())}
    return grads


def _rank_main(rank: int, world: int, work: Path, out: Path) -> None:
    dist.init_process_group("gloo", init_method=f"file://{out / 'store'}", rank=rank, world_size=world)
    try:
        torch.save(_gradients(rank, world, work, out), out / f"grads-{rank}.pt")
    finally:
        dist.destroy_process_group()


def test_two_ranks_compute_the_gradient_of_all_their_rows(tmp_path):
    work = tmp_path / "work"
    one = _gradients(0, 1, work, tmp_path)  # builds the tiny model the ranks read
    mp.start_processes(_rank_main, args=(2, work, tmp_path), nprocs=2, start_method="spawn")
    ranks = [torch.load(tmp_path / f"grads-{r}.pt") for r in range(2)]
    for name in SPLITS:
        assert any(g is not None and g.abs().sum() > 0 for g in one[name].values())
        for i, single in one[name].items():
            a, b = ranks[0][name][i], ranks[1][name][i]
            assert (a is None) == (b is None) == (single is None), (name, i)
            if single is not None:
                assert torch.equal(a, b), f"{name}: parameter {i} differs between the ranks"
                torch.testing.assert_close(a, single, rtol=1e-5, atol=1e-7, msg=f"{name}: parameter {i}")


def test_metrics_combine_by_kind():
    rank0 = {"success_rate": 0.5, "rows": 8, "generated_tokens_total/main": 100, "time_step_s": 1.0,
             "logprob_diff_max": 1e-6, "loss": 0.25, "grad_norm": 0.3, "only_here": 1.0}
    rank1 = {"success_rate": 1.0, "rows": 4, "generated_tokens_total/main": 50, "time_step_s": 2.0,
             "logprob_diff_max": 3e-6, "loss": 0.25, "grad_norm": 0.3}
    got = combine_rank_metrics([(rank0, 6), (rank1, 2)])
    assert got == {"success_rate": (0.5 * 6 + 1.0 * 2) / 8, "rows": 12, "generated_tokens_total/main": 150,
                   "time_step_s": 2.0, "logprob_diff_max": 3e-6, "loss": 0.25, "grad_norm": 0.3,
                   "only_here": 1.0}
    assert combine_rank_metrics([(rank0, 6)]) == rank0  # one process: unchanged


def test_gathered_groups_come_back_in_task_order_without_their_contexts():
    parts = [[0, 2, 4], [1, 3]]
    assert interleave(parts) == [0, 1, 2, 3, 4]
    turn = Turn("solver", "policy", [1, 2, 3], [4, 5], [-0.1, -0.2], "5", prompt_text="1+4=")
    group = Group("t0", 1, [Episode("t0", 1, [turn], success=True)],
                  extra={"solo": [Episode("t0", 1, [turn])]})
    slim = light(group)
    for e in (slim.episodes[0], slim.extra["solo"][0]):
        assert (e.turns[0].prompt_ids == [] and e.turns[0].num_action_tokens == 2
                and e.turns[0].role == "solver")
    # the original is untouched
    assert slim.episodes[0].success and group.episodes[0].turns[0].prompt_ids == [1, 2, 3]
