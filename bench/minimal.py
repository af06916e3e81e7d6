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
    chat_format,
    decode_flops,
    forward_flops,
    prompt_text,
    shared_prompt_flops,
    step_prompts,
    sync,
)


def lora_model(s: Setting) -> tuple[Any, Any, Any]:
    """Tokenizer, peft model (one adapter, the trainers' LoRA settings) and its model config."""
    from peft import LoraConfig, get_peft_model

    from bench.work import model_config

    cfg = model_config(s.model, s.work_dir)
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


class MinimalStep:
    """The minimal work, one step at a time, on the prompts our trainer sees at step k."""

    def __init__(self, s: Setting, steps: int):
        self.s = s
        self.tok, self.model, self.cfg = lora_model(s)
        torch.manual_seed(s.seed)
        self.opt = torch.optim.AdamW([p for p in self.model.parameters() if p.requires_grad], lr=s.lr)
        self.tasks = step_prompts(s, steps)
        self.chat = chat_format(s, self.tok)

    def run(self, k: int) -> dict[str, Any]:
        """One step; returns its generate and train seconds, generated tokens and FLOPs."""
        s, tok, model = self.s, self.tok, self.model
        pad, eos = tok.pad_token_id, tok.eos_token_id
        prompts = [tok.encode(prompt_text(t, self.chat), add_special_tokens=False)
                   for t in self.tasks[k] for _ in range(s.group_size)]
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
            out_B_L = model.generate(input_ids=ids_B_P, attention_mask=mask_B_P, do_sample=True,
                                     temperature=s.temperature, top_k=0, top_p=1.0,
                                     max_new_tokens=s.max_new_tokens, pad_token_id=pad, eos_token_id=eos)
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
            logits = model(input_ids=out_B_L, attention_mask=attn_B_L,
                           logits_to_keep=comp_B_C.size(1) + 1).logits[:, :-1]
        logp_B_C = torch.log_softmax(logits.float(), -1).gather(-1, comp_B_C[..., None]).squeeze(-1)
        loss = -(logp_B_C * comp_mask_B_C).sum() / comp_mask_B_C.sum()
        loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        sync(s.device)
        t2 = time.perf_counter()
        rows, new = len(prompts), comp_B_C.size(1)
        lora = (self.cfg.lora_rank, list(self.cfg.lora_targets))
        fb = forward_flops(model.config, *lora, rows, width + new, head_positions=new + 1)
        shared = shared_prompt_flops(model.config, *lora, len({tuple(p) for p in prompts}), width - 1,
                                     rows, new + 1, head_positions=new + 1)
        return {"time_generate_s": t1 - t0, "time_train_s": t2 - t1,
                "generated_tokens": int(comp_mask_B_C.sum()), "flops_train": fb["forward"] + fb["backward"],
                "flops_generate": decode_flops(model.config, *lora, rows, width, new),
                "flops_train_shared_prompt": shared["forward"] + shared["backward"]}
