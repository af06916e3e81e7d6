"""The SFT warm start runs at any step count (OneCycleLR needs a warm-up step and an annealing phase), and
packing a multi-turn context into one row (`sft.pack`) trains the same tokens on the same prefixes."""

import copy

import pytest

from common.config import SFTConfig
from common.warmstart import demonstrations, sft


@pytest.mark.parametrize("steps", [1, 3, 10, 20])
def test_sft_runs_at_small_step_counts(tiny_parts, steps):
    env, _, tok, base = tiny_parts
    pairs = demonstrations(env, tok, n_tasks=8, seed=0)
    losses = sft(copy.deepcopy(base), pairs, SFTConfig(steps=steps, batch_size=4), seed=0,
                 pad_id=tok.pad_token_id)
    assert len(losses) == steps and all(loss == loss for loss in losses)


def test_packed_rows_by_hand():
    from common.warmstart import packed_rows

    pairs = [([1, 2], [3]), ([1, 2, 3, 4], [5]), ([9], [8]), ([1, 2, 3, 4, 5, 6], [7]), ([9, 8, 4], [2, 2])]
    assert packed_rows(pairs) == [([1, 2, 3, 4, 5, 6, 7], [-100, -100, 3, -100, 5, -100, 7]),
                                  ([9, 8, 4, 2, 2], [-100, 8, -100, 2, 2])]
    # not a continuation
    assert packed_rows([([1], [2]), ([1], [3])]) == [([1, 2], [-100, 2]), ([1, 3], [-100, 3])]


def test_packing_changes_nothing_for_one_turn_contexts(tiny_parts):
    env, _, tok, base = tiny_parts
    pairs = demonstrations(env, tok, n_tasks=8, seed=0)  # arith: one turn per context
    plain = sft(copy.deepcopy(base), pairs, SFTConfig(steps=3, batch_size=4), seed=0, pad_id=tok.pad_token_id)
    packed = sft(copy.deepcopy(base), pairs, SFTConfig(steps=3, batch_size=4, pack=True), seed=0,
                 pad_id=tok.pad_token_id)
    assert packed == plain


def test_a_packed_context_costs_the_token_weighted_mean_of_its_turns(tiny_parts):
    """A causal model sees the same prefix at every action token whether the turn is its own row or part of
    the whole context's row, so the packed row's loss is the per-turn losses weighted by action length."""
    _, _, tok, base = tiny_parts
    ctx1, act1 = [5, 6, 7, 8], [9, 10]
    ctx2, act2 = ctx1 + act1 + [11, 12, 13], [14, 15, 16]
    pairs = [(ctx1, act1), (ctx2, act2)]
    cfg = SFTConfig(steps=1, batch_size=1, lr=1e-9)
    per_turn = [sft(copy.deepcopy(base), [p], cfg, seed=0, pad_id=tok.pad_token_id)[0] for p in pairs]
    packed = sft(copy.deepcopy(base), pairs, SFTConfig(steps=1, batch_size=1, lr=1e-9, pack=True), seed=0,
                 pad_id=tok.pad_token_id)[0]
    assert packed == pytest.approx((2 * per_turn[0] + 3 * per_turn[1]) / 5, rel=1e-5)


def test_a_model_loaded_from_gguf_is_saved_as_a_plain_copy(tiny_parts, tmp_path):
    """transformers refuses to save a model whose config keeps GGUF's quantization marker (the warm start of
    SmolLM2 failed at its save after 45 minutes of SFT): `savable` gives the same weights in a plain model."""
    import torch

    from common.models import savable

    _, _, _, base = tiny_parts
    assert savable(base) is base  # nothing to strip
    marked = copy.deepcopy(base)
    marked.config.quantization_config = {"quant_method": "gguf"}
    plain = savable(marked)
    assert plain is not marked and getattr(plain.config, "quantization_config", None) is None
    assert marked.config.quantization_config == {"quant_method": "gguf"}  # the original is left alone
    for (name, a), (_, b) in zip(marked.state_dict().items(), plain.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    plain.save_pretrained(tmp_path)
    assert (tmp_path / "config.json").exists()


def test_micro_batches_give_the_whole_batch_step(tiny_parts):
    """sft.micro_batch_rows splits a batch's forward/backward (the SmolLM2 warm start held 22 GB in one) into
    chunks with the same mean over the batch's labelled tokens: the same losses and weights, to rounding."""
    import torch

    env, _, tok, base = tiny_parts
    pairs = demonstrations(env, tok, n_tasks=8, seed=0)
    whole, parts = copy.deepcopy(base), copy.deepcopy(base)
    a = sft(whole, pairs, SFTConfig(steps=3, batch_size=5), seed=0, pad_id=tok.pad_token_id)
    b = sft(parts, pairs, SFTConfig(steps=3, batch_size=5, micro_batch_rows=2), seed=0,
            pad_id=tok.pad_token_id)
    assert b == pytest.approx(a, rel=1e-5)
    for (name, x), (_, y) in zip(whole.state_dict().items(), parts.state_dict().items(), strict=True):
        assert torch.allclose(x, y, atol=1e-5), name


def test_copy_sequences_by_hand(tiny_parts):
    from common.warmstart import copy_sequences

    _, _, tok, _ = tiny_parts
    pairs = copy_sequences(tok, 200, seed=3)
    newline = tok.encode("\n", add_special_tokens=False)
    assert len(pairs) == 200 and pairs == copy_sequences(tok, 200, seed=3) != copy_sequences(tok, 200, seed=4)
    for ctx, target in pairs:
        assert ctx == target + newline and 4 <= len(target) <= 16
        assert not {tok.pad_token_id, tok.eos_token_id} & set(target)
    assert len({t for _, x in pairs for t in x}) > len(tok) // 2  # drawn from the whole vocabulary


def test_the_copy_pre_warm_start_trains_and_keys_its_cache(tiny_parts, tmp_path):
    """copy_steps = 0 leaves the cache key as it was before the setting existed (copy_lr is then unused);
    copy_steps > 0 is another warm start, trained on copies before the demonstrations (losses recorded)."""
    from dataclasses import asdict

    from common.config import ModelConfig
    from common.warmstart import fingerprint, warm_start_code, warm_start_key, warm_started_base

    env, _, _, _ = tiny_parts
    model = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                        head_dim=16, vocab_size=300, max_length=64)
    plain = SFTConfig(steps=4, batch_size=4, demos=8)
    before = {k: v for k, v in asdict(plain).items() if k not in ("copy_steps", "copy_lr")}
    assert warm_start_key(model, plain, env, 0)[0] == fingerprint(
        model.__dict__ | {"roles": None, "frozen_adapters": None}, before, env.cfg, 0, type(env).__name__,
        warm_start_code(env))
    assert warm_start_key(model, SFTConfig(steps=4, batch_size=4, demos=8, copy_lr=0.5), env, 0)[0] == \
        warm_start_key(model, plain, env, 0)[0]
    copying = SFTConfig(steps=4, batch_size=4, demos=8, copy_steps=60, copy_lr=3e-3)
    assert warm_start_key(model, copying, env, 0)[0] != warm_start_key(model, plain, env, 0)[0]
    _, _, info = warm_started_base(model, copying, env, 0, str(tmp_path))
    assert info["copy_loss_last"] < info["copy_loss_first"]  # it trained on the copies
    _, _, info = warm_started_base(model, plain, env, 0, str(tmp_path))
    assert "copy_loss_last" not in info


def test_a_bad_copy_setting_fails_before_anything_runs():
    from common.config import RunConfig, run_config_errors

    cfg = RunConfig()
    cfg.sft.copy_steps = -1
    assert any("sft.copy_steps" in e for e in run_config_errors(cfg))
    cfg.sft.copy_steps, cfg.sft.copy_lr = 10, 0.0
    assert any("sft.copy_lr" in e for e in run_config_errors(cfg))
