"""The eager minimal work of one GRPO step: one batched `generate` and one forward and backward with
the optimizer step, nothing else (no rewards, advantages, logging, loops or checks).

It runs on the same LoRA-wrapped model, prompts and sampling settings as the trainers, so each
trainer's overhead over it is what its machinery costs on top of the unavoidable work.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import torch

from bench.work import (
    Setting,
    autocast,
    base_model,
    decode_flops,
    forward_flops,
    prompt_text,
    step_prompts,
    summary,
    sync,
)


def lora_model(s: Setting) -> tuple[Any, Any, Any]:
    """Tokenizer, peft model (one adapter, the trainers' LoRA settings) and its model config."""
    from peft import LoraConfig, get_peft_model

    from bench.work import model_config

    cfg = model_config(s.model)
    tok, base = base_model(s)
    base = copy.deepcopy(base)
    for p in base.parameters():
        p.requires_grad_(False)
    lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_targets), bias="none", task_type="CAUSAL_LM")
    with torch.random.fork_rng():
        torch.manual_seed(cfg.init_seed + 1)
        model = get_peft_model(base, lora)
    return tok, model.to(s.device), cfg


def measure_minimal(s: Setting, reps: int) -> dict[str, Any]:
    """Median / min / max seconds of the minimal step over `reps` repetitions (after one warm-up)."""
    tok, model, cfg = lora_model(s)
    torch.manual_seed(s.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=s.lr)
    tasks = step_prompts(s, reps + 1)
    pad, eos = tok.pad_token_id, tok.eos_token_id
    gen_times, train_times, totals, shapes = [], [], [], []
    for k in range(reps + 1):
        prompts = [tok.encode(prompt_text(t), add_special_tokens=False) for t in tasks[k] for _ in range(s.group_size)]
        width = max(map(len, prompts))
        ids_B_P = torch.full((len(prompts), width), pad)
        mask_B_P = torch.zeros((len(prompts), width), dtype=torch.long)
        for r, p in enumerate(prompts):
            ids_B_P[r, width - len(p):] = torch.tensor(p)
            mask_B_P[r, width - len(p):] = 1
        ids_B_P, mask_B_P = ids_B_P.to(s.device), mask_B_P.to(s.device)
        sync(s.device)
        t0 = time.perf_counter()
        model.eval()
        with torch.inference_mode(), autocast(s.precision, s.device):
            out_B_L = model.generate(input_ids=ids_B_P, attention_mask=mask_B_P, do_sample=True, temperature=s.temperature,
                                     top_k=0, top_p=1.0, max_new_tokens=s.max_new_tokens, pad_token_id=pad, eos_token_id=eos)
        sync(s.device)
        t1 = time.perf_counter()
        out_B_L = out_B_L.clone()
        comp_B_C = out_B_L[:, width:]
        is_eos = comp_B_C == eos
        after_eos = (is_eos.cumsum(-1) - is_eos.long()) > 0
        comp_mask_B_C = (~after_eos).float()
        attn_B_L = torch.cat([mask_B_P, comp_mask_B_C.long()], dim=1)
        model.train()
        with autocast(s.precision, s.device):
            logits = model(input_ids=out_B_L, attention_mask=attn_B_L, logits_to_keep=comp_B_C.size(1) + 1).logits[:, :-1]
        logp_B_C = torch.log_softmax(logits.float(), -1).gather(-1, comp_B_C[..., None]).squeeze(-1)
        loss = -(logp_B_C * comp_mask_B_C).sum() / comp_mask_B_C.sum()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync(s.device)
        t2 = time.perf_counter()
        if k > 0:  # the first repetition warms up allocators and kernels
            gen_times.append(t1 - t0)
            train_times.append(t2 - t1)
            totals.append(t2 - t0)
            shapes.append((len(prompts), width, comp_B_C.size(1), int(comp_mask_B_C.sum())))
    rows, prompt_len, new, tokens = shapes[len(shapes) // 2]
    fb = forward_flops(model.config, cfg.lora_rank, list(cfg.lora_targets), rows, prompt_len + new)
    return {"step": summary(totals), "generate": summary(gen_times), "train": summary(train_times),
            "generated_tokens": statistics_median([sh[3] for sh in shapes]),
            "flops_train": fb["forward"] + fb["backward"],
            "flops_generate": decode_flops(model.config, cfg.lora_rank, list(cfg.lora_targets), rows, prompt_len, new)}


def statistics_median(values: list[int]) -> float:
    import statistics

    return float(statistics.median(values))
