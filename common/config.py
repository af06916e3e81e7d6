"""The checks that run before anything starts: every setting of a run's configuration that is out of
range or has no effect in the chosen combination (`run_config_errors`, `check_run_config`), and what
the machine that runs it must have (`machine_errors`, `check_machine`).

The schema they check, `RunConfig` and its dataclasses (which Hydra composes YAML groups over) and
its loading (`to_run_config`, `build_dataclass`, `check_literals`, `register_schema`), is
`common.schema`; its names are importable from here too.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from common.schema import (
    EngineConfig,
    EvalConfig,
    KLConfig,
    LogConfig,
    ModelConfig,
    RunConfig,
    SFTConfig,
    TrainerConfig,
    build_dataclass,
    check_literals,
    register_schema,
    to_run_config,
)
from common.util import dotted_get

__all__ = [
    "ACCELERATORS", "MAX_EPISODES", "SEED_LIMIT", "SIZE_LIMITS", "TINY_SHAPE", "VLLM_ONLY",
    "EngineConfig", "EvalConfig", "KLConfig", "LOGGER_PACKAGES", "LogConfig", "ModelConfig", "RunConfig",
    "SFTConfig", "TrainerConfig",
    "build_dataclass", "check_literals", "check_machine", "check_run_config", "machine_errors",
    "register_schema", "run_config_errors", "to_run_config",
]


# logger -> the package it needs (the `loggers` extra: `make setup LOGGERS=1`); csv needs nothing
LOGGER_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


def _positive(x: float) -> bool:
    """x > 0 and finite (False for NaN, which every comparison fails)."""
    return x > 0 and math.isfinite(x)


def _non_negative(x: float) -> bool:
    return x >= 0 and math.isfinite(x)


def _differs(obj: Any, name: str) -> bool:
    """The field `name` of a config dataclass is set to something other than its default."""
    f = next(f for f in dataclasses.fields(obj) if f.name == name)
    default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return bool(getattr(obj, name) != default)


# seeds are in [0, 2^63): what torch.manual_seed, numpy and a run folder's name (seed-<k>) all take
SEED_LIMIT = 2**63
# Upper bounds of the sizes that multiply a run's work: far above every shipped setup (the largest:
# trainer.steps=1000, tasks_per_step=90, group_size=64, eval.k=4, max_new_tokens=4096, sft.steps=4000,
# sft.demos=6000), so that a value beyond one is a typo or a run that could never finish, refused before it
# starts rather than found days later.
SIZE_LIMITS = {"trainer.steps": 10**6, "trainer.tasks_per_step": 2**16, "trainer.group_size": 2**12,
               "trainer.ppo_epochs": 10**3, "trainer.minibatches": 2**16, "trainer.max_new_tokens": 2**17,
               "eval.k": 2**12, "eval.max_tasks": 10**7,
               "sft.steps": 10**6, "sft.copy_steps": 10**6, "sft.demos": 10**7, "sft.batch_size": 2**16,
               "engine.max_batch": 2**16, "model.max_length": 2**20}
# training episodes, trainer.steps x tasks_per_step x group_size (the largest shipped: 1.0M)
MAX_EPISODES = 10**9
VLLM_ONLY = ("gpu_memory_utilization", "kv_cache_memory_bytes", "max_model_len", "sleep", "enforce_eager",
             "sync")
TINY_SHAPE = ("hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads", "head_dim",
              "vocab_size")
ACCELERATORS = ("cpu", "gpu", "cuda", "mps", "tpu", "auto")


def run_config_errors(cfg: RunConfig) -> list[str]:
    """Every setting that is out of range, or has no effect in the chosen combination: one line each.

    Only what the config alone decides is checked here (it runs wherever a config is composed, e.g. on a
    cluster's login node before submission); `machine_errors` checks the machine that runs it, and
    `resolve()` (common/fit.py) the environment's and the method's own settings.
    """
    t, kl, e, m, sft, ev = cfg.trainer, cfg.trainer.kl, cfg.engine, cfg.model, cfg.sft, cfg.eval
    errors: list[str] = []
    # ---- the objective
    if ev.split not in ("heldout", "dev"):
        errors.append("eval.split must be heldout | dev (dev: design and tuning; heldout: the final "
                      f"results); got {ev.split!r}")
    if kl.placement not in ("none", "reward", "loss"):
        errors.append(f"trainer.kl.placement must be none | reward | loss; got {kl.placement!r}")
    if kl.estimator not in ("k1", "k2", "k3"):
        errors.append(f"unknown KL estimator trainer.kl.estimator={kl.estimator!r}; choose k1 | k2 | k3")
    if not _non_negative(kl.coef):
        errors.append(f"trainer.kl.coef must be >= 0 (beta); got {kl.coef}")
    elif kl.placement == "none" and kl.coef != 0:
        errors.append(f"trainer.kl.coef={kl.coef} has no effect with trainer.kl.placement=none; "
                      "set placement=loss or reward")
    if kl.placement != "none" and kl.coef == 0:
        errors.append(f"trainer.kl.placement={kl.placement} has no effect with trainer.kl.coef=0; "
                      "set a coef or placement=none")
    if kl.placement == "loss" and kl.estimator == "k1":
        # d/dtheta E_pi[log pi - log ref] over samples held fixed is E_pi[grad log pi] = 0 (Schulman 2020)
        errors.append("trainer.kl.placement=loss with trainer.kl.estimator=k1: k1 in the loss has zero "
                      "expected gradient; use k3 (gradient of KL(ref||pi)) or k2 (gradient of KL(pi||ref))")
    if t.loss_agg not in ("token-mean", "seq-mean"):
        errors.append(f"trainer.loss_agg must be token-mean | seq-mean; got {t.loss_agg!r}")
    if not 0 <= t.clip_low < 1:
        errors.append(f"trainer.clip_low must be in [0, 1) (the ratio is clipped below at 1 - clip_low); "
                      f"got {t.clip_low}")
    if not _non_negative(t.clip_high):
        errors.append(f"trainer.clip_high must be >= 0 (the ratio is clipped above at 1 + clip_high); "
                      f"got {t.clip_high}")
    if not math.isfinite(t.entropy_coef):
        errors.append(f"trainer.entropy_coef must be a finite number; got {t.entropy_coef}")
    # ---- optimization
    if not _positive(t.lr):
        errors.append(f"trainer.lr must be > 0 and finite; got {t.lr}")
    if not _non_negative(t.weight_decay):
        errors.append(f"trainer.weight_decay must be >= 0; got {t.weight_decay}")
    if not t.max_grad_norm > 0:
        errors.append(f"trainer.max_grad_norm must be > 0 (inf: no clipping); got {t.max_grad_norm}")
    if t.group_size < 1 or t.tasks_per_step < 1 or t.steps < 0 or t.ppo_epochs < 1 or t.minibatches < 1:
        errors.append("trainer.group_size, tasks_per_step, ppo_epochs and minibatches must be >= 1, "
                      "steps >= 0")
    for key in ("micro_batch_rows", "micro_batch_tokens", "checkpoint_every", "threads"):
        if getattr(t, key) < 0:
            errors.append(f"trainer.{key} must be >= 0 (0: {_ZERO_MEANS[key]}); got {getattr(t, key)}")
    if t.precision not in ("32", "bf16"):
        errors.append(f"trainer.precision must be 32 | bf16; got {t.precision!r}")
    # ---- sampling
    if not _positive(t.temperature):
        errors.append(f"trainer.temperature must be > 0 and finite for RL rollouts; got {t.temperature}")
    if t.max_new_tokens < 1:
        errors.append(f"trainer.max_new_tokens must be >= 1 (tokens per turn); got {t.max_new_tokens}")
    elif m.kind == "tiny" and m.max_length <= t.max_new_tokens:
        # A turn needs its prompt and max_new_tokens in the context. The prompt's length in tokens is known
        # only once the tokenizer exists: `Environment.check_context` (envs/api/base.py) checks the
        # longest first observation then, in common/fit.py, as soon as the warm start's tokenizer is built.
        errors.append(f"model.max_length={m.max_length} leaves no room for a prompt with "
                      f"trainer.max_new_tokens={t.max_new_tokens}; raise model.max_length or lower "
                      "trainer.max_new_tokens")
    # ---- evaluation
    if ev.k < 1:
        errors.append(f"eval.k must be >= 1 (samples per held-out task for mean@k / pass@k); got {ev.k}")
    if not _non_negative(ev.temperature):
        errors.append(f"eval.temperature must be >= 0 and finite (0: greedy); got {ev.temperature}")
    elif ev.k > 1 and ev.temperature == 0:
        errors.append(f"eval.k={ev.k} with eval.temperature=0 gives k identical greedy samples; "
                      "set k=1 or a temperature")
    if not 0 < ev.top_p <= 1:
        errors.append(f"eval.top_p must be in (0, 1]; got {ev.top_p}")
    for key in ("max_tasks", "every"):
        if getattr(ev, key) < 0:
            errors.append(f"eval.{key} must be >= 0 (0: {_ZERO_MEANS[key]}); got {getattr(ev, key)}")
    # ---- model
    if m.kind not in ("tiny", "pretrained"):
        errors.append(f"model.kind must be tiny | pretrained; got {m.kind!r}")
    if m.kind == "tiny" and m.path:
        errors.append("model.path is set but model.kind=tiny builds a model from its config; "
                      "use model.kind=pretrained")
    if m.kind == "pretrained" and not m.path:
        hint = f"download {m.hf_id} to a local folder and " if m.hf_id else ""
        errors.append(f"model.kind=pretrained needs model.path; got None: {hint}pass model.path=...")
    # (a tiny model's shape with model.kind=pretrained is not an error: a scale file may set it for its
    # tiny model)
    if m.kind == "tiny" and any(getattr(m, key) < 1 for key in TINY_SHAPE):
        errors.append(f"model.{', '.join(TINY_SHAPE)} must be >= 1")
    elif m.kind == "tiny" and m.num_heads % m.num_kv_heads:
        errors.append(f"model.num_heads={m.num_heads} must be a multiple of "
                      f"model.num_kv_heads={m.num_kv_heads}")
    if m.lora_rank < 1:
        errors.append(f"model.lora_rank must be >= 1; got {m.lora_rank}")
    if not _positive(m.lora_alpha):
        errors.append(f"model.lora_alpha must be > 0 (the adapter's scale is alpha / rank); "
                      f"got {m.lora_alpha}")
    if not 0 <= m.lora_dropout < 1:
        errors.append(f"model.lora_dropout must be in [0, 1); got {m.lora_dropout}")
    # ---- warm start
    if sft.enabled:
        for key in ("steps", "batch_size", "demos"):
            if getattr(sft, key) < 1:
                errors.append(f"sft.{key} must be >= 1 with sft.enabled=true (or set sft.enabled=false); "
                              f"got {getattr(sft, key)}")
        if not _positive(sft.lr):
            errors.append(f"sft.lr must be > 0 and finite; got {sft.lr}")
        if sft.copy_steps < 0:
            errors.append(f"sft.copy_steps must be >= 0 (0: no copy pre-warm-start); got {sft.copy_steps}")
        if sft.copy_steps and not _positive(sft.copy_lr):
            errors.append(f"sft.copy_lr must be > 0 and finite; got {sft.copy_lr}")
        if sft.micro_batch_rows < 0:
            errors.append(f"sft.micro_batch_rows must be >= 0 (0: the whole batch at once); "
                          f"got {sft.micro_batch_rows}")
    # (with sft.enabled=false the sft.* settings are not errors: a scale file sets them, a user may switch
    # it off)
    # ---- engine and machine
    if e.name not in ("hf", "vllm"):
        errors.append(f"engine.name must be hf | vllm; got {e.name!r}")
    if e.max_batch < 1:
        errors.append(f"engine.max_batch must be >= 1; got {e.max_batch}")
    if e.sync not in ("auto", "adapter", "full", "merged"):
        errors.append(f"engine.sync must be auto | adapter | full | merged; got {e.sync!r}")
    if e.name == "hf":
        for key in VLLM_ONLY:
            if _differs(e, key):
                why = " (it samples from the trained module itself)" if key == "sync" else ""
                errors.append(f"engine.{key}={getattr(e, key)} has no effect with engine=hf{why}; "
                              "it is a vLLM setting (engine=vllm)")
    else:
        if not e.kv_reuse:
            errors.append("engine.kv_reuse=false has no effect with engine=vllm; it is an HF engine setting")
        if not 0 < e.gpu_memory_utilization <= 1:
            errors.append(f"engine.gpu_memory_utilization must be in (0, 1]; got {e.gpu_memory_utilization}")
        if e.kv_cache_memory_bytes is not None and e.kv_cache_memory_bytes < 1:
            errors.append(f"engine.kv_cache_memory_bytes must be >= 1 (or null); "
                          f"got {e.kv_cache_memory_bytes}")
        if e.max_model_len is not None and e.max_model_len < 1:
            errors.append(f"engine.max_model_len must be >= 1 (or null); got {e.max_model_len}")
        if t.accelerator != "cpu" and cfg.model.kind != "tiny" and e.max_model_len is None:
            errors.append("engine=vllm on a GPU with a pretrained model needs engine.max_model_len (the "
                          "longest "
                          "context a row reaches); without it vLLM reserves the model's whole window per "
                          "sequence (Qwen3-8B: 40960 tokens, 5.6 GiB of KV cache) or refuses to start")
    if t.dist_timeout_s < 1:
        errors.append(f"trainer.dist_timeout_s must be >= 1; got {t.dist_timeout_s}")
    if t.accelerator not in ACCELERATORS:
        errors.append(f"trainer.accelerator must be one of {' | '.join(ACCELERATORS)}; got {t.accelerator!r}")
    if t.devices < 1 or t.num_nodes < 1:
        errors.append(f"trainer.devices and trainer.num_nodes must be >= 1; got {t.devices}, {t.num_nodes}")
    errors += _size_errors(cfg)
    # ---- the run
    errors += _seed_errors(cfg)
    for key in ("out_dir", "work_dir"):
        if not str(getattr(cfg, key)).strip():
            errors.append(f"{key} is empty: the run would write into the current folder (the repository "
                          f"root); set {key}={RunConfig.out_dir if key == 'out_dir' else RunConfig.work_dir} "
                          "(the default) or another folder")
    if cfg.scale not in ("smoke", "cpu", "small", "paper"):
        errors.append(f"scale must be smoke | cpu | small | paper; got {cfg.scale!r}")
    errors += _logger_errors(cfg)
    return errors


def _logger_errors(cfg: RunConfig) -> list[str]:
    """Unknown loggers, a logger whose package is not installed (refused here, before any warm start or
    job submission: Lightning would fail only once the run had started), and the sample log's settings."""
    import importlib.util

    errors = []
    for logger in cfg.loggers:
        if logger not in ("csv", *LOGGER_PACKAGES):
            errors.append(f"unknown logger {logger!r}; choose csv | tensorboard | wandb")
        elif logger in LOGGER_PACKAGES and importlib.util.find_spec(LOGGER_PACKAGES[logger]) is None:
            errors.append(f"loggers=[{logger}] but the {LOGGER_PACKAGES[logger]} package is not installed: "
                          "run `make setup LOGGERS=1` (the `loggers` extra), or leave it out of loggers")
    if cfg.log.samples_every < 0:
        errors.append(f"log.samples_every must be >= 0 (0: no samples.jsonl); got {cfg.log.samples_every}")
    if cfg.log.samples_every and cfg.log.samples_groups < 1:
        errors.append(f"log.samples_groups must be >= 1 (or log.samples_every=0: no samples); "
                      f"got {cfg.log.samples_groups}")
    if cfg.log.wandb_project is not None and not cfg.log.wandb_project.strip():
        errors.append("log.wandb_project is empty; leave it null (llm-agent-rl-<method>) or name a project")
    return errors


def _size_errors(cfg: RunConfig) -> list[str]:
    """Sizes over their bound (SIZE_LIMITS), and training that would take more than MAX_EPISODES episodes."""
    errors = []
    for key, limit in SIZE_LIMITS.items():
        value = dotted_get(cfg, key)
        if value > limit:
            errors.append(f"{key}={value} is over its bound {limit} (far above any setup here, "
                          "common/config.py SIZE_LIMITS); lower it")
    t = cfg.trainer
    episodes = t.steps * t.tasks_per_step * t.group_size
    if episodes > MAX_EPISODES and not errors:  # (a size over its own bound is the one line to fix first)
        errors.append(f"trainer.steps x tasks_per_step x group_size = "
                      f"{t.steps} x {t.tasks_per_step} x {t.group_size} = "
                      f"{episodes:.3g} training episodes, over the {MAX_EPISODES:.0e} a run here can finish "
                      "(common/config.py MAX_EPISODES); lower one of them")
    return errors


def _seed_errors(cfg: RunConfig) -> list[str]:
    """Seeds outside [0, 2^63): torch refuses larger ones mid-run, and seed-<k> with k < 0 is no run
    folder paper/ reads."""
    seeds = {"seed": cfg.seed, "model.init_seed": cfg.model.init_seed, "sft.seed": cfg.sft.seed}
    return [f"{key} must be in [0, 2^63) (a non-negative 64-bit integer); got {value}"
            for key, value in seeds.items() if value is not None and not 0 <= value < SEED_LIMIT]


_ZERO_MEANS = {"micro_batch_rows": "the whole minibatch at once", "micro_batch_tokens": "no token limit",
               "checkpoint_every": "only at the end",
               "threads": "all cores", "max_tasks": "the whole held-out split",
               "every": "only at start and end"}


def machine_errors(cfg: RunConfig) -> list[str]:
    """What the machine that runs `cfg` must have: the GPUs it asks for, vLLM, the model's files.

    Not part of `check_run_config`: a cluster launch checks its cells on a login node, which has none of
    these.
    """
    import importlib.util

    import torch

    t, errors = cfg.trainer, []
    if t.accelerator in ("gpu", "cuda"):
        if not torch.cuda.is_available():
            errors.append(f"trainer.accelerator={t.accelerator} but this machine has no GPU "
                          "(torch.cuda.is_available() is False); use trainer.accelerator=cpu, or run on a "
                          "GPU machine")
        elif t.devices > torch.cuda.device_count():
            errors.append(f"trainer.devices={t.devices} but this machine has "
                          f"{torch.cuda.device_count()} GPU(s)")
    if cfg.engine.name == "vllm" and importlib.util.find_spec("vllm") is None:
        errors.append("engine=vllm but vLLM is not installed: run `make setup VLLM=1` (CPU) or install the "
                      "`gpu` extra")
    if cfg.model.kind == "pretrained" and cfg.model.path:
        from common.models import model_folder

        try:  # `pkg://<package>` (model=smollm2) is an installed package's folder
            if not model_folder(cfg.model.path).exists():
                errors.append(f"model.path={cfg.model.path} does not exist on this machine "
                              f"(download {cfg.model.hf_id or 'the model'} there)")
        except FileNotFoundError as e:
            errors.append(str(e))
    return errors


def _raise(errors: list[str]) -> None:
    if len(errors) == 1:
        raise ValueError(f"invalid configuration: {errors[0]}")
    if errors:
        raise ValueError("invalid configuration:\n  - " + "\n  - ".join(errors))


def check_run_config(cfg: RunConfig) -> None:
    """Raise ValueError listing every bad setting (one line each; a single one makes a one-line message)."""
    _raise(run_config_errors(cfg))


def check_machine(cfg: RunConfig) -> None:
    """Raise ValueError when this machine cannot run `cfg` (see `machine_errors`); call before anything
    is written."""
    _raise(machine_errors(cfg))
