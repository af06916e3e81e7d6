"""`engine.sync=merged` (#45): a one-adapter policy's LoRA merged into the base weights, served by vLLM
with its LoRA path off. The merge itself is checked against peft's own (without vLLM); the engine, for
real on the CPU build: the served log-probabilities are the adapter's, they follow every optimizer step
through the sync (and would not without it), and what it cannot serve is refused with a clear error.
"""

import copy
import re

import pytest
import torch

from common.config import EngineConfig, RunConfig
from common.engines.base import Request, SamplingParams
from common.engines.vllm_weights import base_state_dict, merged_state_dict
from tests.common.test_vllm_engine import make_engine, make_policy, max_diff, needs_vllm, prompts


def test_merged_weights_are_peft_merge_and_unload(tiny_parts):
    policy = make_policy(tiny_parts, seed=2)
    (adapter,) = policy.adapters
    merged = merged_state_dict(policy, adapter)
    base = base_state_dict(policy)
    reference = copy.deepcopy(policy.model).merge_and_unload(adapter_names=[adapter]).state_dict()
    assert set(merged) == set(base) and set(merged) <= set(reference)
    changed = [k for k in merged if not torch.equal(merged[k], base[k])]
    assert changed and all("proj" in k for k in changed)  # the wrapped projections, nothing else
    for key, tensor in merged.items():
        assert torch.allclose(tensor, reference[key], atol=1e-6), key
    # the policy's own weights are untouched: the adapter stays unmerged for training
    assert all(torch.equal(v, base_state_dict(policy)[k]) for k, v in base.items())
    with pytest.raises(KeyError, match="unknown adapter 'nope'"):
        merged_state_dict(policy, "nope")


def test_merged_sync_is_a_known_setting():
    from common.config import check_run_config

    check_run_config(RunConfig(engine=EngineConfig(name="vllm", kv_cache_memory_bytes=1 << 26,
                                                   sync="merged")))
    with pytest.raises(ValueError, match=re.escape("engine.sync must be auto | adapter | full | merged")):
        check_run_config(RunConfig(engine=EngineConfig(name="vllm", sync="merge")))


@pytest.mark.vllm
@needs_vllm
def test_merged_engine_serves_the_adapter_and_follows_each_step(tiny_parts):
    policy = make_policy(tiny_parts, seed=3)
    (adapter,) = policy.adapters
    engine = make_engine(policy)  # auto: merged, the policy has one adapter
    try:
        assert engine.sync_mode == "merged" and engine.merged == adapter and not engine.split_base
        assert engine.llm.llm_engine.vllm_config.lora_config is None  # vLLM's LoRA path is off
        reqs = [Request(p, adapter) for p in prompts(policy.tokenizer, 6)]
        params = SamplingParams(temperature=1.0, max_new_tokens=8)
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=0)) < 1e-4
        # one optimizer step on the adapter: stale without the sync, the adapter's again after it
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.5)
        with policy.use(adapter) as model:
            model(input_ids=torch.tensor([reqs[0].prompt_ids])).logits.logsumexp(-1).sum().backward()
        opt.step()
        engine.check_stale = False
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=1)) > 1e-3
        engine.sync()
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=1)) < 1e-4
        engine.check_stale = True  # weights moved behind its back: the next generate syncs first
        with torch.no_grad():
            next(p for n, p in policy.model.named_parameters() if "lora_B" in n).add_(0.05)
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=2)) < 1e-4 and engine.late_syncs == 1
        with pytest.raises(ValueError, match="serves only adapter .* a request for the base model"):
            engine.generate([Request(reqs[0].prompt_ids, None)], params, seed=0)
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
def test_merged_needs_a_policy_of_one_adapter_and_auto_picks_it_only_then(tiny_parts):
    policy = make_policy(tiny_parts, roles={"thinker": "alpha", "solver": "beta"})
    with pytest.raises(ValueError, match=r"serves one adapter merged into the base; the policy has 2"):
        make_engine(policy, sync="merged")
    engine = make_engine(policy)  # auto: each adapter served as LoRA
    try:
        assert engine.sync_mode == "adapter" and engine.merged is None
    finally:
        engine.close()
