"""What every part of the benchmark shares: the setting, the model and tokenizer, the prompts, the
eager minimal work of one step, the machine's matmul rate, and FLOP counts.

The single-turn workload is `arith` (single mode) with no stop string: each completion runs to EOS
or `max_new_tokens`, so our trainer and TRL's generate the same kind of text from the same prompts
(TRL has no stop strings in its GRPO loop).
"""

from __future__ import annotations

import contextlib
import shutil
import statistics
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from common.config import ModelConfig, SFTConfig
from common.episode import Task
from envs.testbeds.arith import ArithConfig, ArithEnv

CONF = Path(__file__).resolve().parents[1] / "common" / "conf"


@dataclass
class Setting:
    """One benchmark cell: the same for our trainer, TRL's and the minimal work."""

    model: str = "tiny"  # common/conf/model/<model>.yaml
    tasks_per_step: int = 16  # prompts per step
    group_size: int = 8  # completions per prompt
    max_new_tokens: int = 16  # completion length (EOS may end one earlier)
    temperature: float = 1.0
    lr: float = 1e-3
    kl_coef: float = 0.0  # > 0: KL (k3) in the loss, so reference logprobs are computed
    precision: str = "32"  # 32 | bf16 (autocast)
    threads: int = 0  # torch threads; 0 = all cores
    seed: int = 0
    device: str = "cpu"  # cpu | cuda (bench/gpu.sh)
    engine: str = "hf"  # our engine: hf | vllm (GPU); TRL then also generates with vLLM (colocated)
    work_dir: str = ".cache/bench"
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class BenchArith(ArithEnv):
    """`arith` without a stop string: completions end at EOS or the length limit."""

    # ArithEnv's own `stop = ("\n",)` is inferred as tuple[str] (Environment declares tuple[str, ...])
    stop = ()  # type: ignore[assignment]


# The workload of a model whose step is too slow for the small models' 16 x 8 prompts on 2 cores:
# fewer rows, a learning rate that suits a pretrained model. Our trainer, TRL and the minimal work
# all get it (`--tasks`, `--group`, `--new-tokens`, `--lr` given on the command line win).
MODEL_WORKLOAD: dict[str, dict[str, Any]] = {
    "smollm2": {"tasks_per_step": 8, "group_size": 4, "max_new_tokens": 16, "lr": 5e-5},
}


def model_config(name: str, work_dir: str | None = None) -> ModelConfig:
    """common/conf/model/<name>.yaml as a ModelConfig (a file with a top-level `model:` key, such as
    smollm2.yaml, is read from that key). With `work_dir`, a GGUF model is resolved to its
    dequantized Hugging Face folder under work_dir (`dequantized`), so every process of the
    benchmark loads the same float32 weights quickly and vLLM can serve them."""
    data: Any = OmegaConf.to_container(OmegaConf.load(CONF / "model" / f"{name}.yaml"))
    if "model" in data:
        data = data["model"]
    cfg: ModelConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), data))  # type: ignore[assignment]
    if work_dir is not None and cfg.kind == "pretrained" and cfg.gguf_file:
        return replace(cfg, path=str(dequantized(cfg, work_dir)), gguf_file=None)
    return cfg


def dequantized(cfg: ModelConfig, work_dir: str) -> Path:
    """The GGUF model `cfg` saved once as a float32 Hugging Face folder under work_dir."""
    from filelock import FileLock

    from common.models import load_pretrained, savable

    folder = Path(work_dir) / "dequantized" / Path(str(cfg.gguf_file)).stem
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if not (folder / "config.json").exists():
            tok, model = load_pretrained(cfg)
            plain = savable(model)  # transformers refuses to save a model loaded from GGUF
            tmp = folder.with_suffix(".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tok.save_pretrained(tmp)
            plain.save_pretrained(tmp)
            tmp.rename(folder)
    return folder


def bench_env() -> BenchArith:
    data = OmegaConf.to_container(OmegaConf.load(CONF / "env" / "arith.yaml"))
    return BenchArith(ArithConfig(**data))  # type: ignore[arg-type]


def base_model(s: Setting) -> tuple[Any, Any]:
    """Tokenizer and randomly initialised base model (built once, cached under work_dir)."""
    from common.warmstart import warm_started_base

    tok, model, _ = warm_started_base(model_config(s.model, s.work_dir), SFTConfig(enabled=False),
                                      bench_env(), s.seed, s.work_dir)
    return tok, model


def model_folder(s: Setting) -> str:
    """The folder of the base model and tokenizer (loadable with from_pretrained): the tiny model's
    cache folder, or a pretrained model's own (dequantized) folder."""
    from common.warmstart import warm_started_base

    cfg = model_config(s.model, s.work_dir)
    if cfg.kind == "pretrained":
        return str(cfg.path)
    _, _, info = warm_started_base(cfg, SFTConfig(enabled=False), bench_env(), s.seed, s.work_dir)
    return str(Path(s.work_dir) / "warmstart" / info["key"])


def chat_format(s: Setting, tokenizer: Any) -> Any:
    """The chat template pieces our rollout wraps a prompt in (None for a model without one)."""
    from common.chat import ChatFormat

    return ChatFormat.from_tokenizer(tokenizer) if model_config(s.model).chat_template else None


def step_prompts(s: Setting, steps: int) -> list[list[Task]]:
    """The tasks of each step, drawn exactly as our trainer draws them (GRPO's `tasks` hook)."""
    import random

    from common.config import RunConfig, TrainerConfig
    from common.episode import tasks_of
    from common.method import Method, MethodConfig, RunView
    from common.rollout import derive_seed

    env = bench_env()
    run = RunConfig(trainer=TrainerConfig(tasks_per_step=s.tasks_per_step))
    method = Method(MethodConfig(), RunView.of(run, env))
    pool = tasks_of(env.task_set()["train"])
    return [method.tasks(pool, k, random.Random(derive_seed(s.seed, k, "tasks"))) for k in range(steps)]


def prompt_text(task: Task, chat: Any = None) -> str:
    """The prompt of `task` exactly as our rollout writes it: wrapped in the chat template (`chat`,
    see `chat_format`) for an instruct model."""
    from common.chat import observation_text
    from envs.testbeds.arith import ArithEpisode

    return observation_text(chat, ArithEpisode(task.data, "single").start().text, first=True)


def answer(task: Task) -> int:
    from envs.testbeds.arith import ArithEpisode

    return ArithEpisode(task.data, "single").answer()


def autocast(precision: str, device: str = "cpu") -> contextlib.AbstractContextManager[Any]:
    return torch.autocast(device, dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()


def peak_rss_mib() -> float:
    """Peak resident memory of this process (VmHWM: unlike ru_maxrss, not inherited across the
    fork + exec that starts a worker); on a GPU, peak allocated GPU memory."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def summary(times: list[float]) -> dict[str, Any]:
    """Median, min and max of a series' step times, and every time in step order (`all_s`)."""
    return {"median_s": statistics.median(times), "min_s": min(times), "max_s": max(times), "n": len(times),
            "all_s": list(times)}


def paired_ratio(ours_s: list[float], theirs_s: list[float]) -> float | None:
    """Median over rounds of ours_k / theirs_k: the series alternate step by step, so round k's two
    steps ran back to back and a drift of the machine across the cell divides out (the ratio of the
    medians keeps it). None when the rounds do not pair up."""
    if not ours_s or len(ours_s) != len(theirs_s):
        return None
    return statistics.median(o / t for o, t in zip(ours_s, theirs_s, strict=True))


# ---- device sync --------------------------------------------------------------------------------
def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# ---- FLOP counts ---------------------------------------------------------------------------------
def forward_flops(config: Any, lora_rank: int, lora_targets: list[str], rows: int, length: int,
                  head_positions: int | None = None) -> dict[str, float]:
    """Matmul FLOPs of one forward over rows x length tokens, and of the backward of a LoRA update.

    Forward: 2 x weights per token for every linear layer (base and LoRA), the LM head at the
    `head_positions` last positions of each row only (all of them when None: the trainers keep the
    logits of the completion's positions alone, generation those of the last position), plus
    attention's two L x L products (the full square is computed). Backward with a frozen base:
    the activation gradients cost one forward again; LoRA weights also get weight gradients; the
    attention products have two gradient products each.
    """
    h, i = config.hidden_size, config.intermediate_size
    head_dim = getattr(config, "head_dim", None) or h // config.num_attention_heads
    q = config.num_attention_heads * head_dim
    kv = config.num_key_value_heads * head_dim
    shapes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
              "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}
    layers, tokens = config.num_hidden_layers, rows * length
    linear = 2 * tokens * layers * sum(a * b for a, b in shapes.values())
    lora = 2 * tokens * layers * sum(lora_rank * (a + b) for name, (a, b) in shapes.items()
                                     if name in lora_targets)
    head = (2 * rows * min(length, length if head_positions is None else head_positions) * h
            * config.vocab_size)
    attn = 2 * 2 * rows * length * length * q * layers
    fwd = linear + lora + head + attn
    bwd = linear + 2 * lora + head + 2 * attn
    return {"forward": float(fwd), "backward": float(bwd)}


def shared_prompt_flops(config: Any, lora_rank: int, lora_targets: list[str], prompts: int, prompt: int,
                        rows: int, suffix: int, head_positions: int) -> dict[str, float]:
    """`forward_flops` of the layout our scorer runs when rows share prompts (common.batch.SharedLayout):
    each distinct prompt (less its last token) once, then every row's suffix (the prompt's last token
    and the completion) attending to its prompt's keys and to its own, causally (the full rectangle
    counted, as `forward_flops` counts the full square)."""
    pre = forward_flops(config, lora_rank, lora_targets, prompts, prompt, head_positions=0)
    suf = forward_flops(config, lora_rank, lora_targets, rows, suffix, head_positions=head_positions)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    cross = 2 * 2 * rows * suffix * prompt * config.num_attention_heads * head_dim * config.num_hidden_layers
    return {"forward": pre["forward"] + suf["forward"] + cross,
            "backward": pre["backward"] + suf["backward"] + 2 * cross}


def decode_flops(config: Any, lora_rank: int, lora_targets: list[str], rows: int, prompt: int,
                 new: int) -> float:
    """Matmul FLOPs of generating `new` tokens for `rows` prompts of length `prompt` with a KV cache
    (the prefill's LM head at the last position only)."""
    total = forward_flops(config, lora_rank, lora_targets, rows, prompt, head_positions=1)["forward"]
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    for t in range(new - 1):  # the first new token comes from the prefill's logits
        per = forward_flops(config, lora_rank, lora_targets, rows, 1)["forward"]
        attn_one = 2 * 2 * rows * 1 * 1 * config.num_attention_heads * head_dim * config.num_hidden_layers
        total += per - attn_one + attn_one * (prompt + t + 1)
    return total
