"""The trainer's update moves the policy in the direction of the advantages, on the right tokens."""

import copy

import pytest
import torch

from common.batch import build_rows, score_rows
from common.config import RunConfig
from common.engines.base import SamplingParams
from common.engines.hf import HFEngine
from common.method import Method, MethodConfig
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
    m = RLModule(cfg, Method(MethodConfig(), cfg, env), env, policy, engine, RunDir(tmp_path / "run", tmp_path / "ck"))
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
    for i, e in enumerate(episodes):  # hand-made advantages: +1 / -1 alternating
        for t in e.turns:
            t.advantage = 1.0 if i % 2 == 0 else -1.0
    rows = build_rows(episodes, None)
    before = logps(module, rows)
    adapter_before = module.policy.adapter_state()
    stats = module.update(rows, step=0)
    after = logps(module, rows)
    up = torch.cat([a - b for a, b, r in zip(after, before, rows, strict=True) if r.spans[0][1].advantage > 0]).mean()
    down = torch.cat([a - b for a, b, r in zip(after, before, rows, strict=True) if r.spans[0][1].advantage < 0]).mean()
    assert up > 0 > down
    assert stats["clip_fraction"] == 0.0 and stats["grad_norm"] > 0
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
