"""thinker_solver over arith's tasks (`env.tasks: arith`, #46): the prompts, how a message is read, rewards
worked by hand (joint, solo, paired, empty guidance), the demonstrator, arith's own splits, the oracle and
random check."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest
import yaml

from common.config import build_dataclass
from envs.api.check import ORACLE_MIN, RANDOM_MAX, oracle_policy, play, random_policy
from envs.testbeds.arith import ArithEnv
from envs.testbeds.thinker_solver import ThinkerSolverConfig, ThinkerSolverEnv
from envs.testbeds.thinker_solver_arith import read_working

CONF = Path(__file__).resolve().parents[3] / "common" / "conf" / "env"
TASK = {"start": 7, "steps": [["+", 5], ["-", 3], ["*", 2]]}  # 7+5=12 12-3=9 9*2=18
WORKING = " 7+5=12 12-3=9 9*2=18"  # 20 characters once stripped


def env(**settings) -> ThinkerSolverEnv:
    return ThinkerSolverEnv(ThinkerSolverConfig(tasks="arith", train_size=30, heldout_size=9, **settings))


def from_file(name: str, cls=ThinkerSolverEnv, **over):
    settings = {**yaml.safe_load((CONF / f"{name}.yaml").read_text()), **over}
    return cls(build_dataclass(cls.config_class, settings, "env"))


def play_out(e, actions, variant="main", task=TASK):
    ep = e.new_episode(task, random.Random(0), variant)
    obs, seen, results = ep.start(), [], []
    for a in actions:
        seen.append((obs.role, obs.text))
        results.append(ep.step(a))
        obs = results[-1].next
    assert obs is None
    return seen, results


def test_a_message_is_read_by_its_last_number():
    assert read_working("7+5=12 12*2=24") == 24 and read_working(" 24 ") == 24
    assert read_working("12 + 3 = 15") == 15
    for unreadable in ("", " ", "the answer is 5", "5=", "x=5", "١٦", "24\n25", "9" * 19, "=" * 1000):
        assert read_working(unreadable) is None, unreadable
    start = time.monotonic()
    for hostile in ("1=" * 50_000, "9" * 100_000 + "=", "1 " * 50_000 + "x"):
        assert read_working(hostile) is None
    assert time.monotonic() - start < 1.0  # linear, no backtracking


def test_the_joint_play_by_hand():
    """Cost 0.02 a character: the working (20 characters) costs 0.4, a bare value 0.04, silence nothing."""
    e = env()
    seen, (thinker, solver) = play_out(e, [WORKING, " #18"])
    assert seen == [("thinker", "Q: 7+5-3*2\nT:"), ("solver", f"Q: 7+5-3*2\nT:{WORKING}\nA:")]
    assert thinker.reward == pytest.approx(-0.4) and thinker.events == []
    assert solver.success and solver.reward == pytest.approx(0.6)
    assert solver.info == {"ops": 3, "msg_help": True, "msg_wrong": False, "msg_silent": False,
                           "msg_other": False, "msg_chars": 20, "thinker_cost": pytest.approx(0.4)}
    assert play_out(e, [" 18", " #18"])[1][1].reward == pytest.approx(0.96)
    assert play_out(e, ["", " #18"])[1][1].reward == 1.0
    # a wrong working (the last operation forgotten) that the Solver copies: wrong, and it costs
    _, (_, solver) = play_out(e, [" 7+5=12 12-3=9 9*2=9", " #9"])
    assert not solver.success and solver.reward == pytest.approx(-0.38) and solver.info["msg_wrong"]
    # an unreadable message is flagged and passed on as written
    seen, (thinker, solver) = play_out(e, [" think harder", " #18"])
    assert [ev.kind for ev in thinker.events] == ["invalid_action"] and solver.info["msg_other"]
    assert seen[1][1] == "Q: 7+5-3*2\nT: think harder\nA:" and solver.reward == pytest.approx(1 - 0.24)
    # no answer from the Solver: an invalid action, success 0
    _, (_, solver) = play_out(e, ["", "18"])
    assert solver.reward == 0.0 and [ev.kind for ev in solver.events] == ["invalid_action"]


def test_solo_against_joint_by_hand():
    """Alone the Solver sees an empty Thinker line and pays nothing; `paired` plays it alone, then with the
    Thinker, and records what the Thinker changed; `empty_guidance` makes the Thinker pay for nothing."""
    e = env(cost_per_char=0.0)
    seen, (solo,) = play_out(e, [" #17"], variant="solo")
    assert seen == [("solver", "Q: 7+5-3*2\nT:\nA:")] and solo.reward == 0.0 and solo.info == {"ops": 3}
    assert play_out(e, [" #18"], variant="solo")[1][0].reward == 1.0
    assert play_out(e, [WORKING, " #18"])[1][1].reward == 1.0  # the joint play the solo one missed
    seen, results = play_out(e, [" #17", WORKING, " #18"], variant="paired")
    assert [r for r, _ in seen] == ["solver", "thinker", "solver"] and seen[2][1].endswith(f"T:{WORKING}\nA:")
    info = results[-1].info
    assert results[-1].reward == 1.0 and info["help"] and not info["hurt"] and info["contribution"] == 1
    assert (info["solo_correct"], info["joint_correct"]) == (False, True)
    _, results = play_out(e, [" #18", " 7+5=12 12-3=9 9*2=9", " #9"], variant="paired")
    assert results[-1].info["hurt"] and results[-1].info["contribution"] == -1 and results[-1].reward == 0.0
    seen, (_, solver) = play_out(env(), [WORKING, " #18"], variant="empty_guidance")
    assert seen[1][1] == "Q: 7+5-3*2\nT:\nA:" and solver.reward == pytest.approx(0.6)


@pytest.mark.parametrize("kind, message, answer", [
    ("help", WORKING, " #18"), ("silent", "", " #18"), ("wrong", " 7+5=12 12-3=9 9*2=9", " #9")])
def test_the_demonstrator(kind, message, answer):
    """The Thinker writes the working, nothing, or the working with the last operation forgotten; the Solver
    copies a readable hint, else answers directly; alone it is right."""
    mix = {f"expert_{k}": float(k == kind) for k in ("help", "silent", "wrong")}
    e = env(**mix)
    ep = e.new_episode(TASK, random.Random(0))
    ep.start()
    assert ep.expert_action() == message
    ep.step(message)
    assert ep.expert_action() == answer
    solo = e.new_episode(TASK, random.Random(0), "solo")
    solo.start()
    assert solo.expert_action() == " #18"
    # where forgetting the last operation leaves the answer (4*1 = 4), the slip is another value
    slip = e.new_episode({"start": 4, "steps": [["*", 1]]}, random.Random(0))
    assert slip.expert_wrong_value != 4 and 0 <= slip.expert_wrong_value <= 99


def test_the_tasks_are_arith_s_own_and_the_setting_is_refused_where_it_cannot_work():
    mine, arith = from_file("thinker_solver_arith"), from_file("arith", ArithEnv)
    assert mine.tiers == arith.tiers == (2, 3, 4)
    for split in ("train", "heldout", "demo", "dev"):
        assert list(mine.task_set()[split]["task"]) == list(arith.task_set()[split]["task"]), split
    assert mine.cfg.tag == "thinker_solver-arith" and "two_role_dialogue" in mine.offers
    assert "solo" in mine.variants()
    for bad, match in [({"tasks": "maths"}, "env.tasks"), ({"see_probs": [0.5]}, "one probability per"),
                       ({"follow_known": 0.3}, "env.tasks"), ({"max_value": 0}, "env.max_value"),
                       ({"min_ops": 3, "max_ops": 2}, "min_ops")]:
        with pytest.raises(ValueError, match=match):
            ThinkerSolverEnv(ThinkerSolverConfig(**{"tasks": "arith", **bad}))


@pytest.mark.parametrize("name", ["thinker_solver_arith", "thinker_solver_arith_freeride"])
def test_the_oracle_passes_and_a_random_policy_fails(name):
    """`make check-envs`' bar on the setting's own config file (the oracle: the Thinker always helps)."""
    e = from_file(name, **ThinkerSolverEnv.oracle_settings)
    rows = [json.loads(t) for t in e.task_set()["train"]["task"][:32]]
    oracle = [play(e, t, oracle_policy, i) for i, t in enumerate(rows)]
    randoms = [play(e, t, random_policy, i) for i, t in enumerate(rows)]
    assert sum(oracle) / len(oracle) >= ORACLE_MIN and sum(randoms) / len(randoms) <= RANDOM_MAX
    assert sum(oracle) / len(oracle) == 1.0  # no message cost in this setting


def test_the_free_riding_setting_keeps_the_tasks_and_hides_the_problem_per_episode():
    """`see_probs` on arith (thinker_solver_arith_freeride.yaml): every split's tasks are
    thinker_solver_arith's with `p_see` added by the number of operations (2: 0.9, 3: 0.5, 4: 0.1); the hidden
    draw comes after the others, so a play without the setting draws as before, and a solo play seeded like
    the joint one gets the same draw."""
    plain, mine = from_file("thinker_solver_arith"), from_file("thinker_solver_arith_freeride")
    assert mine.cfg.tag == "thinker_solver-arith-freeride" and mine.tiers == (2, 3, 4)
    for split in ("train", "heldout", "demo", "dev"):
        rows = [json.loads(t) for t in mine.task_set()[split]["task"]]
        want = {2: 0.9, 3: 0.5, 4: 0.1}
        assert all(r.pop("p_see") == want[len(r["steps"])] for r in rows), split
        assert rows == [json.loads(t) for t in plain.task_set()[split]["task"]], split
    hidden = {**TASK, "p_see": 0.5}
    # the draws of random.Random(s): u (the demonstrator's kind), the other value, then the hidden draw
    draws = {}
    for s in range(40):
        r = random.Random(s)
        r.random(), r.choice([x for x in range(21) if x != 18])
        draws[s] = (r.random() < 0.5, r.randrange(21))
    shown = next(s for s in draws if draws[s][0])
    hid = next(s for s in draws if not draws[s][0] and draws[s][1] != 18)
    for seed, sees in ((shown, True), (hid, False)):
        for variant in ("main", "solo", "paired"):
            ep = mine.new_episode(hidden, random.Random(seed), variant)
            assert ep.sees is sees and ep.expert_guess == draws[seed][1]
        ep = mine.new_episode(hidden, random.Random(seed), "main")
        assert ep.start().text == "Q: 7+5-3*2\nT:"  # the Thinker always sees the problem
        result = ep.step("")
        assert result.next.text == ("Q: 7+5-3*2" if sees else "Q: ?") + "\nT:\nA:"
        # the demonstrator Solver alone: the value when shown, its drawn guess when not
        assert ep.expert_action() == f" #{18 if sees else draws[seed][1]}"
        done = ep.step(" #18")
        assert done.success and done.info == {"ops": 3, "sees": sees, "p_see": 0.5, "msg_help": False,
                                               "msg_wrong": False, "msg_silent": True, "msg_other": False,
                                               "msg_chars": 0, "thinker_cost": 0.0}
    # not shown, the working tells it: the demonstrator copies a readable hint
    ep = mine.new_episode(hidden, random.Random(hid), "main")
    ep.start(), ep.step(WORKING)
    assert ep.expert_action() == " #18"
    # without the setting the episode draws as before: same demonstrator choice and slip, always shown
    a = plain.new_episode(TASK, random.Random(3))
    b = mine.new_episode(hidden, random.Random(3))
    assert (a.expert_kind, a.expert_wrong_value) == (b.expert_kind, b.expert_wrong_value)
    assert a.sees and a.expert_guess is None and "sees" not in play_out(plain, ["", " #18"])[1][1].info
    for bad, match in [({"see_probs": [0.9, 0.5]}, "one probability per number of operations"),
                       ({"see_probs": [0.9, 0.5, 0.1], "cue_words": ["a", "b", "c"]}, "env.tasks"),
                       ({"question": "sum", "see_probs": [0.9, 0.5, 0.1]}, "env.tasks")]:
        with pytest.raises(ValueError, match=match):
            ThinkerSolverEnv(ThinkerSolverConfig(**{"tasks": "arith", "min_ops": 2, "max_ops": 4, **bad}))
