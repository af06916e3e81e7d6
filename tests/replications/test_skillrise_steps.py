"""SkillRise's equal step sizes (issue #41) against hand-computed cases: the std normalization of the chain
arms, the per-role token normalization, and the oracle-document arm's play."""

from __future__ import annotations

import random

import numpy as np
import pytest

from common.credit import grpo
from common.episode import Episode, Group, Turn, tasks_of
from envs.testbeds.skill_families import SkillFamiliesConfig, SkillFamiliesEnv
from replications.skillrise.method import SkillRise, SkillRiseConfig, grouped_advantages
from tests.helpers import run_view


def _method(arm: str = "skillrise", group_size: int = 2, layout: str = "induction", **kw) -> SkillRise:
    env = SkillFamiliesEnv(SkillFamiliesConfig(train_size=30, heldout_size=6, dev_size=6, demo_size=10,
                                               layout=layout))
    return SkillRise(SkillRiseConfig(arm=arm, **kw), run_view(env, group_size=group_size, tasks_per_step=2,
                                                              eval_k=2))


def _turns(role: str, tokens: int, turns: int = 1) -> list[Turn]:
    return [Turn(role, "policy", [0], [1] * tokens, [0.0] * tokens, "") for _ in range(turns)]


def _groups(solve: list[list[float]], curate_own: list[list[float]], solve_tokens: int = 3,
            curate_tokens: int = 5) -> list[Group]:
    """One family as play_chains lays it out; each solve episode has 2 turns of `solve_tokens` tokens,
    each curate episode 1 turn of `curate_tokens`."""
    n, k = len(solve), len(solve[0])
    groups = []
    for p in range(k):
        eps = [Episode(f"t{p}", p + 2, _turns("solver", solve_tokens, 2), reward=solve[c][p],
                       success=solve[c][p] > 0) for c in range(n)]
        groups.append(Group(f"t{p}", p + 2, eps))
        if p < k - 1:
            eps = [Episode(f"t{p}/curate", p + 2, _turns("curator", curate_tokens), reward=curate_own[c][p],
                           tag="curate") for c in range(n)]
            groups.append(Group(f"t{p}/curate", p + 2, eps))
    return groups


def _adv(m: SkillRise, groups: list[Group]) -> list[list[float]]:
    return [[v["*"] for v in g] for g in m.credit(groups, 0).values]


def test_std_normalization_by_hand():
    # (1, 0, 0, 0): mean 0.25, sample std 0.5 -> (1.5, -0.5, -0.5, -0.5), as GRPO's estimator gives
    by_hand = pytest.approx([1.5, -0.5, -0.5, -0.5], abs=1e-5)
    assert grouped_advantages([1, 0, 0, 0], ["a"] * 4, std=True) == by_hand
    assert list(grpo(np.array([1.0, 0, 0, 0]))) == by_hand
    # (1, 0): std 0.7071 -> +-0.7071; weights still multiply; a key of one gets 0
    out = grouped_advantages([1, 0, 2.0, 2.0, 7.0], ["a", "a", "b", "b", "c"], [1, 1, 3, 3, 1], std=True)
    assert out == pytest.approx([0.70711, -0.70711, 0.0, 0.0, 0.0], abs=1e-4)


def test_chain_credit_with_std_equals_grpo_on_the_same_solve_group():
    m = _method("skillrise", advantage_norm="std")
    # 2 chains: solve 0 = (1, 0); GRPO's estimator on (1, 0): +-0.7071
    groups = _groups([[1, 0, 1], [0, 1, 1]], [[0, 0], [0, 0]])
    adv = _adv(m, groups)
    assert adv[0] == pytest.approx(list(grpo(np.array([1.0, 0.0]))))
    # curate 0: R_0 = (0.36, 0.96) -> centred (-0.3, 0.3), std 0.4243 -> -+0.7071
    assert adv[1] == pytest.approx([-0.70711, 0.70711], abs=1e-4)
    paper = _adv(_method("skillrise"), groups)  # the paper's: mean-centred only
    assert paper[0] == pytest.approx([0.5, -0.5]) and paper[1] == pytest.approx([-0.3, 0.3])


def test_per_role_token_normalization_by_hand():
    m = _method("skillrise", token_norm="role")
    groups = _groups([[1, 0, 1], [0, 1, 1]], [[0, 0], [0, 0]], solve_tokens=3, curate_tokens=5)
    # solve: 3 groups x 2 episodes x 2 turns x 3 tokens = 36; curate: 2 x 2 x 5 = 20; N = 56
    credit = m.credit(groups, 0)
    assert credit.metrics["token_scale_solve"] == pytest.approx(56 / 36)
    assert credit.metrics["token_scale_curate"] == pytest.approx(56 / 20)
    adv = [[v["*"] for v in g] for g in credit.values]
    assert adv[0] == pytest.approx([0.5 * 56 / 36, -0.5 * 56 / 36])
    assert adv[1] == pytest.approx([-0.3 * 56 / 20, 0.3 * 56 / 20])
    # the trainer's token mean: sum of A over a role's tokens / N = that role's own token mean of the
    # unscaled advantages (what GRPO's token mean is over its solve tokens alone)
    solve_sum = sum(a * 6 for g in (0, 2, 4) for a in adv[g])  # 6 tokens per solve episode
    plain = _adv(_method(), groups)
    assert solve_sum / 56 == pytest.approx(sum(a * 6 for g in (0, 2, 4) for a in plain[g]) / 36)
    curate_sum = sum(a * 5 for g in (1, 3) for a in adv[g])
    assert abs(curate_sum) < 1e-12  # centred; its squares carry the check below
    sq = sum((a * 5) ** 2 for g in (1, 3) for a in adv[g]) / 56 ** 2
    sq_own = sum((a * 5) ** 2 for g in (1, 3) for a in plain[g]) / 20 ** 2
    assert sq == pytest.approx(sq_own)


def test_grpo_arm_is_unchanged_by_the_step_size_settings():
    eps = [Episode("t", 2, _turns("solver", 3), reward=r, success=r > 0) for r in (1, 0, 0)]
    groups = [Group("t", 2, eps)]
    plain = _method("grpo").credit(groups, 0)
    tuned = _method("grpo", advantage_norm="std", token_norm="role").credit(groups, 0)
    assert plain.kind == tuned.kind == "reward" and plain.values == tuned.values


class OracleRollout:
    """Plays every spec with the demonstrator (slip 0), recording each first prompt."""

    rank_salt = ""

    def __init__(self, env):
        self.env, self.prompts = env, []

    def play(self, specs, step, salt=""):
        out = []
        for k, spec in enumerate(specs):
            ep = self.env.new_episode(spec.task.data, random.Random(k), spec.variant)
            obs = ep.start()
            self.prompts.append((spec.task.tier, spec.variant, obs.text))
            while obs is not None:
                r = ep.step(ep.expert_action())
                obs = r.next
            out.append(Episode(spec.task.id, spec.task.tier, reward=r.reward, success=r.success, info=r.info,
                               tag=spec.tag))
        return out


def test_the_oracle_arm_reads_the_right_document_and_plays_no_curate_turn():
    m = _method("oracle")
    m.env.cfg.demo_slip = 0.0
    m.validate()
    tasks = m.tasks(tasks_of(m.env.task_set()["train"]), 0, random.Random(0))
    rollout = OracleRollout(m.env)
    groups = m.play(rollout, tasks, 0, "train")  # type: ignore[arg-type]
    assert [g.tier for g in groups] == [2, 3, 4, 2, 3, 4]
    assert all(e.tag == "main" for g in groups for e in g.episodes)
    order = {t.data["family"]: t.data["order"] for t in tasks}
    docs = [text.split("\n")[0] for _, _, text in rollout.prompts]
    # played position by position: every family's task 0, then task 1 (after task 0's plan 2), then 2
    expected = [f"skill: {' '.join(o[:n])}" for n in (0, 2, 3) for o in order.values() for _ in range(2)]
    assert [d.rstrip() for d in docs] == [d.rstrip() for d in expected]
    # the demonstrator follows a right document: tasks 1 and 2 always succeed (task 0 has none: a search)
    assert all(e.success for g in groups if g.tier > 2 for e in g.episodes)
    credit = m.credit(groups, 0)
    assert credit.kind == "advantage"
    assert all(v["*"] == pytest.approx(0.0) for g, vs in zip(groups, credit.values, strict=True) if g.tier > 2
               for v in vs)
    evals = m.play(rollout, tasks, 0, "eval")  # type: ignore[arg-type]
    assert [g.tier for g in evals] == [2, 3, 4, 2, 3, 4] and not any("curate" in g.extra for g in evals)


def test_design_behaviours_label_curate_turns_only():
    from replications.skillrise.design import BEHAVIOURS

    right = Episode("t/curate", 2, _turns("curator", 3), tag="curate",
                    info={"doc_right": True, "doc_abstract": True})
    concrete = Episode("t/curate", 2, _turns("curator", 3), tag="curate", info={"doc_concrete": True})
    solve = Episode("t", 2, _turns("solver", 3), tag="main")
    label, abstract = BEHAVIOURS["curate_right_doc"], BEHAVIOURS["curate_abstract_doc"]
    assert (label(right, 0), label(concrete, 0), label(solve, 0)) == (True, False, None)
    assert (abstract(right, 0), abstract(concrete, 0), abstract(solve, 0)) == (True, False, None)
