"""The trainer's update moves the policy in the direction of the advantages, on the right tokens."""

import copy

import pytest
import torch

from common.batch import build_rows, score_rows
from common.config import RunConfig
from common.credit import Advantages
from common.engines.base import SamplingParams
from common.engines.hf import HFEngine
from common.method import Method, MethodConfig, RunView
from common.policy import Policy
from common.records import RunDir
from common.rollout import Rollout
from common.trainer import RLModule


@pytest.fixture()
def module(tiny_parts, tmp_path):
    env, model_cfg, tok, base = tiny_parts
    cfg = RunConfig()
    cfg.trainer.lr = 5e-3
    policy = Policy(copy.deepcopy(base), tok, copy.deepcopy(model_cfg), env.roles)
    engine = HFEngine(policy)
    m = RLModule(cfg, Method(MethodConfig(), RunView.of(cfg, env)), env, policy, engine,
                 RunDir(tmp_path / "run", tmp_path / "ck"))
    opt = m.configure_optimizers()
    m.optimizers = lambda: opt  # outside a Lightning Trainer: plain optimizer and backward
    m.manual_backward = lambda loss: loss.backward()
    return m


def logps(m, rows):
    with torch.no_grad(), m.policy.use("policy") as model:
        s = score_rows(model, rows, m.policy.tokenizer.pad_token_id, with_entropy=False)
    return [s.logp_B_T[b, : r.num_action_tokens] for b, r in enumerate(rows)]


def test_update_follows_the_advantages(module):
    env = module.env
    rollout = Rollout(env, module.engine, module.policy.tokenizer, module.policy.role_adapter,
                      module.policy.trainable_adapters, SamplingParams(1.0, 1.0, 16, ("\n",)), 512, seed=0)
    tasks = [env.task_set()["train"][i] for i in range(8)]
    groups = rollout.play_groups(tasks, [4] * 8, step=0)
    episodes = [e for g in groups for e in g.episodes]
    advantages = Advantages({(i, t): 1.0 if i % 2 == 0 else -1.0 for i, e in enumerate(episodes)  # +1 / -1
                             for t in range(len(e.turns))})
    rows = build_rows(episodes, None)
    before = logps(module, rows)
    adapter_before = module.policy.adapter_state()
    stats = module.update(rows, advantages, step=0)
    after = logps(module, rows)
    sign = [advantages.scalar((r.episode, r.spans[0].turn_index)) for r in rows]
    up = torch.cat([a - b for a, b, s in zip(after, before, sign, strict=True) if s > 0]).mean()
    down = torch.cat([a - b for a, b, s in zip(after, before, sign, strict=True) if s < 0]).mean()
    assert up > 0 > down
    # on-policy: scored = sampled log-probs
    assert stats["grad_norm"] > 0 and stats["logprob_diff_max"] < 1e-4
    changed = [n for n, v in module.policy.adapter_state().items() if not torch.equal(v, adapter_before[n])]
    assert changed and all("lora_" in n for n in changed)


def test_only_listed_roles_train(module):
    env = module.env
    rollout = Rollout(env, module.engine, module.policy.tokenizer, module.policy.role_adapter,
                      module.policy.trainable_adapters, SamplingParams(1.0, 1.0, 16, ("\n",)), 512, seed=0)
    groups = rollout.play_groups([env.task_set()["train"][0]], [4], step=0)
    eps = [e for g in groups for e in g.episodes]
    assert build_rows(eps, {"nobody"}) == []  # a role not trained this step yields no rows
    assert len(build_rows(eps, {"solver"})) == 4
    for e in eps:
        e.counts_for_training = False  # scored-only plays never become training rows
    assert build_rows(eps, None) == []


def test_second_update_is_off_policy_and_clips(module):
    """With two minibatches the second optimizer step scores rows the first one already moved:
    its ratio leaves 1 and, at a large enough step size, the clip engages."""
    env = module.env
    module.cfg.trainer.minibatches, module.cfg.trainer.ppo_epochs = 2, 2
    for group in module.optimizers().param_groups:
        group["lr"] = 0.05
    rollout = Rollout(env, module.engine, module.policy.tokenizer, module.policy.role_adapter,
                      module.policy.trainable_adapters, SamplingParams(1.0, 1.0, 16, ("\n",)), 512, seed=0)
    groups = rollout.play_groups([env.task_set()["train"][i] for i in range(8)], [4] * 8, step=0)
    episodes = [e for g in groups for e in g.episodes]
    advantages = Advantages({(i, t): 1.0 if i % 2 == 0 else -1.0
                             for i, e in enumerate(episodes) for t in range(len(e.turns))})
    stats = module.update(build_rows(episodes, None), advantages, step=0)
    assert stats["clip_fraction"] > 0 and stats["logprob_diff_max"] > 0.01


def test_kl_in_reward_penalizes_each_agents_own_tokens(module):
    from common.loss import kl_reward_penalty

    env = module.env
    rollout = Rollout(env, module.engine, module.policy.tokenizer, module.policy.role_adapter,
                      module.policy.trainable_adapters, SamplingParams(1.0, 1.0, 16, ("\n",)), 512, seed=0)
    episodes = [e for g in rollout.play_groups([env.task_set()["train"][0]], [2], step=0) for e in g.episodes]
    rows = build_rows(episodes, None)
    # every token 0.5 nats less likely
    reference = [torch.tensor(row.behaviour_logprobs()) - 0.5 for row in rows]
    penalty = kl_reward_penalty(rows, reference, episodes, coef=0.1, estimator="k1",
                                agent_of=lambda e, i: e.turns[i].role)
    for i, e in enumerate(episodes):
        n_tokens = sum(t.num_action_tokens for t in e.turns if t.adapter is not None)
        assert penalty(i, "*") == pytest.approx(0.1 * 0.5 * n_tokens)
        assert penalty(i, "solver") == pytest.approx(0.1 * 0.5 * n_tokens)  # arith: one role
        assert penalty(i, "nobody") == 0.0
