"""The final policy's adapters in PEFT's format (#44): each loads with `PeftModel.from_pretrained` onto
the base and gives exactly the trained policy's logits."""

from __future__ import annotations

import copy

import torch
from peft import PeftModel

from common.policy import Policy
from common.util import umask


def _trained(tiny_parts, roles: dict[str, str]) -> tuple[Policy, torch.nn.Module]:
    """A policy whose adapters moved away from their start (as training moves them), and a clean base."""
    env, cfg, tok, base = tiny_parts
    cfg = copy.deepcopy(cfg)
    cfg.roles = roles
    policy = Policy(copy.deepcopy(base), tok, cfg, tuple(roles) or env.roles)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for prm in policy.trainable_parameters():
            prm.add_(0.05 * torch.randn(prm.shape, generator=gen))
    return policy, copy.deepcopy(base)


def _ids(tok) -> torch.Tensor:
    return torch.tensor([tok.encode("What is 3 + 4? Answer:", add_special_tokens=False)])


@torch.no_grad()
def test_each_adapter_loads_onto_the_base_with_the_trained_logits(tiny_parts, tmp_path):
    policy, base = _trained(tiny_parts, {"planner": "plan", "worker": "work"})
    folders = policy.save_adapters(tmp_path / "adapters")
    assert folders == {a: str(tmp_path / "adapters" / a) for a in ("plan", "work")}
    ids = _ids(policy.tokenizer)
    base_logits = base(ids).logits
    loaded = PeftModel.from_pretrained(base, folders["plan"], adapter_name="plan")
    loaded.load_adapter(folders["work"], adapter_name="work")
    loaded.eval()
    for name in ("plan", "work"):
        with policy.use(name) as model:
            trained = model(ids).logits
        loaded.set_adapter(name)
        assert torch.equal(loaded(ids).logits, trained)
        assert not torch.allclose(trained, base_logits)  # the adapter matters: equality above means something
    assert not (tmp_path / "adapters.tmp").exists()
    for path in (tmp_path / "adapters").rglob("*"):  # readable by the group, as every record
        assert path.is_dir() or path.stat().st_mode & 0o777 == 0o666 & ~umask(), path


@torch.no_grad()
def test_one_adapter_under_its_name_and_a_second_export_replaces_the_first(tiny_parts, tmp_path):
    policy, base = _trained(tiny_parts, {})
    first = policy.save_adapters(tmp_path / "adapters")
    assert list(first) == ["policy"]
    with torch.no_grad():
        for prm in policy.trainable_parameters():
            prm.mul_(2.0)
    again = policy.save_adapters(tmp_path / "adapters")
    assert again == first
    ids = _ids(policy.tokenizer)
    with policy.use("policy") as model:
        trained = model(ids).logits
    loaded = PeftModel.from_pretrained(base, first["policy"]).eval()
    assert torch.equal(loaded(ids).logits, trained)
