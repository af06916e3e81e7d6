"""The typed schema of one run's configuration: the dataclasses Hydra composes over, and loading a
composed config onto them (unknown keys and wrong types raise).

Hydra composes YAML groups (common/conf/{model,env,engine,trainer}, replications/<m>/conf) over
these dataclasses. `env` and `method` stay open dicts here and are checked against the chosen
environment's and method's own `Config` dataclasses by `resolve()`: an unknown key is an error.
The checks of the values, run before anything starts, are `common.config`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf


@dataclass
class ModelConfig:
    kind: str = "tiny"  # tiny: a Qwen3-style model built offline | pretrained: load from `path`
    path: str | None = None  # local folder (or a GGUF file's folder) of a pretrained model
    gguf_file: str | None = None  # file name inside `path` when the weights are GGUF
    hf_id: str | None = None  # what the paper used (documentation; never downloaded)
    # tiny model shape (a Qwen3 config); about 0.85M parameters at these defaults
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 32
    vocab_size: int = 512  # target size of the locally trained BPE tokenizer
    max_length: int = 512  # context length (positions)
    init_seed: int = 0  # seed of the tiny model's random initialization
    chat_template: bool = False  # wrap prompts with the tokenizer's chat template (pretrained)
    # LoRA (peft): one adapter per role binding; the reference is the base with adapters off
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_dropout: float = 0.0
    lora_targets: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    # role -> adapter name, or "scripted" for the environment's scripted demonstrator.
    # Roles not listed use `default_adapter`.
    roles: dict[str, str] = field(default_factory=dict)
    default_adapter: str = "policy"
    frozen_adapters: list[str] = field(default_factory=list)  # adapters that never train


@dataclass
class SFTConfig:
    """Warm start: supervised training on the environment's scripted demonstrations."""

    enabled: bool = True
    steps: int = 300
    lr: float = 3e-3
    batch_size: int = 32
    demos: int = 256  # train tasks demonstrated
    pack: bool = False  # one row per multi-turn context (every action of it labelled), not one row per turn
    micro_batch_rows: int = 0  # rows per forward/backward, gradients accumulated (0: the whole batch at once)
    seed: int | None = None  # None: the run's seed (each seed gets its own warm start)
    # a synthetic copy pre-warm-start before the demonstrations (#41, `common.warmstart.copy_sequences`):
    # `copy_steps` steps on random token sequences `x newline x`, the loss on the second x, at `copy_lr`.
    # It grows the copy (induction) heads a pretrained model brings and a tiny one trained from scratch on
    # demonstrations alone did not in 5000 steps. 0: none (and the warm start's cache key as before)
    copy_steps: int = 0
    copy_lr: float = 1e-3


@dataclass
class EngineConfig:
    name: str = "hf"  # hf | vllm
    max_batch: int = 256  # sequences per forward in the HF engine
    # HF only: a multi-turn episode's keys and values kept between its turns (common/engines/kv_reuse.py);
    # false re-encodes the whole context every turn (same tokens and log-probs, to float rounding)
    kv_reuse: bool = True
    # vLLM only
    gpu_memory_utilization: float = 0.5
    kv_cache_memory_bytes: int | None = None  # null: 256 MiB on the CPU build; on a GPU from the utilization
    max_model_len: int | None = None  # a pretrained model's context in vLLM (null: the model's own window)
    sleep: bool = False  # GPU: vLLM sleeps (weights to host, KV cache dropped) during the update
    enforce_eager: bool = True
    # auto | adapter | full | merged: how new weights reach vLLM after a step (merged: a one-adapter policy's
    # LoRA merged into the base, served without vLLM's LoRA path; auto: merged for one adapter without a GPU,
    # else full iff the base trains, else adapter)
    sync: str = "auto"


@dataclass
class KLConfig:
    coef: float = 0.0  # beta
    placement: str = "none"  # none | reward (subtract beta*KL from the outcome) | loss (add to loss)
    estimator: str = "k3"  # k1 | k2 | k3 (Schulman 2020), see common.loss.kl_estimate


@dataclass
class TrainerConfig:
    steps: int = 100  # RL steps (one rollout + credit + updates each)
    tasks_per_step: int = 16
    group_size: int = 8  # G episodes per task
    lr: float = 1e-3
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    ppo_epochs: int = 1  # passes over each step's batch
    minibatches: int = 1  # optimizer steps per pass; 1 x 1 = strictly on-policy (ratio == 1)
    clip_low: float = 0.2  # ratio clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float = 0.2
    loss_agg: str = "token-mean"  # token-mean | seq-mean (mean over sequences of token means)
    entropy_coef: float = 0.0
    kl: KLConfig = field(default_factory=KLConfig)
    temperature: float = 1.0  # rollout temperature
    max_new_tokens: int = 32  # per turn
    micro_batch_rows: int = 0  # rows per forward/backward chunk; 0 = the whole minibatch at once
    # padded tokens (rows x longest row) per forward/backward chunk, gradients accumulated: bounds the
    # update's memory where rows are long (multi-turn); 0 = no limit. Short rows stay in one chunk.
    micro_batch_tokens: int = 8192
    # recompute each decoder layer's activations in the backward (transformers' checkpointing, non-reentrant):
    # a layer's input kept instead of its activations (experiments.plan_memory says what it saves)
    gradient_checkpointing: bool = False
    # NCCL / gloo collective timeout (seconds) of a multi-rank run: vLLM's start and the first step's rollout
    # run between collectives; torch's default is 10 minutes
    dist_timeout_s: int = 3600
    checkpoint_every: int = 10  # RL steps between checkpoints (and at the end)
    threads: int = 0  # torch threads; 0 = all cores
    precision: str = "32"  # 32 | bf16 (autocast for forward passes where the CPU supports it)
    # score with the lean forward (common/engines/fast.py) where the model allows; false = HF/peft's
    fast_forward: bool = True
    accelerator: str = "cpu"  # cpu | gpu | auto (Lightning accelerator)
    devices: int = 1  # devices per node (scale=paper under srun: equals the profile's GPUs per node)
    num_nodes: int = 1


@dataclass
class EvalConfig:
    every: int = 0  # RL steps between held-out evaluations; 0 = only at start and end
    k: int = 4  # samples per task for mean@k / pass@k
    temperature: float = 1.0
    top_p: float = 1.0
    max_tasks: int = 0  # 0 = the whole evaluated split
    # heldout | dev. held-out = the test split (final results); dev = design, tuning, pilots
    split: str = "heldout"
    at_start: bool = True  # evaluate the warm start (step 0)
    # environment variants also evaluated (eval.json "variants")
    variants: list[str] = field(default_factory=list)


@dataclass
class LogConfig:
    """What a run records besides its metrics and evaluations; nothing here changes what it computes
    (these settings are RESUME_IRRELEVANT: a run's identity leaves them out)."""

    # RL steps between sample records in samples.jsonl (at steps 0, N, 2N, ... and the last); 0 = none
    samples_every: int = 10
    samples_groups: int = 2  # groups per sample record: the step's first ones (no random draw)
    wandb_project: str | None = None  # loggers=[wandb]: the W&B project; None = llm-agent-rl-<method>


@dataclass
class RunConfig:
    method: dict[str, Any] = field(default_factory=lambda: {"name": "grpo"})
    env: dict[str, Any] = field(default_factory=lambda: {"name": "arith"})
    model: ModelConfig = field(default_factory=ModelConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    engine: EngineConfig = field(default_factory=EngineConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    seed: int = 0
    scale: str = "smoke"  # smoke | cpu | small | paper
    arm: str = "default"  # name of the arm within a replication
    out_dir: str = "results"  # run records: <out_dir>/<method>/<env>/<arm>/seed-<k>/
    work_dir: str = ".cache"  # checkpoints, warm starts, logger output (ignored by git)
    loggers: list[str] = field(default_factory=lambda: ["csv"])  # csv | tensorboard | wandb
    log: LogConfig = field(default_factory=LogConfig)
    force: bool = False  # overwrite a finished run
    force_design: bool = False  # run although the design check says its arm's claims cannot tell (recorded)
    progress: bool = True  # progress bar


def to_run_config(cfg: DictConfig | dict[str, Any]) -> RunConfig:
    """Merge a composed Hydra config onto the schema (unknown keys and wrong types raise)."""
    _check_keys(RunConfig, cfg if isinstance(cfg, dict) else OmegaConf.to_container(cfg), "")
    merged = OmegaConf.merge(_schema(), cfg)  # merge copies: the cached schema stays as it is
    obj = OmegaConf.to_object(merged)
    assert isinstance(obj, RunConfig)
    return obj


@functools.cache
def _schema() -> DictConfig:
    return OmegaConf.structured(RunConfig)


def _check_keys(cls: type, values: Any, prefix: str) -> None:
    """Every key must be a field of the dataclass (Hydra's `+key=` would otherwise slip through)."""
    if not isinstance(values, dict):
        return
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in values.items():
        if key not in fields:
            raise ValueError(f"unknown setting {prefix}{key}; "
                             f"{prefix or 'the top level '}accepts {sorted(fields)}")
        sub = fields[key].default_factory if fields[key].default_factory is not dataclasses.MISSING else None
        if sub is not None and dataclasses.is_dataclass(sub):
            _check_keys(sub, value, f"{prefix}{key}.")  # type: ignore[arg-type]


def build_dataclass(cls: type, values: dict[str, Any], what: str) -> Any:
    """Instantiate `cls` from `values`, failing on unknown keys with the list of known ones."""
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown {what} setting(s) {unknown}; "
                         f"{what} {values.get('name', '')!r} accepts {sorted(known)}")
    obj = cls(**values)
    check_literals(obj, what)
    return obj


def check_literals(obj: Any, what: str) -> None:
    """Fields annotated `Literal[...]` (a method's arms, e.g. `credit`) accept only those values."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        hint = hints.get(f.name)
        if typing.get_origin(hint) is typing.Literal and getattr(obj, f.name) not in typing.get_args(hint):
            choices = " | ".join(map(str, typing.get_args(hint)))
            raise ValueError(f"{what}.{f.name} must be one of {choices}; got {getattr(obj, f.name)!r}")


@functools.cache
def register_schema() -> None:
    """Make RunConfig the schema every composed config is checked against (`run_schema`); once a process."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="run_schema", node=RunConfig)
