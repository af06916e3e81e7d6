"""The policy: one base model and one LoRA adapter per role binding (peft).

The reference policy is the same base model with adapters disabled: no second copy of the weights.
The base model comes from `common.models` (built offline or loaded from a local path), warm-started by
`common.warmstart`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from peft import LoraConfig, PeftModel, get_peft_model

from common.config import ModelConfig
from common.util import umask


# ---- the policy with one adapter per role ------------------------------------------------------
class Policy:
    """Base model + LoRA adapters. `role_adapter[role]` is an adapter name or 'scripted'."""

    def __init__(self, base: Any, tokenizer: Any, cfg: ModelConfig, roles: tuple[str, ...]):
        self.tokenizer = tokenizer
        self.cfg = cfg
        unknown = sorted(set(cfg.roles) - set(roles))
        if unknown:
            raise ValueError(f"model.roles names unknown role(s) {unknown}; "
                             f"this environment's roles are {list(roles)}")
        self.role_adapter = {r: cfg.roles.get(r, cfg.default_adapter) for r in roles}
        self.adapters = sorted({a for a in self.role_adapter.values() if a != "scripted"})
        missing = sorted(set(cfg.frozen_adapters) - set(self.adapters))
        if missing:
            raise ValueError(f"model.frozen_adapters names {missing}, which no role uses; "
                             f"adapters are {self.adapters}")
        self.trainable_adapters = [a for a in self.adapters if a not in cfg.frozen_adapters]
        for p in base.parameters():
            p.requires_grad_(False)
        self.model: Any = base
        if self.adapters:
            lora = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                              target_modules=list(cfg.lora_targets), bias="none", task_type="CAUSAL_LM")
            with torch.random.fork_rng():
                torch.manual_seed(cfg.init_seed + 1)
                self.model = get_peft_model(base, lora, adapter_name=self.adapters[0])
                for name in self.adapters[1:]:
                    self.model.add_adapter(name, lora)
            self._active: str | None = None
            self.activate(self.adapters[0])
        self.model.eval()

    # ---- gradient checkpointing (trainer.gradient_checkpointing) -------------------------------
    def enable_gradient_checkpointing(self) -> None:
        """transformers' checkpointing of every decoder layer, non-reentrant (`use_reentrant=False`: with a
        frozen base no input needs requires_grad, and peft's adapters get their gradients as without it).
        A layer checkpoints only in training mode, and the policy is kept in eval(): `training_forward`
        turns the checkpointed layers' training mode on around the update."""
        base: Any = self.model.get_base_model() if isinstance(self.model, PeftModel) else self.model
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.model.eval()

    def checkpointed_layers(self) -> list[torch.nn.Module]:
        """The decoder layers transformers checkpoints (not the model, which carries the flag too)."""
        from transformers.modeling_layers import GradientCheckpointingLayer

        return [m for m in self.model.modules()
                if isinstance(m, GradientCheckpointingLayer) and m.gradient_checkpointing]

    @contextlib.contextmanager
    def training_forward(self) -> Iterator[None]:
        """The checkpointed layers in training mode (their activations recomputed in the backward) while
        the block runs, eval() again after. Dropout stays off: the attention dropout of Llama/Qwen configs
        is 0 and LoRA's is `model.lora_dropout` (0 at every scale). A no-op without checkpointing."""
        layers = self.checkpointed_layers()
        for m in layers:
            m.train()
        try:
            yield
        finally:
            for m in layers:
                m.eval()

    def adapter_parameters(self, adapter: str) -> list[torch.nn.Parameter]:
        tag = f".{adapter}."
        return [p for n, p in self.model.named_parameters() if "lora_" in n and tag in n]

    def trainable_parameters(self) -> list[torch.nn.Parameter]:
        return [p for a in self.trainable_adapters for p in self.adapter_parameters(a)]

    def activate(self, adapter: str) -> None:
        """Make `adapter` the active one, keeping every trainable adapter's requires_grad on."""
        if self._active == adapter:
            return
        self.model.set_adapter(adapter)  # peft also flips requires_grad of the others: restore it
        for a in self.adapters:
            flag = a in self.trainable_adapters
            for p in self.adapter_parameters(a):
                p.requires_grad_(flag)
        self._active = adapter

    @contextlib.contextmanager
    def use(self, adapter: str | None) -> Iterator[Any]:
        """Run the model with `adapter` active, or the reference (adapters disabled) for None."""
        if adapter is None:
            if isinstance(self.model, PeftModel):
                with self.model.disable_adapter():
                    yield self.model
            else:
                yield self.model
            return
        self.activate(adapter)
        yield self.model

    def save_adapters(self, folder: Path | str) -> dict[str, str]:
        """Every adapter in PEFT's format (`save_pretrained`), one folder each: `<folder>/<adapter>/`
        (adapter_config.json, adapter_model.safetensors), loadable with `PeftModel.from_pretrained(base,
        <folder>/<adapter>)` onto the base they were trained on (the run's warm start). Written beside
        `folder` and renamed into place, so a folder there is always whole. Returns adapter -> folder.

        Only adapters train here (the base is frozen); a policy without one (every role scripted) writes
        nothing and returns {}."""
        if not isinstance(self.model, PeftModel):
            return {}
        folder = Path(folder)
        staging = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(staging, ignore_errors=True)
        for name in self.adapters:
            # peft writes an adapter named "default" into the folder itself, any other into <folder>/<name>
            into = staging / name if name == "default" else staging
            self.model.save_pretrained(str(into), selected_adapters=[name])
        mode = 0o666 & ~umask()  # readable by the group, as every record (safetensors writes 0o600)
        for path in staging.rglob("*"):
            if path.is_file():
                path.chmod(mode)
        shutil.rmtree(folder, ignore_errors=True)
        os.replace(staging, folder)
        return {name: str(folder / name) for name in self.adapters}

    def adapter_state(self) -> dict[str, torch.Tensor]:
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if "lora_" in n}
