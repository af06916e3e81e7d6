"""Key/value reuse across turns (common/engines/kv_reuse.py): the same tokens and log-probabilities as
re-encoding every context whole, for multi-turn, multi-role episodes with an adapter per role, on
both decoders (the lean one and HF's forward), with and without a chat template; a cache is used
only by the same adapter under the same weights, and a prompt that does not literally extend one
is prefilled whole."""

from __future__ import annotations

import copy
import json
import random
from typing import Any

import pytest
import torch

from common.chat import ChatFormat
from common.engines.base import Request, SamplingParams
from common.engines.hf import HFEngine
from common.engines.kv_reuse import PrefixStore
from common.policy import Policy
from common.rollout import Rollout
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

PARAMS = SamplingParams(temperature=1.0, max_new_tokens=6, stop=("\n",))


def make_policy(tiny_parts: Any, roles: dict[str, str]) -> Policy:
    env, cfg, tok, base = tiny_parts
    cfg = copy.deepcopy(cfg)
    cfg.roles = dict(roles)
    p = Policy(copy.deepcopy(base), tok, cfg, tuple(roles) or env.roles)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():  # adapters away from zero, each differently, so that they matter
        for prm in p.trainable_parameters():
            prm.add_(0.05 * torch.randn(prm.shape, generator=gen))
    return p


def assert_same(a: list[Any], b: list[Any], tol: float = 1e-5) -> None:
    assert [s.action_ids for s in a] == [s.action_ids for s in b]
    diff = max((abs(x - y) for s, t in zip(a, b, strict=True)
                for x, y in zip(s.logprobs, t.logprobs, strict=True)), default=0.0)
    assert diff < tol, diff


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize("adapter", ["policy", None])
def test_turns_on_cached_prefixes_sample_as_whole_prompts(policy, fast, adapter):
    """Ragged multi-turn contexts (some repeated: shared prefill) give what re-encoding gives."""
    tok = policy.tokenizer
    reuse, whole = HFEngine(policy, fast=fast), HFEngine(policy, fast=fast, kv_reuse=False)
    ctx = [tok.encode(f"Q: {i}+{i * 7}-{i}\nA:", add_special_tokens=False) for i in range(5)] * 2
    ctx_whole = [list(c) for c in ctx]
    for turn in range(3):
        got = reuse.generate([Request(c, adapter) for c in ctx], PARAMS, seed=turn)
        want = whole.generate([Request(c, adapter) for c in ctx_whole], PARAMS, seed=turn)
        assert_same(got, want)
        obs = [tok.encode(f" ok{i * turn}\nQ: {turn}+{i}\nA:", add_special_tokens=False) for i in range(10)]
        ctx = [c + s.action_ids + o for c, s, o in zip(ctx, got, obs, strict=True)]
        ctx_whole = [c + s.action_ids + o for c, s, o in zip(ctx_whole, want, obs, strict=True)]
    assert reuse.store is not None and whole.store is None
    assert reuse.store.hits == 20 and reuse.store.misses == 5  # turn 1: 5 distinct prompts; then all hit


def test_a_prompt_that_does_not_extend_its_cache_is_prefilled_whole(policy):
    """A cache is used for the tokens it literally shares: a prompt re-tokenized or edited before the
    cached tokens end misses (or reuses only the shared start) and still samples as re-encoding does."""
    tok = policy.tokenizer
    reuse, whole = HFEngine(policy), HFEngine(policy, kv_reuse=False)
    first = [tok.encode(f"Q: {i}*3+{i}\nA:", add_special_tokens=False) for i in range(4)]
    s1 = reuse.generate([Request(p, "policy") for p in first], PARAMS, seed=1)
    more = tok.encode(" next\nA:", add_special_tokens=False)
    edited = [p + s.action_ids + more for p, s in zip(first, s1, strict=True)]
    edited[0] = [edited[0][0], (edited[0][1] + 1) % 500, *edited[0][2:]]  # differs from its cache at token 1
    edited[1] = tok.encode(tok.decode(edited[1]), add_special_tokens=False)  # re-tokenized from its text
    assert reuse.store is not None
    hits_before = reuse.store.hits
    assert_same(reuse.generate([Request(p, "policy") for p in edited], PARAMS, seed=2),
                whole.generate([Request(p, "policy") for p in edited], PARAMS, seed=2))
    assert reuse.store.hits - hits_before <= 3  # the edited prompt found no cached prefix of its own


def test_a_cache_serves_only_its_adapter_and_its_weights(policy):
    tok = policy.tokenizer
    reuse, whole = HFEngine(policy), HFEngine(policy, kv_reuse=False)
    p = tok.encode("Q: 5+6\nA:", add_special_tokens=False)
    s = reuse.generate([Request(p, "policy")], PARAMS, seed=0)[0]
    nxt = p + s.action_ids + tok.encode(" more\nA:", add_special_tokens=False)
    assert reuse.store is not None
    assert_same(reuse.generate([Request(nxt, None)], PARAMS, seed=1),  # the reference: another policy
                whole.generate([Request(nxt, None)], PARAMS, seed=1))
    assert reuse.store.hits == 0
    with torch.no_grad():  # an optimizer step writes the adapter in place: every entry is stale
        for prm in policy.trainable_parameters():
            prm.add_(0.01)
    assert_same(reuse.generate([Request(nxt, "policy")], PARAMS, seed=1),
                whole.generate([Request(nxt, "policy")], PARAMS, seed=1))
    assert reuse.store.hits == 0


def test_the_store_keeps_to_its_budget_least_recently_used_first():
    store = PrefixStore(max_bytes=3 * 32)  # three 2-token entries (keys and values: 1 layer, 1 head, dim 2)
    kv = [torch.zeros(1, 2, 2)]
    store.enter(("w",))
    for i in range(3):
        store.put("a", (i, i + 1), kv, kv)
    store.enter(("w",))
    assert store.lookup("a", [0, 1, 5]) is not None  # (0, 1) is now the most recently used
    store.put("a", (9, 9), kv, kv)
    assert set(store.entries["a"]) == {(0, 1), (2, 3), (9, 9)} and store.nbytes == 3 * 32
    hit = store.lookup("a", [2, 3])  # a prompt no longer than the entry: all but its last token
    assert hit is not None and hit.n == 1 and hit.kv()[0][0].shape == (1, 1, 2)
    store.enter(("other weights",))
    assert not store.entries and store.nbytes == 0


class _TwoRoles(EpisodeState):
    """Roles a and b take turns; b's context restarts (new_context) at round `reset`."""

    def __init__(self, task: dict[str, Any]):
        self.task, self.round = task, 0

    def start(self) -> Observation:
        return Observation("a", f"Task {self.task['n']}: add {self.task['n'] % 7}.\nA:")

    def step(self, action: str) -> StepResult:
        self.round += 1
        if self.round >= self.task["turns"]:
            return StepResult(None, reward=float(len(action) % 2), success=True)
        role = "b" if self.round % 2 else "a"
        return StepResult(Observation(role, f" {role} saw {action[:4]!r} at {self.round}\nA:",
                                      new_context=role == "b" and self.round == self.task["reset"]))

    def expert_action(self) -> str:
        return "1"


class _TwoRoleEnv(Environment):
    name, roles, stop = "two_roles", ("a", "b"), ("\n",)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        return {"n": rng.randrange(100), "turns": 7, "reset": 3}

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1,)

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        return _TwoRoles(task)


@pytest.mark.parametrize("chat", [False, True])
def test_rollouts_with_an_adapter_per_role_play_the_same_episodes(tiny_parts, chat):
    policy = make_policy(tiny_parts, {"a": "alpha", "b": "beta"})
    tok = policy.tokenizer
    fmt = (ChatFormat("<|system|>be brief<|end|><|user|>", "<|end|><|assistant|>", "<|end|><|user|>",
                      "<|end|><|assistant|>", tok.eos_token) if chat else None)
    env = _TwoRoleEnv(EnvConfig())
    tasks = [{"id": f"t{i}", "tier": 1, "task": json.dumps({"n": 11 * i + 3, "turns": 5 + i % 4, "reset": 3})}
             for i in range(4)]
    played, engines = [], []
    for kv_reuse in (True, False):
        engine = HFEngine(policy, kv_reuse=kv_reuse)
        rollout = Rollout(env, engine, tok, policy.role_adapter, policy.trainable_adapters, PARAMS, 512,
                          seed=4, chat=fmt)
        played.append([e for g in rollout.play_groups(tasks, [2] * 4, step=0) for e in g.episodes])
        engines.append(engine)
    reuse, whole = played
    for e1, e0 in zip(reuse, whole, strict=True):
        assert [t.prompt_ids for t in e1.turns] == [t.prompt_ids for t in e0.turns]
        assert_same(e1.turns, e0.turns)
    # every turn that extends its role's last one (same adapter, no reset) reused that turn's cache
    extending = 0
    for ep in reuse:
        last: dict[str, list[int]] = {}
        for turn in ep.turns:
            prev = last.get(turn.role)
            if prev is not None and turn.prompt_ids[: len(prev)] == prev:
                extending += 1
            last[turn.role] = turn.prompt_ids + turn.action_ids
    store = engines[0].store
    assert store is not None and extending > 0 and store.hits >= extending
    assert not store.entries and store.nbytes == 0  # the play ended: its caches were dropped


def test_hf_forward_reuses_only_where_every_layer_sees_the_whole_context(policy):
    """A rebuilt DynamicCache stands for full-attention layers only: a sliding-window or recurrent
    model re-encodes (the lean decoder supports full attention only)."""
    from types import SimpleNamespace

    from common.engines.hf import _full_attention

    def model(**cfg: Any) -> Any:
        return SimpleNamespace(config=SimpleNamespace(**cfg))

    assert _full_attention(policy.model)  # the tiny Qwen3: every layer full attention
    assert _full_attention(model()) and _full_attention(model(sliding_window=None))  # Llama; Mistral off
    assert not _full_attention(model(sliding_window=4096))
    assert not _full_attention(model(layer_types=["full_attention", "sliding_attention"]))
    assert not _full_attention(model(layer_types=["linear_attention"], sliding_window=None))
