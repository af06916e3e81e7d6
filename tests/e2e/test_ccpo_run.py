"""End to end: CCPO on thinker_solver's free-riding setting with the tiny model (solo plays paired by
environment seed, role alternation, eval variants)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.helpers import last_checkpoint

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]


def args(out, work, first_role):
    return [f"out_dir={Path(out) / first_role}", f"work_dir={work}", "scale=smoke", "progress=false",
            "trainer.threads=1", "trainer.steps=1", "trainer.checkpoint_every=1", "eval.max_tasks=4",
            "sft.steps=20", "method.credit=v1", "method.alternate_every=1", f"method.first_role={first_role}",
            "method.crn=true"]


@pytest.mark.parametrize("first_role", ["thinker", "solver"])
def test_alternation_trains_only_the_named_adapter(tmp_path, first_role):
    from common.policy import Policy
    from common.warmstart import warm_started_base
    from envs.registry import ENVS
    from experiments.run import compose

    out, work = tmp_path / "out", tmp_path / "work"
    overrides = args(out, work, first_role)
    subprocess.run([sys.executable, "-m", "experiments.run", "method=ccpo", *overrides], cwd=ROOT, check=True,
                   capture_output=True, timeout=600)
    run = out / first_role / "ccpo" / "thinker_solver-freeride" / "default" / "seed-0"
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert metrics[0]["generated_tokens_total/solo"] > 0 and metrics[0]["model_calls_total/solo"] == 4 * 4
    assert metrics[0]["trains_thinker"] == float(first_role == "thinker")
    assert {"info/knows", "info/p_see"} <= set(metrics[0])  # the free-riding setting ran
    final = json.loads((run / "eval.json").read_text())["final"]
    assert set(final["variants"]) == {"paired", "empty_guidance"}
    assert {"help", "hurt", "contribution"} <= set(final["variants"]["paired"]["metrics"])

    # the adapters' weights before RL, rebuilt exactly as the run built them
    cfg = compose("ccpo", overrides)
    env_cls = ENVS["thinker_solver"]
    env = env_cls(env_cls.config_class(**cfg.env))
    tok, base, _ = warm_started_base(cfg.model, cfg.sft, env, cfg.seed, str(work))
    before = Policy(base, tok, cfg.model, env.roles).adapter_state()
    ckpt = torch.load(last_checkpoint(run), map_location="cpu", weights_only=False)["state_dict"]
    after = {k.removeprefix("net."): v for k, v in ckpt.items()}
    assert set(after) == set(before)
    other = "solver" if first_role == "thinker" else "thinker"
    changed = {name: not torch.equal(before[name], after[name]) for name in before}
    assert any(c for n, c in changed.items() if f".{first_role}." in n), "the trained adapter did not change"
    assert not any(c for n, c in changed.items() if f".{other}." in n), "the other adapter changed"
