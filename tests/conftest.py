import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_parts(tmp_path_factory):
    """An untrained tiny model + tokenizer for the arith env (no SFT: fast)."""
    from common.config import ModelConfig, SFTConfig
    from common.envs.arith import ArithConfig, ArithEnv
    from common.policy import warm_started_base

    torch.set_num_threads(1)
    env = ArithEnv(ArithConfig(train_size=64, heldout_size=16, max_value=20))
    cfg = ModelConfig()
    tok, base, _ = warm_started_base(cfg, SFTConfig(enabled=False), env, 0, str(tmp_path_factory.mktemp("work")))
    return env, cfg, tok, base
