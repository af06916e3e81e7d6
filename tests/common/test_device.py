"""Every tensor the core builds lands on the device of the module that consumes it.

This machine has no GPU, so the model goes to PyTorch's `meta` device: a device other than the
default one, on which no real arithmetic happens. A forward pre-hook checks that every tensor handed
to the model shares its device, then stops the forward with a sentinel before any compute; where the
pipeline continues after the forward (the gathers, the log-softmax, the trainer's padded tensors), a
stand-in model or scorer returns `meta` tensors and the test checks that what comes out is still on
`meta` (mixing `meta` and CPU tensors raises, as mixing CUDA and CPU tensors does).
"""

from __future__ import annotations

import contextlib
import copy
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from common.batch import Row, Scored, Span, build_rows, padded, score_rows
from common.config import RunConfig, SFTConfig
from common.credit import Advantages
from common.engines.base import Request, SamplingParams
from common.engines.fast import FastDecoder, FastScorer
from common.engines.hf import HFEngine, _HFDecoder
from common.loss import kl_reward_penalty
from common.method import Method, MethodConfig, RunView
from common.records import RunDir
from common.rollout import Rollout
from common.trainer import RLModule
from common.warmstart import demonstrations, sft
from envs.testbeds.arith import ArithConfig, ArithEnv

META = torch.device("meta")


class ReachedTheModel(Exception):
    """Raised by the hook once every tensor argument was checked: the forward was about to run."""


class WrongDevice(AssertionError):
    pass


def tensors_in(args: tuple, kwargs: dict) -> list[tuple[str, torch.Tensor]]:
    named = [(f"args[{i}]", a) for i, a in enumerate(args)] + list(kwargs.items())
    return [(n, v) for n, v in named if isinstance(v, torch.Tensor)]


def check_devices(device: torch.device, args: tuple, kwargs: dict) -> None:
    wrong = [f"{n} on {v.device}" for n, v in tensors_in(args, kwargs) if v.device != device]
    if wrong:
        raise WrongDevice(f"the model is on {device} but got {', '.join(wrong)}")


def stop_at_forward(module: torch.nn.Module) -> Any:
    """A pre-hook on `module`: device check, then the sentinel (nothing is computed)."""
    device = next(module.parameters()).device

    def hook(mod: Any, args: tuple, kwargs: dict) -> None:
        check_devices(device, args, kwargs)
        raise ReachedTheModel

    return module.register_forward_pre_hook(hook, with_kwargs=True)


@pytest.fixture()
def rows(policy) -> list[Row]:
    """Rows of a few real episodes, played on CPU by the tiny model."""
    arith = ArithEnv(ArithConfig(train_size=8, heldout_size=2, max_value=20))
    engine = HFEngine(policy)
    rollout = Rollout(arith, engine, policy.tokenizer, policy.role_adapter, policy.trainable_adapters,
                      SamplingParams(1.0, 1.0, 6, tuple(arith.stop)), 512, seed=0)
    tasks = [arith.task_set()["train"][i] for i in range(3)]
    groups = rollout.play_groups(tasks, [2] * 3, step=0)
    out = build_rows([e for g in groups for e in g.episodes], None)
    assert out
    return out


# ---- scoring: common/batch.py ----------------------------------------------------------------------
def test_score_rows_hands_the_model_tensors_on_its_device(policy, rows):
    policy.model.to(META)
    assert not FastScorer.supports(policy.model)  # the lean forward is CPU-only: HF's forward runs
    handle = stop_at_forward(policy.model)
    try:
        with policy.use("policy") as model, pytest.raises(ReachedTheModel):
            score_rows(model, rows, policy.tokenizer.pad_token_id, with_entropy=True, fast=True)
    finally:
        handle.remove()


class MetaLM(torch.nn.Module):
    """Stands in for a causal LM on `meta`: checks its inputs' device, returns logits on `meta`."""

    def __init__(self, vocab: int = 11):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.embed_tokens = torch.nn.Embedding(vocab, 4, device=META)  # what FastScorer.supports reads
        self.config = SimpleNamespace()
        self.vocab = vocab

    def forward(self, input_ids: torch.Tensor, logits_to_keep: int = 0, **kwargs: Any) -> Any:
        check_devices(META, (input_ids,), kwargs)
        keep = logits_to_keep or input_ids.size(1)
        return SimpleNamespace(logits=torch.empty(input_ids.size(0), keep, self.vocab, device=META))


@pytest.fixture()
def gathers_on_one_device(monkeypatch):
    """torch.gather accepts a CPU index into a `meta` tensor (not into a CUDA one): make it refuse."""
    original = torch.Tensor.gather

    def gather(self: torch.Tensor, dim: int, index: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        if index.device != self.device:
            raise WrongDevice(f"gather: values on {self.device}, index on {index.device}")
        return original(self, dim, index, **kwargs)

    monkeypatch.setattr(torch.Tensor, "gather", gather)


def test_score_rows_keeps_every_tensor_on_the_models_device(gathers_on_one_device):
    turn = SimpleNamespace(num_action_tokens=2)
    rows = [Row("policy", "solver", 0, (1, 2, 3, 4, 5), (Span(3, 0, turn),)),  # type: ignore[arg-type]
            Row("policy", "solver", 1, (6, 7, 8), (Span(1, 0, turn),))]  # type: ignore[arg-type]
    scored = score_rows(MetaLM(), rows, pad_id=0, with_entropy=True, fast=True)
    assert scored.logp_B_T.device == META and scored.mask_B_T.device == META
    assert scored.entropy_B_T is not None and scored.entropy_B_T.device == META
    assert scored.logp_B_T.shape == (2, 2)


def test_padded_builds_on_the_given_device():
    out = padded([[1.0, 2.0], [3.0]], 3, device=META)
    assert out.device == META and out.shape == (2, 3)
    assert padded([[1.0, 2.0], [3.0]], 3).tolist() == [[1.0, 2.0, 0.0], [3.0, 0.0, 0.0]]  # CPU by default


# ---- generation: common/engines/hf.py --------------------------------------------------------------
def test_hf_engine_hands_the_model_tensors_on_its_device(policy):
    policy.model.to(META)
    engine = HFEngine(policy)
    with policy.use("policy") as model:
        assert not FastDecoder.supports(model)  # the lean decode path is CPU-only: HF's forward runs
    handle = stop_at_forward(policy.model)
    try:
        with pytest.raises(ReachedTheModel):
            engine.generate([Request([3, 4, 5], "policy"), Request([6, 7], "policy")],
                            SamplingParams(max_new_tokens=4), seed=0)
    finally:
        handle.remove()


def test_hf_decoder_steps_on_the_models_device():
    dec = _HFDecoder(MetaLM())
    ids = torch.zeros((2, 3), dtype=torch.long, device=META)
    dec.prefill(ids, torch.ones_like(ids), torch.zeros_like(ids))
    tok_B = torch.zeros(2, dtype=torch.long, device=META)
    logits_B_V = dec.step(tok_B, tok_B + 3)  # the attention mask grows by one column, on the model's device
    assert logits_B_V.device == META and dec.mask_B_L.device == META and dec.mask_B_L.shape == (2, 4)
    dec.select(torch.tensor([1], device=META))
    assert dec.mask_B_L.shape == (1, 4)


@pytest.mark.parametrize("params", [SamplingParams(temperature=1.0),
                                    SamplingParams(temperature=0.7, top_p=0.9),
                                    SamplingParams(temperature=0.0)])
def test_sampling_stays_on_the_logits_device(params):
    """The uniforms come from the engine's CPU generator (the same draws on every device), then move."""
    gen = torch.Generator().manual_seed(0)
    tok_B, lp_B = HFEngine._sample(torch.empty(3, 11, device=META), params, gen)
    assert tok_B.device == META and lp_B.device == META and tok_B.shape == (3,)


# ---- autocast follows the device type ---------------------------------------------------------------
def autocast_device(ctx: contextlib.AbstractContextManager) -> str | None:
    return ctx.device if isinstance(ctx, torch.autocast) else None


def test_autocast_follows_the_device_type():
    cfg = RunConfig()
    cfg.trainer.precision = "bf16"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "CUDA is not available": the context is only inspected here
        assert autocast_device(RLModule._autocast(SimpleNamespace(cfg=cfg,
                                                                  device=torch.device("cuda", 0)))) == "cuda"
        assert autocast_device(RLModule._autocast(SimpleNamespace(cfg=cfg,
                                                                  device=torch.device("cpu")))) == "cpu"
        engine = SimpleNamespace(bf16=True)
        assert autocast_device(HFEngine._autocast(engine,  # type: ignore[arg-type]
                                                  torch.device("cuda", 0))) == "cuda"
        assert autocast_device(HFEngine._autocast(engine,  # type: ignore[arg-type]
                                                  torch.device("cpu"))) == "cpu"
    cfg.trainer.precision = "32"
    assert autocast_device(RLModule._autocast(SimpleNamespace(cfg=cfg,
                                                              device=torch.device("cuda", 0)))) is None


# ---- the trainer's update: common/trainer.py --------------------------------------------------------
class StopUpdate(Exception):
    pass


def test_update_builds_its_tensors_on_the_device_of_logp(policy, rows, tmp_path, monkeypatch):
    """The behaviour, advantage and reference tensors of the loss follow the scored log-probs' device."""
    import common.trainer as trainer

    cfg = RunConfig()
    cfg.trainer.kl.placement = "loss"
    cfg.trainer.kl.coef = 0.1
    arith = ArithEnv(ArithConfig(train_size=8, heldout_size=2, max_value=20))
    module = RLModule(cfg, Method(MethodConfig(), RunView.of(cfg, arith)), arith, policy, HFEngine(policy),
                      RunDir(tmp_path / "run", tmp_path / "ck"))
    opt = module.configure_optimizers()
    module.optimizers = lambda: opt  # type: ignore[method-assign]
    module.to(META)  # what Lightning does on a GPU: the module (and the policy model in it) moves

    def meta_scored(model: Any, chunk: list[Row], *args: Any, **kwargs: Any) -> Scored:
        t_max = max(r.num_action_tokens for r in chunk)
        logp = torch.zeros(len(chunk), t_max, device=META, requires_grad=True)
        return Scored(logp, torch.ones(len(chunk), t_max, device=META),
                      torch.zeros(len(chunk), t_max, device=META))

    seen: dict[str, torch.Tensor] = {}

    def capture(batch: Any, t: Any, extra: Any) -> None:
        seen.update({k: v for k, v in vars(batch).items() if isinstance(v, torch.Tensor)})
        raise StopUpdate

    monkeypatch.setattr(trainer, "score_rows", meta_scored)
    monkeypatch.setattr(trainer, "policy_loss", capture)
    monkeypatch.setattr(module.method, "extra_loss", lambda batch, step: None)
    reference = module.reference_logprobs(rows)
    assert len(reference) == len(rows) and all(r.device == META for r in reference)
    advantages = Advantages({(r.episode, s.turn_index): 1.0 for r in rows for s in r.spans})
    with pytest.raises(StopUpdate):
        module.update(rows, advantages, step=0, reference=reference)
    assert ({"logp_B_T", "old_logp_B_T", "behaviour_logp_B_T", "adv_B_T", "mask_B_T", "ref_logp_B_T"}
            <= set(seen))
    assert {k: v.device for k, v in seen.items()} == {k: META for k in seen}


def test_kl_in_the_reward_compares_on_the_reference_device(rows, monkeypatch):
    import common.loss as loss

    reference = [torch.zeros(r.num_action_tokens, device=META) for r in rows]

    def kl_on_one_device(logp: torch.Tensor, ref: torch.Tensor, kind: str) -> torch.Tensor:
        if logp.device != ref.device:
            raise WrongDevice(f"behaviour log-probs on {logp.device}, reference on {ref.device}")
        return torch.zeros(logp.shape)  # on CPU: meta tensors cannot be summed into Python floats

    monkeypatch.setattr(loss, "kl_estimate", kl_on_one_device)
    episodes = [None] * (max(r.episode for r in rows) + 1)
    penalty = kl_reward_penalty(rows, reference, episodes, 0.1, "k3", lambda episode, index: "solver")
    assert penalty(rows[0].episode, "solver") == 0.0



# ---- the SFT warm start: common/warmstart.py -----------------------------------------------------------
def test_sft_hands_the_model_its_batches_on_its_device(tiny_parts):
    env, _, tok, base = tiny_parts
    model = copy.deepcopy(base).to(META)
    pairs = demonstrations(env, tok, n_tasks=4, seed=0)
    handle = stop_at_forward(model)
    try:
        with pytest.raises(ReachedTheModel):
            sft(model, pairs, SFTConfig(steps=1, batch_size=2), seed=0, pad_id=tok.pad_token_id)
    finally:
        handle.remove()
