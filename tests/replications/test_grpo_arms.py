"""GRPO's supervised control arms (#16): online rejection-sampling fine-tuning (`method.estimator=rft`)
and SFT on clean demonstrations (`method.update=clean_sft`), and the replication's per-scale arms."""

import numpy as np
import pytest

from common.credit import BROADCAST, get_estimator, rft, to_advantages
from common.engines.base import Engine, SamplingParams
from common.rollout import Rollout
from common.warmstart import demonstrations
from envs.testbeds.arith import ArithConfig, ArithEnv
from experiments.replicate import load_replication, plan
from replications.grpo.method import GRPO, GRPOConfig
from tests.helpers import ByTurn, run_view


def test_rft_keeps_the_successes_with_weight_one_and_nothing_else():
    np.testing.assert_array_equal(rft(np.array([1.0, 0.0, 0.0, 1.0])), [1.0, 0.0, 0.0, 1.0])
    np.testing.assert_array_equal(rft(np.array([0.0, 0.0])), [0.0, 0.0])  # no negative gradient, no baseline
    # all right: all trained (GRPO: 0)
    np.testing.assert_array_equal(rft(np.array([1.0, 1.0, 1.0])), [1.0, 1.0, 1.0])
    # partial credit is not a success
    np.testing.assert_array_equal(rft(np.array([0.5, 0.999, 1.0])), [0.0, 0.0, 1.0])
    assert get_estimator("rft") is rft


class _NoModel(Engine):
    """An engine that must not be called: teacher-forced plays sample nothing."""

    def generate(self, requests, params, seed):  # type: ignore[override]
        raise AssertionError("a demonstrator play asked the model for an action")


def _clean_setup(tiny_parts):
    env, _, tok, _ = tiny_parts
    noisy = ArithEnv(ArithConfig(train_size=64, heldout_size=16, max_value=20, demo_shortcut=1.0))
    clean = ArithEnv(ArithConfig(train_size=64, heldout_size=16, max_value=20, demo_shortcut=0.0))
    rollout = Rollout(noisy, _NoModel(), tok, {"solver": "policy"}, ["policy"],
                      SamplingParams(1.0, 1.0, 48, ("\n",)), 512, seed=0)
    return env, tok, noisy, clean, rollout


def test_demonstrator_plays_are_the_warm_starts_tokens_teacher_forced(tiny_parts):
    env, tok, noisy, clean, rollout = _clean_setup(tiny_parts)
    tasks = [noisy.task_set()["train"][i] for i in range(3)]
    groups = rollout.play_groups(tasks, [2, 2, 2], step=0, demonstrator=clean)
    turns = [t for g in groups for e in g.episodes for t in e.turns]
    # the clean demonstrator is right
    assert all(e.success and e.reward == 1.0 for g in groups for e in g.episodes)
    assert all(t.trainable and t.adapter == "policy" and t.logprobs == [0.0] * len(t.action_ids)
               for t in turns)
    assert all("=" in t.text for t in turns)  # the clean demonstrator always shows its working
    # the same (context, action) tokens the SFT warm start trains on, for the same tasks
    one = rollout.play_groups(tasks, [1, 1, 1], step=0, demonstrator=clean)
    pairs = [(list(t.prompt_ids), list(t.action_ids)) for g in one for e in g.episodes for t in e.turns]
    assert clean.cfg.demo_size == 0  # demonstrations() reads the train split's first tasks
    assert pairs == demonstrations(clean, tok, n_tasks=3, seed=0)


def test_clean_sft_credit_is_advantage_one_on_every_demonstrated_token(tiny_parts):
    env, tok, noisy, clean, rollout = _clean_setup(tiny_parts)

    method = GRPO(GRPOConfig(update="clean_sft", demonstrator_env={"demo_shortcut": 0.0}), run_view(noisy))
    method.validate()
    tasks = [noisy.task_set()["train"][i] for i in range(2)]
    # the NoModel engine proves nothing was sampled
    groups = method.play(rollout, tasks, step=0, mode="train")
    credit = method.credit(groups, 0)
    assert (credit.kind == "advantage"
            and credit.values == [[{BROADCAST: 1.0}] * len(g.episodes) for g in groups])
    adv = ByTurn(to_advantages(groups, credit, method.agent_of, method.estimator), groups)
    assert all(adv.tokens(t) == [1.0] * len(t.action_ids)
               for g in groups for e in g.episodes for t in e.turns)


def test_clean_sft_settings_are_checked_before_the_run(tiny_parts):
    _, _, noisy, _, _ = _clean_setup(tiny_parts)

    with pytest.raises(ValueError, match=r"unknown arith setting\(s\) \['shortcut'\]"):
        GRPO(GRPOConfig(update="clean_sft", demonstrator_env={"shortcut": 0.0}), run_view(noisy)).validate()
    with pytest.raises(ValueError, match="read only with method.update=clean_sft"):
        GRPO(GRPOConfig(demonstrator_env={"demo_shortcut": 0.0}), run_view(noisy)).validate()


def test_the_supervised_arms_run_at_cpu_scale_only():
    rep = load_replication("grpo")
    assert rep.arms_at("cpu") == ["grpo", "online-rft", "clean-sft"]
    assert rep.arms_at("smoke") == ["grpo"] and rep.arms_at("paper") == ["grpo"]
    with pytest.raises(ValueError, match=r"grpo's arm\(s\) \['clean-sft'\] run only at scale\(s\) "
                                         r"\['cpu'\], not 'smoke'"):
        plan("grpo", "smoke", arms=["clean-sft"])
    cells = plan("grpo", "cpu", seeds=[0])
    assert [c.arm for c in cells] == ["grpo", "online-rft", "clean-sft"]
