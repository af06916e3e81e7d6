"""The memory plan's formulas (experiments/plan_memory.py) on hand-computed cases, and its activation
model against what torch actually saves for the backward on small random models (CPU, bf16)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from experiments.plan_memory import (
    SHAPES,
    Shape,
    activation_bytes,
    kv_bytes_per_token,
    layer_bytes_per_token,
    lora_param_count,
    param_count,
    plan,
    shape_from_config,
)

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def test_llama3_8b_parameters_by_hand():
    # embeddings and LM head: 128256 x 4096 = 525,336,576 each; a layer: q 4096^2 = 16,777,216,
    # k and v 4096 x 1024 = 4,194,304 each, o 16,777,216, MLP 3 x 4096 x 14336 = 176,160,768, two norms
    # 8,192: 218,112,000; 32 layers 6,979,584,000; the final norm 4,096. Meta's published count: 8.03B.
    assert param_count(SHAPES["meta-llama/Meta-Llama-3-8B"]) == 2 * 525_336_576 + 32 * 218_112_000 + 4_096
    assert param_count(SHAPES["meta-llama/Meta-Llama-3-8B"]) == 8_030_261_248


def test_qwen3_8b_parameters_by_hand():
    # 151936 x 4096 = 622,329,856 twice (untied); a layer: 16,777,216 + 2 x 4,194,304 + 16,777,216 +
    # 150,994,944 (MLP, I = 12288) + 8,192 (norms) + 256 (q/k norms) = 192,946,432; Qwen's card: 8.2B
    assert param_count(SHAPES["Qwen/Qwen3-8B"]) == 2 * 622_329_856 + 36 * 192_946_432 + 4_096


def test_tied_and_biased_models():
    s = Shape(vocab=10, hidden=4, layers=1, heads=2, kv_heads=1, head_dim=2, intermediate=8)
    # attention 4x4 + 4x2 + 4x2 + 4x4 = 48, MLP 3 x 4 x 8 = 96, norms 8: 152; embeddings 40 x 2; final norm 4
    assert param_count(s) == 80 + 152 + 4
    assert param_count(Shape(**{**s.__dict__, "tied": True})) == 40 + 152 + 4
    assert param_count(Shape(**{**s.__dict__, "qkv_bias": True})) == 236 + 8  # q 4 + k 2 + v 2


def test_lora_and_kv_by_hand():
    s = SHAPES["Qwen/Qwen3-8B"]
    # r = 16: q 16 x (4096 + 4096), k and v 16 x (4096 + 1024), o as q, gate/up/down 16 x (4096 + 12288)
    per_layer = 16 * (8192 + 5120 + 5120 + 8192 + 3 * 16384)
    assert lora_param_count(s, 16, TARGETS) == 36 * per_layer == 43_646_976
    assert lora_param_count(s, 16, ["q_proj"]) == 36 * 16 * 8192
    # 2 (k, v) x 36 layers x 8 heads x 128 x 2 bytes = 147,456 bytes: 40960 tokens are 5.625 GiB (the issue)
    assert kv_bytes_per_token(s) == 147_456 and kv_bytes_per_token(s) * 40960 == 5.625 * (1 << 30)


def test_checkpointing_keeps_a_layer_input_per_layer():
    s = Shape(vocab=100, hidden=8, layers=3, heads=2, kv_heads=1, head_dim=4, intermediate=16)
    layer = layer_bytes_per_token(s, 2)
    assert layer == 18 * 8 + 8 * 16 + 6 * 8 + 4 * 4 + 14 * 2
    assert activation_bytes(s, 10, 5, 2, False) == 3 * layer * 10 + 16 * 100 * 5
    assert activation_bytes(s, 10, 5, 2, True) == 3 * 2 * 8 * 10 + layer * 10 + 16 * 100 * 5


def test_shape_from_a_config_json():
    config = {
        "model_type": "qwen3",
        "vocab_size": 151936,
        "hidden_size": 4096,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "tie_word_embeddings": False,
        "max_position_embeddings": 40960,
    }
    assert shape_from_config(config) == SHAPES["Qwen/Qwen3-8B"]
    assert shape_from_config({"model_type": "qwen3_5"}) is None


def _saved_per_token_layer(kind: str, shape: dict, rank: int) -> float:
    """Bytes one extra decoder layer saves for the backward per extra token, measured with hooks."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    def saved(layers: int, tokens: int) -> int:
        kw = dict(vocab_size=128, num_hidden_layers=layers, attn_implementation="sdpa", **shape)
        torch.manual_seed(0)
        model = (
            Qwen3ForCausalLM(Qwen3Config(**kw)) if kind == "qwen3" else LlamaForCausalLM(LlamaConfig(**kw))
        ).to(torch.bfloat16)
        model.requires_grad_(False)
        model = get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGETS))
        seen: dict[tuple[int, int], int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            storage = t.untyped_storage()
            seen[(storage.data_ptr(), storage.nbytes())] = storage.nbytes()
            return t

        with (
            torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t),
            torch.autocast("cpu", torch.bfloat16),
        ):
            model(input_ids=torch.randint(0, 128, (1, tokens)), logits_to_keep=1)
        return sum(seen.values())

    return ((saved(3, 256) - saved(1, 256)) - (saved(3, 64) - saved(1, 64))) / 2 / 192


@pytest.mark.parametrize("kind", ["llama", "qwen3"])
def test_layer_bytes_match_what_torch_saves(kind):
    shape = dict(
        hidden_size=192,
        intermediate_size=512,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=32,
        tie_word_embeddings=False,
    )
    measured = _saved_per_token_layer(kind, shape, rank=8)
    s = Shape(
        vocab=128,
        hidden=192,
        layers=1,
        heads=6,
        kv_heads=2,
        head_dim=32,
        intermediate=512,
        qk_norm=kind == "qwen3",
    )
    assert layer_bytes_per_token(s, 8) == pytest.approx(measured, rel=0.05)


def _cfg(**trainer: object) -> SimpleNamespace:
    t = dict(
        steps=10,
        tasks_per_step=16,
        group_size=64,
        devices=8,
        num_nodes=1,
        minibatches=1,
        micro_batch_rows=8,
        gradient_checkpointing=True,
    )
    t.update(trainer)
    return SimpleNamespace(
        method={"name": "grpo"},
        scale="paper",
        trainer=SimpleNamespace(**t),
        model=SimpleNamespace(
            path=None,
            hf_id="deepseek-ai/deepseek-math-7b-instruct",
            roles={},
            default_adapter="policy",
            lora_rank=16,
            lora_targets=TARGETS,
        ),
        engine=SimpleNamespace(name="vllm", max_model_len=2048, gpu_memory_utilization=0.7, sleep=True),
    )


def test_plan_fits_and_refuses_naming_the_knob():
    assert plan(_cfg(), 80).fits
    whole = plan(_cfg(micro_batch_rows=0), 80)  # 128 rows of 2048 tokens at once
    assert not whole.fits and whole.knob.startswith("trainer.micro_batch_rows=")
    awake = _cfg()
    awake.engine.sleep = False
    awake.trainer.micro_batch_rows = 1
    awake.engine.gpu_memory_utilization = 0.75
    assert plan(awake, 80).knob.startswith("engine.sleep=true")
    greedy = _cfg()
    greedy.engine.gpu_memory_utilization = 0.95
    assert plan(greedy, 80).knob.startswith("engine.gpu_memory_utilization (down)")
    assert "not planned" in plan(_cfg(steps=0), 80).text()


def test_readme_table_is_the_plan():
    """README's "what each paper scale needs" rows say what the plan computes (peaks at 80 GB, fits)."""
    from pathlib import Path

    from experiments.run import compose

    rows = [
        line.split(" | ")
        for line in (Path(__file__).resolve().parents[2] / "README.md").read_text().splitlines()
        if line.startswith("| ") and " x 80 GB" not in line and line.endswith(("| yes |", "| no |"))
    ]
    assert len(rows) == 8
    for row in rows:
        method, scale = row[0].lstrip("| ").split()
        cfg = compose(method, (f"scale={scale}",))
        at80, at141 = plan(cfg, 80), plan(cfg, 141)
        peak = next(line for line in at80.lines if "peak:" in line).split("peak: ")[1].split(" of ")[0]
        assert row[5] == peak and row[6] == ("yes" if at80.fits else "no"), row
        assert row[7].rstrip(" |") == ("yes" if at141.fits else "no"), row
