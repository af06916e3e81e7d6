"""What bf16 autocast costs in accuracy: log-probabilities and the policy gradient of one GRPO
batch scored in bf16 against the same batch scored in float32 (the trainer's `score_rows`)."""

from __future__ import annotations

import copy
import random
from typing import Any

import torch

from bench.work import Setting, base_model, bench_env, chat_format, model_config, step_prompts
from common.batch import build_rows, score_rows
from common.engines.base import SamplingParams
from common.engines.hf import HFEngine
from common.policy import Policy
from common.rollout import Rollout


def precision_accuracy(s: Setting) -> dict[str, Any]:
    """Max / mean |logp_bf16 - logp_fp32| over sampled tokens, and the LoRA gradient's cosine and relative
    error."""
    tok, base = base_model(s)
    env = bench_env()
    policy = Policy(copy.deepcopy(base), tok, copy.deepcopy(model_config(s.model, s.work_dir)), env.roles)
    with torch.no_grad(), torch.random.fork_rng():
        torch.manual_seed(s.seed)
        for p in policy.trainable_parameters():  # an adapter away from zero, as after some training
            p.add_(0.05 * torch.randn_like(p))
    params = SamplingParams(s.temperature, 1.0, s.max_new_tokens, ())
    # the batch is sampled in bf16 (half the time of float32 at 135M; it is only the batch both precisions
    # score)
    rollout = Rollout(env, HFEngine(policy, bf16=True), tok, policy.role_adapter, policy.trainable_adapters,
                      params, 2048, s.seed, chat_format(s, tok))
    groups = rollout.play_groups(step_prompts(s, 1)[0], [s.group_size] * s.tasks_per_step, step=0)
    rows = build_rows([e for g in groups for e in g.episodes], None)
    rng = random.Random(s.seed)
    adv = [rng.gauss(0, 1) for _ in rows]
    out: dict[str, Any] = {}
    for precision in ("32", "bf16"):
        for p in policy.trainable_parameters():
            p.grad = None
        with (policy.use("policy") as model,
              torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")):
            scored = score_rows(model, rows, tok.pad_token_id, with_entropy=False, temperature=s.temperature)
        adv_B_1 = torch.tensor(adv)[:, None]
        loss = -(scored.logp_B_T * adv_B_1 * scored.mask_B_T).sum() / scored.mask_B_T.sum()
        loss.backward()
        out[precision] = (scored.logp_B_T.detach(), scored.mask_B_T,
                          torch.cat([p.grad.flatten() for p in policy.trainable_parameters()
                                     if p.grad is not None]))
    (lp32, mask, g32), (lp16, _, g16) = out["32"], out["bf16"]
    diff = (lp16 - lp32).abs()[mask.bool()]
    return {"logprob_abs_err_max": float(diff.max()), "logprob_abs_err_mean": float(diff.mean()),
            "grad_cosine": float(torch.nn.functional.cosine_similarity(g16, g32, dim=0)),
            "grad_rel_err": float((g16 - g32).norm() / g32.norm()), "tokens": int(mask.sum())}
