import copy

import pytest
import torch

from common.policy import Policy


@pytest.fixture()
def policy(tiny_parts):
    """A fresh policy (one adapter) on the session's tiny model, its adapter moved away from zero so that
    it matters."""
    env, cfg, tok, base = tiny_parts
    cfg = copy.deepcopy(cfg)
    cfg.roles = {}
    p = Policy(copy.deepcopy(base), tok, cfg, env.roles)
    with torch.no_grad():
        for prm in p.trainable_parameters():
            prm.add_(0.05 * torch.randn_like(prm))
    return p
