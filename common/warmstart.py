"""The SFT warm start: the base model trained on the environment's scripted demonstrations before RL.

A warm start updates the *base* weights, so the reference of the RL phase is the warm-started model.
It is cached by a hash of everything it depends on (the settings, and the source of the code that makes
its data and trains it: `warm_start_code`) and computed once (a file lock guards concurrent runs).
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import json
import random
import sys
from dataclasses import asdict, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import torch.nn.functional as F
from filelock import FileLock
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
)

from common.chat import ChatFormat, demonstrated_action_ids, observation_text
from common.config import ModelConfig, SFTConfig
from common.models import build_tiny_model, load_pretrained, savable, train_tokenizer
from envs.api.base import Environment, Observation


def fingerprint(*parts: Any) -> str:
    blob = json.dumps([asdict(p) if hasattr(p, "__dataclass_fields__") else p for p in parts], sort_keys=True,
                      default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


# ---- SFT warm start ----------------------------------------------------------------------------
# the tokenizer, the tiny model, the demonstrations' tokens, the SFT
SFT_CODE = ("common.models", "common.warmstart", "common.chat")
ENV_PACKAGE = "envs."  # an environment's code: its module and the modules of this package it draws on


def _env_modules(env: Environment) -> dict[str, ModuleType]:
    """The environment's module, the modules of its classes' bases and its config's, and, transitively, the
    `envs` modules any of them takes a name from (base, shared frames, task generators)."""
    found: dict[str, ModuleType] = {}
    todo = [c.__module__ for cls in (type(env), type(env.cfg)) for c in cls.__mro__
            if c.__module__ == type(env).__module__ or c.__module__.startswith(ENV_PACKAGE)]
    while todo:
        name = todo.pop()
        module = sys.modules.get(name)
        if module is None or name in found:
            continue
        found[name] = module
        for obj in vars(module).values():
            if inspect.ismodule(obj):
                todo.append(obj.__name__)
            elif inspect.isclass(obj) or inspect.isfunction(obj):
                todo.append(obj.__module__)
        todo = [n for n in todo if n.startswith(ENV_PACKAGE) or n == type(env).__module__]
    return found


def warm_start_code(env: Environment) -> dict[str, str]:
    """Module name -> sha256 (16 hex) of its source file, for the code a warm start of `env` depends on:
    the environment's own code (`_env_modules`: its tasks, observations and scripted demonstrator) and
    the SFT code (`SFT_CODE`). Part of the warm start's cache key, so an edit of an env's demonstrator
    builds a new warm start instead of reusing a stale one, while an edit elsewhere (another env, the
    trainer, a method) reuses it. Read from disk at each call. Not covered: code outside `envs`
    that an env calls (`envs.api.sandbox`), and installed packages (an env's `provenance()` names them)."""
    modules = _env_modules(env) | {name: importlib.import_module(name) for name in SFT_CODE}
    code = {}
    for name, module in sorted(modules.items()):
        source = inspect.getsourcefile(module)
        if source is not None:
            code[name] = hashlib.sha256(Path(source).read_bytes()).hexdigest()[:16]
    return code


def warm_start_key(model_cfg: ModelConfig, sft_cfg: SFTConfig, env: Environment,
                   seed: int) -> tuple[str, dict[str, str]]:
    """The warm start's cache key (a hash of the settings it depends on and of `warm_start_code`) and that
    code's fingerprint. The run seed matters only through the SFT seed (`sft.seed`, default the run's)
    when SFT runs."""
    sft_seed = seed if sft_cfg.seed is None else sft_cfg.seed
    code = warm_start_code(env)
    sft_settings = asdict(sft_cfg)
    if not sft_cfg.copy_steps:  # no copy pre-warm-start: the key of before its settings existed
        del sft_settings["copy_steps"], sft_settings["copy_lr"]
    key = fingerprint(model_cfg.__dict__ | {"roles": None, "frozen_adapters": None},
                      sft_settings if sft_cfg.enabled else None,
                      env.cfg, sft_seed if sft_cfg.enabled else None, type(env).__name__, code)
    return key, code


def demonstrations(env: Environment, tokenizer: Any, n_tasks: int, seed: int,
                   chat: ChatFormat | None = None) -> list[tuple[list[int], list[int]]]:
    """(context ids, action ids) pairs from expert plays, tokenized exactly as rollouts build them
    (through the chat template when `chat` is given, as the rollout does)."""
    split = "demo" if env.cfg.demo_size else "train"
    tasks = env.task_set()[split]
    rng = random.Random(seed)
    stop = env.stop[0] if env.stop else ""
    pairs = []
    for row in tasks.select(range(min(n_tasks, len(tasks)))):
        ep = env.new_episode(json.loads(row["task"]), rng)
        contexts: dict[str, list[int]] = {}
        obs: Observation | None = ep.start()
        while obs is not None:
            first = obs.new_context or obs.role not in contexts
            ctx = [] if obs.new_context else contexts.get(obs.role, [])
            after_eos = bool(ctx) and ctx[-1] == tokenizer.eos_token_id
            ctx = ctx + tokenizer.encode(observation_text(chat, obs.text, first, after_eos),
                                         add_special_tokens=False)
            action = ep.expert_action()
            action_ids = demonstrated_action_ids(tokenizer, action, stop)
            pairs.append((ctx, action_ids))
            contexts[obs.role] = ctx + action_ids
            obs = ep.step(action).next
    return pairs


def copy_sequences(tokenizer: Any, n: int, seed: int, lengths: tuple[int, int] = (4, 16)
                   ) -> list[tuple[list[int], list[int]]]:
    """`n` (context, target) pairs of the copy pre-warm-start (`sft.copy_steps`): a context `x` then the
    newline token, the target `x` again, x of 4-16 tokens drawn uniformly from the tokenizer's vocabulary
    (its pad and EOS tokens left out). Predicting the second x token by token is what a copy (induction)
    head does: find the current token earlier, emit the one after it."""
    rng = random.Random(f"copy/{seed}")
    special = {tokenizer.pad_token_id, tokenizer.eos_token_id}
    vocab = [i for i in range(len(tokenizer)) if i not in special]
    newline = tokenizer.encode("\n", add_special_tokens=False)
    if len(newline) != 1:
        raise ValueError(f"sft.copy_steps: the newline must be one token of this tokenizer; got {newline}")
    pairs = []
    for _ in range(n):
        x = [rng.choice(vocab) for _ in range(rng.randint(*lengths))]
        pairs.append((x + newline, x))
    return pairs


def packed_rows(pairs: list[tuple[list[int], list[int]]]) -> list[tuple[list[int], list[int]]]:
    """(ids, labels) rows with the turns of one multi-turn context in one row (`sft.pack`): a pair whose
    context starts with a recent row's whole text (as `demonstrations` builds the next turn of a role's
    context) extends that row, its action tokens labelled too (-100 elsewhere), so that a context is read
    once rather than once per turn. Every action token is trained as often as unpacked; the mean of a
    batch's loss weighs contexts by their action tokens."""
    rows: list[tuple[list[int], list[int]]] = []
    recent: list[int] = []  # rows that later turns may extend (the last few: roles interleave)
    for ctx, act in pairs:
        for i in reversed(recent):
            ids, labels = rows[i]
            if len(ctx) >= len(ids) and ctx[: len(ids)] == ids:
                rows[i] = (ctx + act, labels + [-100] * (len(ctx) - len(ids)) + act)
                break
        else:
            rows.append((ctx + act, [-100] * len(ctx) + act))
            recent = [*recent[-7:], len(rows) - 1]
    return rows


def sft(model: Any, pairs: list[tuple[list[int], list[int]]], cfg: SFTConfig, seed: int, pad_id: int,
        progress: bool = False) -> list[float]:
    """Full-parameter supervised training on action tokens only: AdamW under torch's OneCycleLR,
    i.e. a cosine warm-up from lr/25 to `lr` over the first 10% of steps, then cosine annealing to
    lr/2.5e5; with OneCycleLR's default `cycle_momentum=True`, Adam's beta1 moves the other way,
    0.95 -> 0.85 during the warm-up and back to 0.95 by the end (kept: the warm starts behind the
    committed results were trained this way).

    A row is a demonstrated pair (context, action), or with `cfg.pack` a whole multi-turn context with
    every action in it (`packed_rows`). Batches go to the model's device. No autocast: the warm start
    is float32 whatever `trainer.precision` is, since its cache key (`warm_started_base`) does not
    include precision."""
    from tqdm import tqdm

    gen = torch.Generator().manual_seed(seed)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=0.0)
    # OneCycleLR needs a warm-up of at least one step and an annealing phase: with fewer than 20 steps
    # the 10% warm-up is stretched to 2 steps; under 4 steps the learning rate is constant
    sched: torch.optim.lr_scheduler.LRScheduler = (
        torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.lr, total_steps=cfg.steps,
                                            pct_start=max(0.1, 2 / cfg.steps))
        if cfg.steps >= 4 else torch.optim.lr_scheduler.LambdaLR(opt, lambda _: 1.0))
    device = next(model.parameters()).device
    model.train()
    losses = []
    rows = packed_rows(pairs) if cfg.pack else [(ctx + act, [-100] * len(ctx) + act) for ctx, act in pairs]
    for _ in tqdm(range(cfg.steps), desc="sft warm start", disable=not progress, leave=False):
        idx = torch.randint(len(rows), (cfg.batch_size,), generator=gen).tolist()
        width = max(len(rows[i][0]) for i in idx)
        ids = torch.full((len(idx), width), pad_id)
        labels = torch.full((len(idx), width), -100)
        mask = torch.zeros((len(idx), width), dtype=torch.long)
        for r, i in enumerate(idx):
            row_ids, row_labels = rows[i]
            ids[r, : len(row_ids)] = torch.tensor(row_ids)
            labels[r, : len(row_ids)] = torch.tensor(row_labels)
            mask[r, : len(row_ids)] = 1
        ids, labels, mask = ids.to(device), labels.to(device), mask.to(device)
        opt.zero_grad(set_to_none=True)
        if not cfg.micro_batch_rows or cfg.micro_batch_rows >= len(idx):
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1]
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
            loss.backward()
        else:  # the same mean over the batch's labelled tokens, its rows in chunks (gradients accumulate)
            n_labelled = int((labels[:, 1:] != -100).sum())
            loss = torch.zeros((), device=device)
            for c in range(0, len(idx), cfg.micro_batch_rows):
                part = slice(c, c + cfg.micro_batch_rows)
                logits = model(input_ids=ids[part], attention_mask=mask[part]).logits[:, :-1]
                part_loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), labels[part, 1:].reshape(-1),
                                            ignore_index=-100, reduction="sum") / n_labelled
                part_loss.backward()
                loss = loss + part_loss.detach()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
    model.eval()
    return losses


def warm_started_base(model_cfg: ModelConfig, sft_cfg: SFTConfig, env: Environment, seed: int, work_dir: str,
                      progress: bool = False, dtype: torch.dtype = torch.float32,
                      device: torch.device | str = "cpu") -> tuple[Any, Any, dict[str, Any]]:
    """Tokenizer and base model (warm-started if sft.enabled), built once per `warm_start_key`. Its record
    (`warmstart` in the run's manifest) holds the key and the code fingerprint (`code`) it was built from.

    `dtype` is the returned base's (`common.device.base_dtype`: bf16 on a bf16 CUDA run); the SFT trains
    in float32 on `device` (the run's GPU on a CUDA run) and its cache is float32. A pretrained model
    without SFT writes nothing to the cache, so it loads without the cache's file lock, straight in
    `dtype`: the ranks of a multi-GPU run load it at once, not one after another (and never in float32
    first on the host)."""
    sft_seed = seed if sft_cfg.seed is None else sft_cfg.seed
    key, code = warm_start_key(model_cfg, sft_cfg, env, seed)
    if model_cfg.kind != "tiny" and not sft_cfg.enabled:
        tokenizer, pretrained = load_pretrained(model_cfg, dtype)
        pretrained.eval()
        return tokenizer, pretrained, {"key": key, "code": code, "sft": asdict(sft_cfg), "sft_seed": sft_seed}
    folder = Path(work_dir) / "warmstart" / key
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        info_path = folder / "warmstart.json"
        if info_path.exists():
            tokenizer = AutoTokenizer.from_pretrained(folder)
            model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
            model.eval()
            return tokenizer, model, json.loads(info_path.read_text())
        if model_cfg.kind == "tiny":
            texts = list(env.corpus())
            tokenizer = train_tokenizer(texts, model_cfg.vocab_size)
            model = build_tiny_model(model_cfg, len(tokenizer), tokenizer.pad_token_id,
                                     tokenizer.eos_token_id)
        else:
            tokenizer, model = load_pretrained(model_cfg)
        info: dict[str, Any] = {"key": key, "code": code, "sft": asdict(sft_cfg), "sft_seed": sft_seed}
        if sft_cfg.enabled:
            chat = ChatFormat.from_tokenizer(tokenizer) if model_cfg.chat_template else None
            pairs = demonstrations(env, tokenizer, sft_cfg.demos, sft_seed, chat)
            with torch.random.fork_rng():
                torch.manual_seed(sft_seed)
                model.to(device)  # the run's device; the batches follow the model
                if sft_cfg.copy_steps:  # copy heads first, on as many sequences as the steps draw
                    copy_cfg = replace(sft_cfg, steps=sft_cfg.copy_steps, lr=sft_cfg.copy_lr, pack=False)
                    copies = copy_sequences(tokenizer, sft_cfg.copy_steps * sft_cfg.batch_size, sft_seed)
                    copy_losses = sft(model, copies, copy_cfg, sft_seed, tokenizer.pad_token_id, progress)
                    info.update(copy_loss_first=copy_losses[0], copy_loss_last=copy_losses[-1])
                losses = sft(model, pairs, sft_cfg, sft_seed, tokenizer.pad_token_id, progress)
            info.update(pairs=len(pairs), loss_first=losses[0] if losses else None,
                        loss_last=losses[-1] if losses else None)
        if model_cfg.kind == "tiny" or sft_cfg.enabled:
            tmp = folder.with_suffix(".tmp")
            tokenizer.save_pretrained(tmp)
            model = savable(model)
            model.save_pretrained(tmp)
            (tmp / "warmstart.json").write_text(json.dumps(info, indent=2))
            tmp.rename(folder)
        model.eval()
        return tokenizer, (model.to(dtype) if dtype != torch.float32 else model), info
