"""Every rank exports the base model its own vLLM engine loads (`common.engines.vllm.export_base`).

transformers' `save_pretrained` writes nothing on a rank other than 0 once a process group exists:
with two ranks, the second rank's engine found an empty folder and vLLM refused to start. Two real
gloo ranks here, no vLLM needed."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from transformers import AutoModelForCausalLM

from common.config import ModelConfig
from common.engines.vllm import export_base
from common.models import build_tiny_model, train_tokenizer


def _model_and_tokenizer():
    tok = train_tokenizer(["a b c d e f g 1 2 3 + = #"] * 10, 64)
    torch.manual_seed(0)
    return build_tiny_model(ModelConfig(), len(tok), tok.pad_token_id or 0, tok.eos_token_id or 1), tok


def _rank(rank: int, world: int, port: int, root: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, tok = _model_and_tokenizer()
        model.save_pretrained(Path(root) / f"hf-{rank}")  # what the engine did before
        export_base(model, {k: v.detach() for k, v in model.state_dict().items()}, tok,
                    Path(root) / f"ours-{rank}")
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_of_two_ranks_writes_a_loadable_base(tmp_path):
    mp.start_processes(_rank, args=(2, _free_port(), str(tmp_path)), nprocs=2, join=True,
                       start_method="spawn")
    assert not (tmp_path / "hf-1" / "config.json").exists()  # transformers: rank 1 writes no config
    assert (tmp_path / "hf-0" / "config.json").exists()
    model, _ = _model_and_tokenizer()
    for rank in (0, 1):
        folder = tmp_path / f"ours-{rank}"
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
        back = AutoModelForCausalLM.from_pretrained(folder)
        assert back.config.architectures == [type(model).__name__]
        for (name, a), (name_b, b) in zip(model.state_dict().items(), back.state_dict().items(), strict=True):
            assert name == name_b and torch.equal(a, b), name
        assert back.lm_head.weight.data_ptr() == back.model.embed_tokens.weight.data_ptr()  # still tied
