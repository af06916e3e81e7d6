"""The trainer's lean scoring forward gives HF/peft's log-probabilities and LoRA gradients."""

import copy

import pytest
import torch

from common.batch import Row, SharedLayout, Span, build_rows, score_rows
from common.engines import fast as fast_module
from common.engines.fast import FastScorer
from common.episode import Episode, Turn
from common.policy import Policy


def _episode(tok, task, sample, q, a, second_turn=False):
    """One episode answering `q` with `a`; with `second_turn` the same context continues after an
    observation (the row then holds two spans)."""
    p, act = tok.encode(q, add_special_tokens=False), tok.encode(a, add_special_tokens=False)
    ep = Episode(task, sample, turns=[Turn("solver", "policy", p, act, [-0.5] * len(act), a)])
    if second_turn:
        obs = tok.encode("\nok\n", add_special_tokens=False)
        more = tok.encode(" done", add_special_tokens=False)
        ep.turns.append(Turn("solver", "policy", p + act + obs, more, [-0.5] * len(more), " done"))
    return ep


def _rows(tok):
    """Rows of different lengths (left padding differs), one with two turns in one context."""
    pairs = [("Q: 3+4\nA:", " 7"), ("Q: 12-5*2+7\nA:", " 12-10=2 2+7=9 #9"), ("Q: 9\nA:", " 9 #9")]
    return build_rows([_episode(tok, f"t{i}", 0, q, a, second_turn=i == 1) for i, (q, a) in enumerate(pairs)],
                      None)


def _score(policy, adapter, fast, autocast=False):
    rows = _rows(policy.tokenizer)
    for prm in policy.trainable_parameters():
        prm.grad = None
    with policy.use(adapter) as model, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        assert FastScorer.supports(model)
        s = score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=True, temperature=0.7,
                       fast=fast)
    # weights every position differently
    loss = (s.logp_B_T * torch.arange(1.0, s.logp_B_T.size(1) + 1)).sum()
    if adapter is not None:
        loss.backward()
    grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p)
             for p in policy.trainable_parameters()]
    return s, grads


@pytest.mark.parametrize("adapter", ["policy", None])
def test_fast_scorer_matches_hf_logprobs_and_gradients(policy, adapter):
    fast, g_fast = _score(policy, adapter, fast=True)
    slow, g_slow = _score(policy, adapter, fast=False)
    assert torch.equal(fast.mask_B_T, slow.mask_B_T) and fast.mask_B_T.sum() > 10
    assert torch.allclose(fast.logp_B_T, slow.logp_B_T, atol=2e-5), \
        (fast.logp_B_T - slow.logp_B_T).abs().max()
    assert torch.allclose(fast.entropy_B_T, slow.entropy_B_T, atol=2e-5)
    if adapter is not None:
        assert sum(float(g.abs().sum()) for g in g_slow) > 0
        for a, b in zip(g_fast, g_slow, strict=True):
            assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7  # float32 rounding of reordered sums


def test_fast_scorer_bf16_close_to_hf_bf16(policy):
    fast, g_fast = _score(policy, "policy", fast=True, autocast=True)
    slow, g_slow = _score(policy, "policy", fast=False, autocast=True)
    assert (fast.logp_B_T - slow.logp_B_T).abs().max() < 0.05  # bf16 rounding, both paths
    flat_f, flat_s = torch.cat([g.flatten() for g in g_fast]), torch.cat([g.flatten() for g in g_slow])
    assert torch.nn.functional.cosine_similarity(flat_f, flat_s, dim=0) > 0.999


def test_fast_scorer_under_bf16_holds_bf16_base_weights_with_autocasts_arithmetic(policy, monkeypatch):
    """The frozen base cast once per weight change gives bit for bit what autocast's per-call cast gives."""
    once, g_once = _score(policy, "policy", fast=True, autocast=True)
    cached = fast_module._BASE_CACHE[fast_module._base(policy.model)]
    assert cached[torch.bfloat16][1][0]["qkv"][0].dtype == torch.bfloat16
    monkeypatch.setattr(fast_module, "autocast_dtype", lambda: None)  # as before: float32, autocast casts
    per_call, g_per_call = _score(policy, "policy", fast=True, autocast=True)
    assert (torch.equal(once.logp_B_T, per_call.logp_B_T)
            and torch.equal(once.entropy_B_T, per_call.entropy_B_T))
    for a, b in zip(g_once, g_per_call, strict=True):
        assert torch.equal(a, b)


def test_fast_scorer_falls_back_when_the_base_itself_trains(policy):
    with policy.use("policy") as model:
        assert FastScorer.supports(model)
        weight = fast_module._base(model).model.layers[0].mlp.down_proj.base_layer.weight
        weight.requires_grad_(True)
        try:
            assert not FastScorer.supports(model)  # its stacked copies would carry no gradient
        finally:
            weight.requires_grad_(False)


def test_fast_scorer_follows_the_active_adapter_and_weight_changes(tiny_parts):
    env, cfg, tok, base = tiny_parts
    cfg = copy.deepcopy(cfg)
    cfg.roles = {"solver": "first"}
    cfg.default_adapter = "second"
    p = Policy(copy.deepcopy(base), tok, cfg, env.roles)
    p.adapters = ["first", "second"]  # a second adapter the arith env does not bind: add it as peft would
    p.model.add_adapter("second", p.model.peft_config["first"])
    p.trainable_adapters = ["first", "second"]
    with torch.no_grad():
        for prm in p.adapter_parameters("second"):
            prm.add_(0.1)
    rows = _rows(tok)
    out = {}
    for adapter in ("first", "second", None):
        with torch.no_grad(), p.use(adapter) as model:
            assert FastScorer.adapter_in_use(model) == adapter
            out[adapter] = [score_rows(model, rows, tok.pad_token_id, False, fast=f).logp_B_T
                            for f in (True, False)]
        assert torch.allclose(*out[adapter], atol=2e-5)
    assert not torch.allclose(out["first"][0], out["second"][0], atol=1e-3)
    with torch.no_grad():  # the base weights change (a full-weight sync): the stacked copy follows
        base_w = p.model.get_base_model().model.layers[0].self_attn.v_proj.base_layer.weight
        base_w.mul_(1.5)  # (v, not q: q_norm would undo a scale)
        with p.use("first") as model:
            after = [score_rows(model, rows, tok.pad_token_id, False, fast=f).logp_B_T for f in (True, False)]
    assert torch.allclose(*after, atol=2e-5) and not torch.allclose(after[0], out["first"][0], atol=1e-4)


def test_lora_dropout_in_training_falls_back_to_hf(tiny_parts):
    env, cfg, tok, base = tiny_parts
    cfg = copy.deepcopy(cfg)
    cfg.lora_dropout = 0.1
    p = Policy(copy.deepcopy(base), tok, cfg, env.roles)
    p.model.train()
    with p.use("policy") as model:
        assert not FastScorer.supports(model)
    p.model.eval()
    with p.use("policy") as model:
        assert FastScorer.supports(model)


def test_fast_paths_match_hf_on_a_llama_model(tiny_parts):
    """SmolLM2 (the pretrained model the suite loads) is a Llama: no q/k norms, its own rope base."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from common.engines.fast import FastDecoder

    env, cfg, tok, _ = tiny_parts
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128,
                                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                         max_position_embeddings=128, rope_theta=100000.0,
                                         pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id,
                                         tie_word_embeddings=True)).eval()
    for prm in llama.parameters():
        prm.requires_grad_(False)
    p = Policy(llama, tok, copy.deepcopy(cfg), env.roles)
    with torch.no_grad():
        for prm in p.trainable_parameters():
            prm.add_(0.05 * torch.randn_like(prm))
    fast, g_fast = _score(p, "policy", fast=True)
    slow, g_slow = _score(p, "policy", fast=False)
    assert torch.allclose(fast.logp_B_T, slow.logp_B_T, atol=2e-5), \
        (fast.logp_B_T - slow.logp_B_T).abs().max()
    for a, b in zip(g_fast, g_slow, strict=True):
        assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7
    ids = torch.tensor([tok.encode("Q: 3+4\nA:", add_special_tokens=False)])
    mask, pos = torch.ones_like(ids), torch.arange(ids.size(1))[None]
    with torch.inference_mode(), p.use("policy") as model:
        assert FastDecoder.supports(model)
        got = FastDecoder(model, "policy", 1, ids.size(1) + 1).prefill(ids, mask, pos)
        want = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits[:, -1]
    assert torch.allclose(got, want, atol=1e-5), (got - want).abs().max()


def test_merged_adapter_falls_back_to_hf_in_both_paths(policy):
    from common.engines.fast import FastDecoder

    with policy.use("policy") as model:
        assert FastDecoder.supports(model) and FastScorer.supports(model)
        # the delta now lives in the base weights: x W^T + s (x A^T) B^T would add it twice
        model.merge_adapter()
        assert not FastDecoder.supports(model) and not FastScorer.supports(model)
        model.unmerge_adapter()
        assert FastDecoder.supports(model) and FastScorer.supports(model)


@pytest.mark.parametrize("fast", [True, False])
def test_score_rows_logp_and_entropy_equal_a_log_softmax_by_hand(policy, fast):
    """logp = z_target - logsumexp(z) and H = logsumexp(z) - E_p[z], z = logits / T: as log_softmax gives
    them."""
    tok, temperature = policy.tokenizer, 0.7
    rows = _rows(tok)
    with torch.no_grad(), policy.use("policy") as model:
        s = score_rows(model, rows, tok.pad_token_id, with_entropy=True, temperature=temperature, fast=fast)
        for b, row in enumerate(rows):
            positions = row.positions()
            logits = model(input_ids=torch.tensor([row.ids])).logits[0].float() / temperature
            logp_L_V = torch.log_softmax(logits, dim=-1)
            want = torch.stack([logp_L_V[p - 1, row.ids[p]] for p in positions])
            want_h = torch.stack([-(logp_L_V[p - 1].exp() * logp_L_V[p - 1]).sum() for p in positions])
            assert torch.allclose(s.logp_B_T[b, : len(positions)], want, atol=2e-5)
            assert torch.allclose(s.entropy_B_T[b, : len(positions)], want_h, atol=2e-5)
            assert s.mask_B_T[b].sum() == len(positions) and not s.logp_B_T[b, len(positions):].any()


def _group_rows(tok):
    """GRPO-like rows: two prompts of different lengths x three completions of different lengths; a
    row of the short prompt continues for a second turn in the same context (the longest suffix is
    not the longest prefix's: its padding slots run past the longest row)."""
    prompts = ["Work it out step by step, then end with #answer.\nQ: 12-5*2+7\nA:", "Compute.\nQ: 9\nA:"]
    answers = [" 7", " 12-10=2 2+7=9 #9", " 9 #9"]
    return build_rows([_episode(tok, f"t{g}", i, q, a, second_turn=g == 1 and i == 1)
                       for g, q in enumerate(prompts) for i, a in enumerate(answers)], None)


def _score_group(policy, fast, share, autocast=False):
    rows = _group_rows(policy.tokenizer)
    for prm in policy.trainable_parameters():
        prm.grad = None
    with policy.use("policy") as model, torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        s = score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=True, temperature=0.7,
                       fast=fast, share_prefix=share)
    (s.logp_B_T * torch.arange(1.0, s.logp_B_T.size(1) + 1)).sum().backward()
    return s, [p.grad.clone() for p in policy.trainable_parameters()]


def test_shared_layout_by_hand():
    """Rows [5 6 7 | 8 9], [5 6 7 | 1], [4 7 | 2 3]: the prefix of a row ends before the position that
    predicts its first action token (index 2 for the first two, 1 for the third)."""
    rows = [Row("policy", "solver", 0, tuple(ids),
                (Span(start, 0, Turn("solver", "policy", ids[:start], ids[start:], [], "")),))
            for ids, start in (([5, 6, 7, 8, 9], 3), ([5, 6, 7, 1], 3), ([4, 7, 2, 3], 2))]
    positions = [r.positions() for r in rows]
    assert positions == [[3, 4], [3], [2, 3]]
    lay = SharedLayout.of(rows, positions, pad_id=0, max_fraction=1.0)
    assert (lay.prefix_ids_U_P.tolist() == [[5, 6], [0, 4]]
            and lay.prefix_mask_U_P.tolist() == [[1, 1], [0, 1]])
    assert lay.owner_B.tolist() == [0, 0, 1]
    assert lay.suffix_ids_B_S.tolist() == [[7, 8, 9], [7, 1, 0], [7, 2, 3]]
    # suffix index of the logits before each action token
    assert lay.gather_B_T.tolist() == [[0, 1], [0, 0], [0, 1]]
    # 2 x 2 prefix + 3 x 3 suffix = 13 positions against 3 x 5 = 15: not worth two phases at 0.75
    assert SharedLayout.of(rows, positions, pad_id=0) is None
    assert SharedLayout.of(rows[:1], positions[:1], pad_id=0, max_fraction=1.0).owner_B.tolist() == [0]
    one = Row("policy", "solver", 0, (5, 6), (Span(1, 0, Turn("solver", "policy", [5], [6], [], "")),))
    # nothing before the first prediction
    assert SharedLayout.of([one], [one.positions()], pad_id=0, max_fraction=1.0) is None


def test_shared_prefix_scoring_matches_whole_rows_and_hf(policy, monkeypatch):
    import common.batch

    monkeypatch.setattr(common.batch, "SHARE_MAX_FRACTION", 1.0)  # these short rows: share whatever they save
    calls = []
    real = FastScorer.logits_shared
    monkeypatch.setattr(FastScorer, "logits_shared",
                        lambda self, *a: calls.append(a[2].tolist()) or real(self, *a))
    shared, g_shared = _score_group(policy, fast=True, share=True)
    assert calls == [[0, 0, 0, 1, 1, 1]]  # two prompts, each run once for its three rows
    whole, g_whole = _score_group(policy, fast=True, share=False)
    hf, g_hf = _score_group(policy, fast=False, share=True)
    assert len(calls) == 1 and shared.mask_B_T.sum() > 20
    for other, g_other in ((whole, g_whole), (hf, g_hf)):
        assert torch.equal(shared.mask_B_T, other.mask_B_T)
        assert torch.allclose(shared.logp_B_T, other.logp_B_T, atol=2e-5), \
            (shared.logp_B_T - other.logp_B_T).abs().max()
        assert torch.allclose(shared.entropy_B_T, other.entropy_B_T, atol=2e-5)
        for a, b in zip(g_shared, g_other, strict=True):
            assert (a - b).abs().max() <= 1e-5 * b.abs().max() + 1e-7


def test_shared_prefix_scoring_bf16_close_to_whole_rows(policy, monkeypatch):
    import common.batch

    monkeypatch.setattr(common.batch, "SHARE_MAX_FRACTION", 1.0)
    shared, g_shared = _score_group(policy, fast=True, share=True, autocast=True)
    whole, g_whole = _score_group(policy, fast=True, share=False, autocast=True)
    # bf16 rounding of differently shaped matmuls
    assert (shared.logp_B_T - whole.logp_B_T).abs().max() < 0.05
    flat_s, flat_w = torch.cat([g.flatten() for g in g_shared]), torch.cat([g.flatten() for g in g_whole])
    assert torch.nn.functional.cosine_similarity(flat_s, flat_w, dim=0) > 0.999


class _Cfg:
    num_attention_heads, num_hidden_layers = 4, 2


def test_lean_fits_bounds_the_attention_the_lean_forward_keeps():
    from types import SimpleNamespace

    from common.batch import LEAN_ATTENTION_BYTES, lean_fits
    model = SimpleNamespace(config=_Cfg(), is_gradient_checkpointing=False)
    # two fp32 tensors a layer of rows x heads x width x width: 2 * 4 * 2 * 1 * 4 * 8192**2 = 4 GiB exactly
    assert LEAN_ATTENTION_BYTES == 2 * 4 * 2 * 1 * 4 * 8192 ** 2
    assert lean_fits(model, 1, 8192) and not lean_fits(model, 1, 8193)
    assert lean_fits(model, 4, 4096) and not lean_fits(model, 5, 4096)
    model.is_gradient_checkpointing = True  # only HF's forward recomputes layers
    assert not lean_fits(model, 1, 8)


def test_long_rows_and_checkpointed_models_score_through_hf(policy, monkeypatch):
    from common import batch as batch_module
    calls = []
    real = FastScorer.logits_at
    monkeypatch.setattr(FastScorer, "logits_at", lambda self, *a: calls.append(1) or real(self, *a))
    monkeypatch.setattr(FastScorer, "logits_shared", lambda self, *a: calls.append(1) or pytest.fail())
    rows = _rows(policy.tokenizer)
    with policy.use("policy") as model:
        lean = score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=False, share_prefix=False)
        assert calls == [1]
        monkeypatch.setattr(batch_module, "LEAN_ATTENTION_BYTES", 0)
        hf = score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=False, share_prefix=False)
        assert calls == [1]  # the HF forward ran
    assert torch.allclose(lean.logp_B_T, hf.logp_B_T, atol=2e-5)
    monkeypatch.setattr(batch_module, "LEAN_ATTENTION_BYTES", 4 << 30)
    policy.enable_gradient_checkpointing()
    with policy.use("policy") as model:
        score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=False, share_prefix=False)
    assert calls == [1]
