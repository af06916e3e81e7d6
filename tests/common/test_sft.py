"""The SFT warm start runs at any step count (OneCycleLR needs a warm-up step and an annealing phase)."""

import copy

import pytest

from common.config import SFTConfig
from common.policy import demonstrations, sft


@pytest.mark.parametrize("steps", [1, 3, 10, 20])
def test_sft_runs_at_small_step_counts(tiny_parts, steps):
    env, _, tok, base = tiny_parts
    pairs = demonstrations(env, tok, n_tasks=8, seed=0)
    losses = sft(copy.deepcopy(base), pairs, SFTConfig(steps=steps, batch_size=4), seed=0, pad_id=tok.pad_token_id)
    assert len(losses) == steps and all(loss == loss for loss in losses)
