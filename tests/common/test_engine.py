"""The HF engine: batched sampling, stop strings, and logprobs that training recomputes exactly."""


import pytest
import torch

from common.batch import build_rows, score_rows
from common.engines.base import Request, SamplingParams
from common.engines.hf import HFEngine
from common.rollout import Rollout


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_sampled_logprobs_equal_recomputed(policy, tiny_parts, temperature):
    env = tiny_parts[0]
    engine = HFEngine(policy, max_batch=7)  # odd batch: several chunks, ragged prompts
    params = SamplingParams(temperature=temperature, max_new_tokens=12, stop=("\n",))
    rollout = Rollout(env, engine, policy.tokenizer, policy.role_adapter, policy.trainable_adapters, params,
                      512, seed=3)
    tasks = [env.task_set()["train"][i] for i in range(6)]
    groups = rollout.play_groups(tasks, [3] * 6, step=0)
    rows = build_rows([e for g in groups for e in g.episodes], None)
    assert len(rows) == 18
    with torch.no_grad(), policy.use("policy") as model:
        scored = score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=False,
                            temperature=temperature)
    for b, row in enumerate(rows):
        sampled = torch.tensor(row.behaviour_logprobs())
        recomputed = scored.logp_B_T[b, : len(sampled)]
        assert torch.allclose(sampled, recomputed, atol=1e-4), (sampled - recomputed).abs().max()


def test_same_seed_same_samples_and_stop_strings(policy):
    engine = HFEngine(policy)
    tok = policy.tokenizer
    reqs = [Request(tok.encode("Q: 3+4\nA:", add_special_tokens=False), "policy") for _ in range(5)]
    params = SamplingParams(temperature=1.0, max_new_tokens=16, stop=("\n",))
    a = engine.generate(reqs, params, seed=11)
    b = engine.generate(reqs, params, seed=11)
    assert [s.action_ids for s in a] == [s.action_ids for s in b]
    for s in a:
        assert len(s.action_ids) == len(s.logprobs) <= 16
        assert "\n" not in s.text
        if s.stopped:
            assert "\n" in tok.decode(s.action_ids) or s.action_ids[-1] == tok.eos_token_id


def test_reference_differs_from_adapter_and_greedy_is_deterministic(policy):
    engine = HFEngine(policy)
    tok = policy.tokenizer
    prompt = tok.encode("Q: 5*2-1\nA:", add_special_tokens=False)
    params = SamplingParams(temperature=0.0, max_new_tokens=8)
    with_adapter = engine.generate([Request(prompt, "policy")], params, seed=0)[0]
    reference = engine.generate([Request(prompt, None)], params, seed=0)[0]
    assert with_adapter.logprobs != reference.logprobs  # adapters disabled really is another policy
    assert (engine.generate([Request(prompt, "policy")], params, seed=99)[0].action_ids
            == with_adapter.action_ids)
