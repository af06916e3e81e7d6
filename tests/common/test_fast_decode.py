"""The lean decode path gives HF's logits (with a LoRA adapter merged, and for the reference)."""


import pytest
import torch
from transformers import DynamicCache

from common.engines import fast as fast_module
from common.engines import hf as hf_module
from common.engines.base import Request, SamplingParams
from common.engines.fast import FastDecoder
from common.engines.hf import HFEngine


@pytest.mark.parametrize("adapter", ["policy", None])
def test_fast_decoder_logits_equal_hf(policy, adapter):
    tok = policy.tokenizer
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("Q: 3+4\nA:", "Q: 12-5*2+7\nA:", "Q: 9\nA:")]
    width = max(map(len, prompts))
    ids = torch.full((3, width), tok.pad_token_id)
    mask = torch.zeros((3, width), dtype=torch.long)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):], mask[r, width - len(p):] = torch.tensor(p), 1
    pos = (mask.cumsum(-1) - 1).clamp(min=0)
    new = torch.tensor([5, 7, 11])
    with torch.inference_mode(), policy.use(adapter) as model:
        assert FastDecoder.supports(model)
        fast = FastDecoder(model, adapter, 3, width + 2)
        got = [fast.prefill(ids, mask, pos), fast.step(new, pos[:, -1] + 1)]
        cache = DynamicCache()
        want = [model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache,
                      use_cache=True).logits[:, -1]]
        mask2 = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1)
        want.append(model(input_ids=new[:, None], attention_mask=mask2, position_ids=pos[:, -1:] + 1,
                          past_key_values=cache, use_cache=True).logits[:, -1])
    for g, w in zip(got, want, strict=True):
        assert torch.allclose(g, w, atol=1e-5), (g - w).abs().max()


def test_fast_and_hf_paths_sample_alike(policy):
    tok = policy.tokenizer
    reqs = [Request(tok.encode(f"Q: {i}+{i}\nA:", add_special_tokens=False), "policy") for i in range(6)]
    params = SamplingParams(temperature=1.0, max_new_tokens=10, stop=("\n",))
    fast = HFEngine(policy, fast=True).generate(reqs, params, seed=5)
    slow = HFEngine(policy, fast=False).generate(reqs, params, seed=5)
    for a, b in zip(fast, slow, strict=True):
        assert a.action_ids == b.action_ids  # same uniforms, logits equal to rounding
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5


@pytest.mark.parametrize("fast", [True, False])
def test_a_shared_prompt_is_prefilled_once_and_samples_as_if_prefilled_per_row(policy, fast, monkeypatch):
    """A GRPO group sends one prompt several times: its KV cache is computed once and copied."""
    tok = policy.tokenizer
    prompts = [tok.encode(t, add_special_tokens=False) for t in ("Q: 3+4\nA:", "Q: 12-5*2+7\nA:", "Q: 9\nA:")]
    reqs = [Request(prompts[i], "policy") for i in (0, 1, 0, 2, 1, 0, 0)]
    params = SamplingParams(temperature=1.0, max_new_tokens=8, stop=("\n",))
    prefilled: list[int] = []
    decoder = FastDecoder if fast else hf_module._HFDecoder
    real = decoder.prefill
    monkeypatch.setattr(decoder, "prefill",
                        lambda self, ids, *a: prefilled.append(ids.size(0)) or real(self, ids, *a))
    shared = HFEngine(policy, fast=fast).generate(reqs, params, seed=3)
    assert prefilled == [3]  # three distinct prompts, seven rows
    per_row = HFEngine(policy, fast=fast, share_prefill=False).generate(reqs, params, seed=3)
    assert prefilled == [3, 7]
    for a, b in zip(shared, per_row, strict=True):
        assert a.action_ids == b.action_ids  # same uniforms, logits equal to rounding
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
    assert len({tuple(s.action_ids) for s in shared}) > 3  # rows of one prompt still sample apart


def test_fast_decoder_under_bf16_autocast_casts_once_what_autocast_casts_every_call(policy, monkeypatch):
    """Weights and KV buffers held in bf16 give bit for bit the logits of float32 ones cast per call."""
    tok = policy.tokenizer
    ids = torch.tensor([tok.encode("Q: 12-5*2+7\nA:", add_special_tokens=False)] * 2)
    mask, pos = torch.ones_like(ids), torch.arange(ids.size(1)).expand(2, -1)

    def run():
        with (torch.inference_mode(), policy.use("policy") as model,
              torch.autocast("cpu", dtype=torch.bfloat16)):
            dec = FastDecoder(model, "policy", 2, ids.size(1) + 1)
            return dec, [dec.prefill(ids, mask, pos), dec.step(torch.tensor([5, 7]), pos[:, -1] + 1)]

    dec, once = run()
    assert dec.layers[0].qkv.weight.dtype == torch.bfloat16 and dec.k_cache[0].dtype == torch.bfloat16
    monkeypatch.setattr(fast_module, "autocast_dtype", lambda: None)  # as before: float32, autocast casts
    dec, per_call = run()
    assert dec.layers[0].qkv.weight.dtype == torch.float32
    for a, b in zip(once, per_call, strict=True):
        assert torch.equal(a, b)


def test_select_gathers_rows_into_reused_buffers(policy):
    """select keeps rows in order (a repeated one copied, dropped ones gone), as indexing would,
    and gathers into spare buffers: the old caches become the next call's spares."""
    tok = policy.tokenizer
    ids = torch.tensor([tok.encode(t, add_special_tokens=False)[:4]
                        for t in ("Q: 3+4\nA:", "Q: 12-5*2+7\nA:")])
    mask, pos = torch.ones_like(ids), torch.arange(4).expand(2, -1)
    with torch.inference_mode(), policy.use("policy") as model:
        dec = FastDecoder(model, "policy", 2, 8)
        dec.prefill(ids, mask, pos)
        before = [c.clone() for c in dec.k_cache + dec.v_cache]
        first = [c.data_ptr() for c in dec.k_cache + dec.v_cache]
        dec.select(torch.tensor([1, 0, 1]))  # more rows than allocated: new spares, then reused
        for c, b in zip(dec.k_cache + dec.v_cache, before, strict=True):
            assert torch.equal(c, b[[1, 0, 1]])
        grown = [c.data_ptr() for c in dec.k_cache + dec.v_cache]
        mid = [c.clone() for c in dec.k_cache + dec.v_cache]
        dec.select(torch.tensor([2, 0]))
        assert [c.data_ptr() for c in dec.k_cache + dec.v_cache] != grown
        for c, b in zip(dec.k_cache + dec.v_cache, mid, strict=True):
            assert torch.equal(c, b[[2, 0]])
        dec.select(torch.tensor([1]))  # back into the buffers of the 3-row caches
        assert [c.data_ptr() for c in dec.k_cache + dec.v_cache] == grown
        assert not set(first) & set(grown) and dec.keys_B_L.shape == (1, 8)
        assert torch.isfinite(dec.step(torch.tensor([5]), torch.tensor([4]))).all()
