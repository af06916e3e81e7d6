"""The lean decode path gives HF's logits (with a LoRA adapter merged, and for the reference)."""


import pytest
import torch
from transformers import DynamicCache

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
        want = [model(input_ids=ids, attention_mask=mask, position_ids=pos, past_key_values=cache, use_cache=True).logits[:, -1]]
        mask2 = torch.cat([mask, torch.ones(3, 1, dtype=torch.long)], 1)
        want.append(model(input_ids=new[:, None], attention_mask=mask2, position_ids=pos[:, -1:] + 1, past_key_values=cache,
                          use_cache=True).logits[:, -1])
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
