"""thinker_solver's dyad setting (#38): the algebra of the incentive to free-ride (expected team rewards per
tier, by hand and against the environment played with the demonstrator Solver), the cue, the lost
message, and the labels its claims are measured with."""

import json
import random

import pytest

from envs.testbeds.thinker_solver import ThinkerSolverConfig, ThinkerSolverEnv, expected_rewards, help_needed

DYAD = {"question": "sum", "see_probs": [0.9, 0.5, 0.1], "follow_known": 0.3, "cost_per_char": 0.15,
        "cue_words": ["strong", "fair", "weak"], "drop": 0.4}
TASK = {"facts": [["F", 7], ["C", 5], ["A", 2]], "asked": "F", "summed": "C", "shown": [], "p_see": 0.5,
        "cue": "fair"}  # the answer: (7 + 5) mod 10 = 2; " 7" is a wrong hint (an addend)


def make(**kw):
    return ThinkerSolverEnv(ThinkerSolverConfig(train_size=60, heldout_size=30, **{**DYAD, **kw}))


def play(env, task, seed, message, solver=None):
    """One main episode: the Thinker writes `message`, the Solver answers `solver` (default: the
    demonstrator); the last step's result."""
    ep = env.new_episode(task, random.Random(seed))
    obs = ep.start()
    assert obs.role == "thinker"
    obs = ep.step(message).next
    result = ep.step(solver if solver is not None else ep.expert_action())
    assert result.next is None
    return ep, obs, result


def test_expected_rewards_by_hand():
    """V = 10, cost 0.15 for a bare value, drop 0.4, the demonstrator Solver follows a hint it did not
    need 30% of the time. help = p + (1-p)(0.6 + 0.04) - 0.15; silent = p + (1-p) 0.1;
    wrong = p (1 - 0.6 * 0.3) + (1-p) 0.04 - 0.15."""
    cfg = ThinkerSolverConfig(**DYAD)
    by_hand = {0.9: {"help": 0.814, "silent": 0.910, "wrong": 0.592},
               0.5: {"help": 0.670, "silent": 0.550, "wrong": 0.280},
               0.1: {"help": 0.526, "silent": 0.190, "wrong": -0.032}}
    for p, want in by_hand.items():
        assert expected_rewards(cfg, p) == pytest.approx(want)
    # the incentive exists by algebra: silence is the best response in the strong tier (by 0.096), help in
    # the fair (by 0.12) and weak ones (by 0.336); a wrong hint is never best
    assert [help_needed(cfg, p) for p in (0.9, 0.5, 0.1)] == [False, True, True]
    # the conditional policy beats always helping (team reward 0.702 vs 0.670) and always silent (0.550)
    conditional = (0.910 + 0.670 + 0.526) / 3
    assert conditional == pytest.approx(0.702) and conditional > (0.814 + 0.670 + 0.526) / 3 > 0.55
    # without the cost and the lost messages (the free-riding setting) helping is always best
    free = ThinkerSolverConfig(**{**DYAD, "cost_per_char": 0.0, "drop": 0.0})
    assert all(help_needed(free, p) for p in (0.9, 0.5, 0.1))


@pytest.mark.parametrize("p", [0.9, 0.5, 0.1])
def test_expected_rewards_match_the_environment(p):
    env, task = make(), {**TASK, "p_see": p}
    for kind, message in (("help", " 2"), ("silent", ""), ("wrong", " 7")):
        rewards = [play(env, task, seed, message)[2].reward for seed in range(4000)]
        assert sum(rewards) / 4000 == pytest.approx(expected_rewards(env.cfg, p)[kind], abs=0.03), kind


def test_cue_in_both_prompts_per_tier():
    env = make()
    for row in env.task_set()["train"]:
        task = json.loads(row["task"])
        assert task["cue"] == {1: "strong", 2: "fair", 3: "weak"}[row["tier"]]
    ep, obs, _ = play(env, TASK, 0, " 2")
    assert ep.thinker_prompt() == "Facts: F=7 C=5 A=2. Q: F+C? S:fair\nT:"
    knows = "2" if ep.knows else "?"
    hint = "" if ep.dropped else " 2"
    assert obs.text == f"Facts: F=? C=? A=?. Q: F+C? K={knows} S:fair\nT:{hint}\nA:"


def test_lost_message_costs_and_reaches_no_one():
    env = make()
    seen = {True: 0, False: 0}
    for seed in range(400):
        ep, obs, result = play(env, TASK, seed, " 2", solver=" #5")
        seen[ep.dropped] += 1
        assert obs.text.endswith("\nT:\nA:" if ep.dropped else "\nT: 2\nA:")
        assert result.reward == pytest.approx(-0.15) and result.info["dropped"] == ep.dropped
        assert result.info["msg_help"]  # the class of what the Thinker wrote, delivered or not
    assert abs(seen[True] / 400 - 0.4) < 0.06


def test_dyad_info_labels():
    env = make()
    for seed in range(200):
        ep, _, r = play(env, TASK, seed, " 7")  # fair tier: help needed; a wrong hint
        assert r.info["needed"] and r.info["msg_help_needed"] is False and "msg_silent_unneeded" not in r.info
        assert r.info["msg_best_response"] is False
        assert r.info["solo_value"] == (1.0 if ep.knows else 0.1)
        assert r.info["team_reward"] == r.reward
        if ep.knows and not ep.dropped:  # a wrong readable hint the Solver did not need: did it copy?
            assert r.info["solver_copied"] == ep.follows  # the demonstrator copies with follow_known
        else:
            assert "solver_copied" not in r.info
    strong = {**TASK, "p_see": 0.9, "cue": "strong"}
    _, _, r = play(env, strong, 0, "")
    assert not r.info["needed"] and r.info["msg_silent_unneeded"] is True and "msg_help_needed" not in r.info
    assert r.info["msg_best_response"] is True
    _, _, r = play(env, strong, 0, " 2")
    assert r.info["msg_silent_unneeded"] is False and r.info["msg_best_response"] is False
    _, _, r = play(env, TASK, 0, " 2")  # fair tier: help is the best response
    assert r.info["msg_help_needed"] is True and r.info["msg_best_response"] is True


def test_free_riding_setting_unchanged_without_the_dyad_knobs():
    free = ThinkerSolverEnv(ThinkerSolverConfig(
        **{**DYAD, "cue_words": [], "drop": 0.0, "cost_per_char": 0.0}))
    task = {k: v for k, v in TASK.items() if k != "cue"}
    ep, obs, r = play(free, task, 0, " 2")
    assert obs.text.startswith("Facts: F=? C=? A=?. Q: F+C? K=") and "S:" not in obs.text
    assert "needed" not in r.info and "solo_value" not in r.info and not ep.dropped


def test_dyad_settings_are_checked():
    for bad in ({"cue_words": ["a", "b"]}, {"drop": 1.5}, {"cue_words": [], "drop": 0.4}):
        with pytest.raises(ValueError, match="env\\."):
            make(**bad)
