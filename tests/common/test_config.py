"""Bad configs fail before anything runs, with a message that says how to fix them."""

import pytest

from common.run import resolve
from replications import METHODS
from replications.replicate import plan, validate_cells
from replications.run import compose


def resolved(*overrides):
    return resolve(compose("grpo", ["scale=smoke", *overrides]), METHODS)


def test_default_smoke_config_resolves():
    r = resolved()
    assert r.env.name == "arith" and r.method.cfg.estimator == "grpo"
    assert str(r.run_dir.path).endswith("grpo/arith/default/seed-0")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["method.name=nosuch"], "unknown method method.name='nosuch'; choose one of"),
        (["env.name=nosuch"], "unknown environment env.name='nosuch'; choose one of"),
        (["trainer.kl.coef=0.1", "trainer.kl.placement=loss", "trainer.kl.estimator=k4"], "unknown KL estimator"),
        (["trainer.kl.coef=0.1"], "has no effect with trainer.kl.placement=none"),
        (["trainer.kl.placement=loss"], "has no effect with trainer.kl.coef=0"),
        (["engine.kv_cache_memory_bytes=1000"], "has no effect with engine=hf"),
        (["eval.temperature=0"], "k identical greedy samples"),
        (["+env.colour=blue"], "unknown env setting"),
        (["+method.lambda_s=0.9"], "unknown method setting"),
        (["method.estimator=ppo"], "unknown advantage estimator"),
        (["model.kind=pretrained"], "needs model.path"),
        (["+model.roles.nobody=policy"], "unknown role"),
    ],
)
def test_bad_config_fails_with_a_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolved(*overrides)


def test_unknown_top_level_key_fails_at_compose():
    with pytest.raises(Exception, match="trainr"):
        compose("grpo", ["scale=smoke", "+trainr.steps=3"])


def test_unknown_method_fails_before_compose():
    with pytest.raises(ValueError, match="unknown method 'nosuch'"):
        compose("nosuch")


def test_replication_validates_every_cell_before_launch(tmp_path):
    cells = plan("grpo", "smoke", seeds=[0, 1], extra_overrides=(f"out_dir={tmp_path}", "trainer.kl.coef=0.5"))
    with pytest.raises(ValueError, match="(?s)cell grpo/arith/grpo/seed-0.*no effect"):
        validate_cells(cells)
    assert not any(tmp_path.iterdir())  # nothing ran


def test_paper_scale_refuses_without_local_model(tmp_path):
    cells = plan("grpo", "paper", seeds=[0], extra_overrides=(f"out_dir={tmp_path}",))
    with pytest.raises(ValueError, match="needs model.path"):
        validate_cells(cells)
