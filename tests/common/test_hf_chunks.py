"""The HF engine's batches stay under a key/value memory budget (`max_batch_kv_bytes`): the chunking rule by
hand, the bytes a token holds, and a tight budget still answering every request."""

from __future__ import annotations

from types import SimpleNamespace

from common.engines.base import Request, SamplingParams
from common.engines.hf import HFEngine, chunks, kv_bytes_per_token


def test_chunks_by_rows_and_by_padded_tokens():
    assert chunks([], 4, 100) == []
    assert chunks([10] * 5, 2, 10**6) == [(0, 2), (2, 4), (4, 5)]  # rows only: the old rule
    # tokens: 3 rows of 30 = 90 <= 100; a 4th row of 40 would pad to 4 x 40 = 160
    assert chunks([30, 30, 30, 40, 40], 8, 100) == [(0, 3), (3, 5)]
    assert chunks([50, 150], 8, 100) == [(0, 1), (1, 2)]  # a row alone over the budget is its own chunk


def test_bytes_a_token_holds():
    smol = SimpleNamespace(num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                           hidden_size=576, head_dim=64)
    assert kv_bytes_per_token(smol, 4) == 2 * 30 * 3 * 64 * 4 == 46080
    no_dim = SimpleNamespace(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=None,
                             hidden_size=64, head_dim=None)
    assert kv_bytes_per_token(no_dim, 2) == 2 * 2 * 4 * 16 * 2


def test_a_budget_that_does_not_bind_changes_nothing_and_a_tight_one_answers_every_row(policy):
    tok = policy.tokenizer
    prompts = [tok.encode(f"Q: {i}+{i * 3}\\nA:" * (1 + i % 3), add_special_tokens=False) for i in range(6)]
    params = SamplingParams(temperature=1.0, max_new_tokens=4)
    wide = HFEngine(policy, kv_reuse=False).generate([Request(p, None) for p in prompts], params, seed=3)
    per_token = kv_bytes_per_token(policy.model.config, 4)
    tight = HFEngine(policy, kv_reuse=False, max_batch_kv_bytes=per_token * 40)
    got = tight.generate([Request(p, None) for p in prompts], params, seed=3)
    assert len(got) == len(prompts) and all(s.action_ids for s in got)
    same = HFEngine(policy, kv_reuse=False, max_batch_kv_bytes=10**12)
    assert [s.action_ids for s in same.generate([Request(p, None) for p in prompts], params, seed=3)] == \
        [s.action_ids for s in wide]
