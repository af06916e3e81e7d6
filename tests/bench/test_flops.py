"""The benchmark's analytic FLOP counts (MFU's numerator) against hand-computed cases."""

from types import SimpleNamespace

from bench.work import forward_flops, shared_prompt_flops

# hidden 4, MLP 6, 2 query heads and 1 KV head of 2 dims, one layer, vocabulary 10; LoRA rank 1 on q only.
# Weights per token: q 4x4 + k 4x2 + v 4x2 + o 4x4 + gate 4x6 + up 4x6 + down 6x4 = 120;
# LoRA on q: 1 x (4 + 4) = 8.
CFG = SimpleNamespace(hidden_size=4, intermediate_size=6, num_attention_heads=2, num_key_value_heads=1,
                      head_dim=2, num_hidden_layers=1, vocab_size=10)


def test_forward_flops_by_hand():
    # 2 rows x 3 tokens: linear 2*6*120 = 1440, LoRA 2*6*8 = 96, head at 2 positions 2*2*2*4*10 = 320,
    # attention 2*2 * 2 rows * 3*3 * 4 (query width) = 288; backward: linear again, LoRA twice, head,
    # attention twice
    assert forward_flops(CFG, 1, ["q_proj"], rows=2, length=3, head_positions=2) == {"forward": 2144.0,
                                                                                     "backward": 2528.0}


def test_shared_prompt_flops_by_hand():
    # one prompt of 2 tokens (no head): linear 2*2*120 = 480, LoRA 32, attention 2*2*1*2*2*4 = 64 -> 576;
    # backward 672
    # 2 rows x 2 suffix tokens: linear 960, LoRA 64, head 320, attention 2*2*2*2*2*4 = 128 -> 1472;
    # backward 1664
    # the suffixes' queries against the prompt's keys: 2*2 * 2 rows * 2 queries * 2 keys * 4 = 128;
    # backward 256
    got = shared_prompt_flops(CFG, 1, ["q_proj"], prompts=1, prompt=2, rows=2, suffix=2, head_positions=2)
    assert got == {"forward": 576.0 + 1472.0 + 128.0, "backward": 672.0 + 1664.0 + 256.0}
    whole = forward_flops(CFG, 1, ["q_proj"], rows=2, length=4, head_positions=2)
    assert got["forward"] < whole["forward"]  # the prompt once instead of twice
