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
