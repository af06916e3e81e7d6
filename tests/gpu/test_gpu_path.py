"""The GPU path's fixes of issue #43 that a CPU can check: the vLLM arguments per scale, bf16 base weights
on CUDA (float32 on CPU), the warm start's device and lock, gradient checkpointing in training mode, the
collectives' timeout on both ways of starting ranks, the collective engine start, vLLM's sleep around the
update, and the LoRA learning-rate rule of the paper scales. What only a GPU shows is
scripts/device_check.py's (not yet run on one)."""

from __future__ import annotations

import copy
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from common.config import EngineConfig, ModelConfig, RunConfig, SFTConfig, TrainerConfig, run_config_errors
from common.device import base_dtype
from common.engines.vllm_args import CPU_KV_CACHE_DEFAULT, llm_kwargs
from common.lora import LORA_LR_FACTOR
from experiments.plan_memory import paper_scales
from experiments.run import compose

ROOT = Path(__file__).resolve().parents[2]
PAPER = [
    (m, s) for m in ("canopy", "ccpo", "grpo", "iapo", "river", "sharp", "skillrise") for s in paper_scales(m)
]

# method/scale -> the paper's full-fine-tuning learning rate (as each scale's comment cites it); kept here,
# not in common/ (the core names no method)
PAPER_FULL_FT_LR = {
    "grpo/paper": 1e-6, "ccpo/paper": 1e-6, "ccpo/paper_v2": 1e-6, "canopy/paper": 3e-6,
    "canopy/paper_swe": 4e-6, "iapo/paper": 1e-6, "river/paper": 1e-6, "sharp/paper": 1e-6,
    "skillrise/paper": 1e-6,
}


# ---- 1 and 5: vLLM sized per scale ----------------------------------------------------------------
@pytest.mark.parametrize("method, scale", PAPER)
def test_paper_scales_size_vllm_for_a_gpu(method, scale):
    cfg = compose(method, (f"scale={scale}",))
    e = cfg.engine
    assert e.name == "vllm" and e.kv_cache_memory_bytes is None and e.max_model_len and e.sleep
    kwargs = llm_kwargs(cfg, "/m", on_cpu=False, adapters=1)
    assert "kv_cache_memory_bytes" not in kwargs  # sized from gpu_memory_utilization on the GPU
    assert kwargs["max_model_len"] == e.max_model_len and kwargs["enable_sleep_mode"] is True
    assert kwargs["gpu_memory_utilization"] == e.gpu_memory_utilization
    assert cfg.trainer.gradient_checkpointing and cfg.trainer.micro_batch_rows > 0
    # 7: the LoRA learning rate by the stated rule
    assert cfg.trainer.lr == pytest.approx(LORA_LR_FACTOR * PAPER_FULL_FT_LR[f"{method}/{scale}"])


def test_cpu_vllm_keeps_its_small_kv_cache_and_never_sleeps():
    cfg = RunConfig(engine=EngineConfig(name="vllm", sleep=True))
    kwargs = llm_kwargs(cfg, "/m", on_cpu=True, adapters=2)
    assert kwargs["kv_cache_memory_bytes"] == CPU_KV_CACHE_DEFAULT and "enable_sleep_mode" not in kwargs
    assert kwargs["max_model_len"] == cfg.model.max_length  # the tiny model
    assert kwargs["max_lora_rank"] == 8 and kwargs["max_loras"] == 2


def test_a_pretrained_model_on_a_gpu_needs_max_model_len():
    cfg = RunConfig(
        model=ModelConfig(kind="pretrained", path="/m"),
        engine=EngineConfig(name="vllm"),
        trainer=TrainerConfig(accelerator="gpu"),
    )
    assert any("engine.max_model_len" in e for e in run_config_errors(cfg))
    cfg.engine.max_model_len = 4096
    assert not any("engine.max_model_len" in e for e in run_config_errors(cfg))


class FakeLLM:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def sleep(self, level: int) -> None:
        self.calls.append(f"sleep{level}")

    def wake_up(self) -> None:
        self.calls.append("wake")

    def reset_prefix_cache(self) -> None:
        self.calls.append("reset")


def _engine(sleep_mode: bool, started: bool = True):
    from common.engines.vllm import VLLMEngine

    engine = VLLMEngine.__new__(VLLMEngine)
    engine.llm = FakeLLM() if started else None
    engine.sleep_mode, engine.sleeping, engine.woken = sleep_mode, False, False
    engine.sync_mode, engine.sync_times = "adapter", []
    engine.policy = SimpleNamespace(adapters=["a", "b"], trainable_adapters=["a"])
    engine.pushed = []
    engine._push_adapter = engine.pushed.append
    engine._fingerprint = lambda: ()
    return engine


def test_sleep_around_the_update_and_every_adapter_served_after_it():
    engine = _engine(sleep_mode=True)
    engine.release()
    engine.release()  # once
    assert engine.llm.calls == ["sleep1"] and engine.sleeping
    engine.sync()
    assert engine.llm.calls == ["sleep1", "wake", "reset"] and engine.pushed == ["a", "b"]
    engine.sync()  # awake: the trainable adapter only
    assert engine.pushed == ["a", "b", "a"]
    cpu = _engine(sleep_mode=False)
    cpu.release()
    assert cpu.llm.calls == [] and not cpu.sleeping


def test_engine_start_is_collective():
    """Every rank starts its engine in on_train_start (`ready`), not at a first generate that may not come."""
    engine = _engine(sleep_mode=False, started=False)
    starts: list[int] = []
    engine._start = lambda: starts.append(1)
    assert engine.generate([], None, 0) == [] and starts == []  # no request: no start (the old deadlock)
    engine.ready()
    assert starts == [1]
    from common.trainer import RLModule

    calls: list[str] = []
    module = SimpleNamespace(
        engine=SimpleNamespace(ready=lambda: calls.append("ready")),
        cfg=RunConfig(),
        next_step=1,
        evals={"initial": {}},
        run_dir=SimpleNamespace(truncate_metrics=lambda n: calls.append(f"t{n}")),
    )
    RLModule.on_train_start(module)
    assert calls == ["ready", "t1"]


# ---- 3: bf16 base weights on CUDA, float32 on CPU; the warm start on the run's device, without a lock ----
def test_base_dtype_per_device(monkeypatch):
    assert base_dtype("cpu", "bf16") == torch.float32
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert base_dtype("gpu", "bf16") == torch.bfloat16 and base_dtype("gpu", "32") == torch.float32
    assert base_dtype("cpu", "bf16") == torch.float32


@pytest.fixture()
def saved_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    from common.models import train_tokenizer

    tok = train_tokenizer(["1 + 2 = 3", "4 + 5 = 9"] * 20, 300)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    LlamaForCausalLM(cfg).save_pretrained(tmp_path / "llama")
    tok.save_pretrained(tmp_path / "llama")
    return tmp_path / "llama"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pretrained_loads_in_the_runs_dtype_without_the_lock(saved_llama, tmp_path, monkeypatch, dtype):
    import common.warmstart as warmstart
    from envs.testbeds.arith import ArithConfig, ArithEnv

    def no_lock(*args, **kwargs):
        raise AssertionError("a pretrained model without SFT writes nothing: no lock")

    monkeypatch.setattr(warmstart, "FileLock", no_lock)
    model_cfg = ModelConfig(kind="pretrained", path=str(saved_llama))
    _, base, info = warmstart.warm_started_base(
        model_cfg, SFTConfig(enabled=False), ArithEnv(ArithConfig()), 0, str(tmp_path / "work"), dtype=dtype
    )
    assert {p.dtype for p in base.parameters()} == {dtype} and info["key"]


def test_fit_passes_the_runs_dtype_and_device(monkeypatch):
    import common.fit as fit
    import common.warmstart as warmstart

    seen = {}
    monkeypatch.setattr(warmstart, "warm_started_base", lambda *a, **k: seen.update(k))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "3")
    cfg = RunConfig(trainer=TrainerConfig(accelerator="gpu", precision="bf16"))
    fit._warm_start(SimpleNamespace(env=None), cfg)
    assert seen["dtype"] == torch.bfloat16 and seen["device"] == torch.device("cuda", 3)


# ---- 4: gradient checkpointing on in training mode, same gradients --------------------------------
def test_checkpointing_recomputes_and_gives_the_same_gradients(saved_llama):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from common.policy import Policy

    tok = AutoTokenizer.from_pretrained(saved_llama)
    cfg = ModelConfig(
        kind="pretrained", path=str(saved_llama), lora_targets=["q_proj", "v_proj", "down_proj"]
    )
    ids = torch.randint(3, len(tok), (2, 24), generator=torch.Generator().manual_seed(0))
    grads, calls = [], []
    for checkpointing in (False, True):
        torch.manual_seed(0)
        policy = Policy(
            AutoModelForCausalLM.from_pretrained(saved_llama), tok, copy.deepcopy(cfg), ("agent",)
        )
        with torch.no_grad():
            for p in policy.trainable_parameters():
                p.add_(0.1 * torch.randn_like(p))
        if checkpointing:
            policy.enable_gradient_checkpointing()
            assert len(policy.checkpointed_layers()) == 2 and not policy.model.training
        layer = policy.model.get_base_model().model.layers[0].mlp
        count = [0]
        # a pre-hook: the recompute stops right after the last tensor the backward needs (torch early stop)
        layer.register_forward_pre_hook(lambda *a, c=count: c.__setitem__(0, c[0] + 1))
        with policy.training_forward(), policy.use("policy") as model:
            model(input_ids=ids).logits.float().logsumexp(-1).mean().backward()
        assert all(not m.training for m in policy.checkpointed_layers())  # eval() again after
        grads.append([p.grad.clone() for p in policy.trainable_parameters()])
        calls.append(count[0])
    assert calls == [1, 2]  # the checkpointed layer ran again in the backward
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


# ---- 6: the collectives' timeout on both ways of starting ranks ---------------------------------------
def test_dist_timeout_reaches_both_launch_paths(monkeypatch):
    import torch.distributed as dist

    import common.fit as fit

    cfg = RunConfig(trainer=TrainerConfig(devices=2, dist_timeout_s=1234))
    assert fit._strategy(cfg)._timeout == timedelta(seconds=1234)  # Lightning's launcher: DDPStrategy
    seen = {}
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: seen.update(k))
    monkeypatch.setattr(
        fit,
        "_plugins",
        lambda c: [
            SimpleNamespace(
                validate_settings=lambda **k: None,
                main_address="127.0.0.1",
                main_port=29500,
                local_rank=lambda: 0,
                global_rank=lambda: 0,
                world_size=lambda: 2,
            )
        ],
    )
    monkeypatch.setenv("MASTER_ADDR", "x")  # restored by monkeypatch after the test
    monkeypatch.setenv("MASTER_PORT", "1")
    fit._start_process_group(cfg)  # srun's path
    assert seen["timeout"] == timedelta(seconds=1234)
    assert TrainerConfig().dist_timeout_s == 3600
