"""SkillRise on chain_tasks' families (`env=chain_tasks +env.families=true`, envs/testbeds/chain_families.py):
the method's own chain loop on tickets (each curate turn's document in the next ticket's prompt, one group per
(family, position, role), the chain credit), the oracle arm's document, and the configs that compose."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from common.episode import Episode, tasks_of
from envs.testbeds.chain_tasks import ChainTasksConfig, ChainTasksEnv
from replications.skillrise.chain import oracle_doc
from replications.skillrise.method import SkillRise, SkillRiseConfig
from tests.helpers import run_view


def _env(**kw) -> ChainTasksEnv:
    base = {"families": True, "busy_rate": 0.0, "train_size": 12, "heldout_size": 3, "dev_size": 3}
    return ChainTasksEnv(ChainTasksConfig(**{**base, **kw}))


class DemonstratorRollout:
    """Plays every spec with the environment's demonstrator (oracle solves with `oracle=True`; the scripted
    curator), recording each first prompt."""

    rank_salt = ""

    def __init__(self, env, oracle: bool = False):
        self.env, self.oracle = env, oracle
        self.prompts: list[tuple[int, str, str]] = []  # (tier, variant, first observation)
        self.played: list[tuple[Any, int, dict[str, Any]]] = []  # (spec, seed, the episode's info)

    def play(self, specs, step, salt=""):
        out = []
        for k, spec in enumerate(specs):
            ep = self.env.new_episode(spec.task.data, random.Random(k), spec.variant)
            obs = ep.start()
            self.prompts.append((spec.task.tier, spec.variant, obs.text))
            while obs is not None:
                act = ep.oracle_action if self.oracle and spec.variant == "main" else ep.expert_action
                r = ep.step(act())
                obs = r.next
            out.append(Episode(spec.task.id, spec.task.tier, reward=r.reward, success=r.success, info=r.info,
                               tag=spec.tag))
            self.played.append((spec, k, r.info))
        return out

    def replay(self, data, variant, k):
        """The info of the same play (same seed) of `data`."""
        ep = self.env.new_episode(data, random.Random(k), variant)
        obs = ep.start()
        while obs is not None:
            r = ep.step(ep.expert_action())
            obs = r.next
        return r.info


def test_the_chain_code_plays_chain_tasks_families():
    """Solve with the oracle, curate with the scripted curator writing abstractly: each ticket after the first
    reads the steps the ticket before it made (= the oracle document), in its roles' words."""
    env = _env(demo_abstract=1.0, demo_concrete=0.0)
    m = SkillRise(SkillRiseConfig(arm="skillrise"), run_view(env, group_size=2, tasks_per_step=2, eval_k=1))
    m.validate()
    assert m.chain_length == 3
    tasks = m.tasks(tasks_of(env.task_set()["train"]), 0, random.Random(0))
    assert [t.tier for t in tasks] == [2, 3, 4] * 2
    assert len({t.data["family"] for t in tasks[:3]}) == len({t.data["family"] for t in tasks[3:]}) == 1
    rollout = DemonstratorRollout(env, oracle=True)
    groups = m.play(rollout, tasks, 0, "train")  # type: ignore[arg-type]
    assert [(g.tier, g.episodes[0].tag) for g in groups] == [(2, "main"), (2, "curate"), (3, "main"),
                                                            (3, "curate"), (4, "main")] * 2
    solve = [(tier, text.split("\n")[0]) for tier, variant, text in rollout.prompts if variant == "main"]
    assert all(line == "skill: " for tier, line in solve if tier == 2)
    by_tier = {tier: [t for t in tasks if t.tier == tier] for tier in (2, 3)}
    for tier, before in by_tier.items():  # 2 chains per family read the document of the ticket before
        expected = sorted(f"skill: {oracle_doc(t)}" for t in before for _ in range(2))
        assert sorted(line for t, line in solve if t == tier + 1) == expected
    assert oracle_doc(by_tier[2][0]) == " ".join(by_tier[2][0].data["order"][:2])
    assert all(e.success for g in groups for e in g.episodes)
    credit = m.credit(groups, 0)
    assert credit.kind == "advantage" and all(v["*"] == pytest.approx(0.0) for g in credit.values for v in g)
    assert credit.metrics["doc_right"] == 1.0 and credit.metrics["success_tier4"] == 1.0
    curate = [e for g in groups for e in g.episodes if e.tag == "curate"]
    assert all(e.info["doc_abstract"] and e.info["skill"].split()[0] in ("mail", "book") for e in curate)


def test_concrete_documents_do_not_carry_and_the_credit_sees_it():
    """The scripted curator writing names only: every later ticket is played exactly as without a
    document (the same seed makes the same calls and finds the same steps)."""
    env = _env(demo_abstract=0.0, demo_concrete=1.0)
    m = SkillRise(SkillRiseConfig(arm="skillrise"), run_view(env, group_size=2, tasks_per_step=2, eval_k=1))
    tasks = m.tasks(tasks_of(env.task_set()["train"]), 0, random.Random(0))
    rollout = DemonstratorRollout(env)
    groups = m.play(rollout, tasks, 0, "train")  # type: ignore[arg-type]
    curate = [e for g in groups for e in g.episodes if e.tag == "curate"]
    assert all(e.info["doc_concrete"] or e.info["doc_empty"] for e in curate)
    assert not any(e.info["doc_right"] for e in curate)
    later = [(spec, k, info) for spec, k, info in rollout.played
             if spec.variant == "main" and spec.task.tier > 2]
    assert len(later) == 8 and any(spec.task.data["skill"] for spec, _, _ in later)
    for spec, k, info in later:
        assert info == rollout.replay({**spec.task.data, "skill": ""}, "main", k)


def test_the_oracle_arm_reads_the_procedure_and_plays_no_curate_turn():
    env = _env()
    m = SkillRise(SkillRiseConfig(arm="oracle"), run_view(env, group_size=2, tasks_per_step=2, eval_k=2))
    m.validate()
    tasks = m.tasks(tasks_of(env.task_set()["train"]), 0, random.Random(1))
    rollout = DemonstratorRollout(env)  # the demonstrator follows a right document without a miss
    groups = m.play(rollout, tasks, 0, "train")  # type: ignore[arg-type]
    assert [g.tier for g in groups] == [2, 3, 4, 2, 3, 4] and all(e.tag == "main" for g in groups
                                                                    for e in g.episodes)
    orders = {t.data["family"]: t.data["order"] for t in tasks}
    docs = [text.split("\n")[0] for _, _, text in rollout.prompts]
    assert docs == [f"skill: {' '.join(o[:n])}".rstrip() if n else "skill: " for n in (0, 2, 3)
                    for o in orders.values() for _ in range(2)]
    # the steps the document names are made, on this ticket's people; beyond them the demonstrator searches
    by_id = {t.id: t.data for t in tasks}
    for g in groups:
        data = by_id[g.task_id]
        name_of = dict(map(tuple, data["people"]))
        doc = data["order"][:g.tier - 1] if g.tier > 2 else []  # the first ticket reads no document
        named = [f"{s.split()[0]} {name_of[s.split()[1]]}" for s in doc]
        assert all(e.info["found"][:len(named)] == named for e in g.episodes)


def test_validate_needs_the_families_and_the_configs_compose():
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    plain = ChainTasksEnv(ChainTasksConfig(train_size=12, heldout_size=3, dev_size=3))
    with pytest.raises(ValueError, match="curate turn"):
        SkillRise(SkillRiseConfig(), run_view(plain, group_size=2, tasks_per_step=2)).validate()
    assert SkillRise.needs <= _env().offers and not SkillRise.needs <= ChainTasksEnv.offers
    sizes = ["env.train_size=60", "env.heldout_size=12", "env.dev_size=12", "env.demo_size=90"]
    for arm in ("skillrise", "skillrise-current", "grpo"):
        cfg = compose("skillrise", ["scale=smoke", f"arm={arm}", "env=chain_tasks", "+env.families=true",
                                    *sizes])
        r = resolve(cfg, METHODS)
        assert r.env.roles == ("solver", "curator") and r.method.chain_length == 3
        demo = r.env.task_set()["demo"]
        assert len(demo) == 30 * 5 and sum(json.loads(t).get("kind") == "curate" for t in demo["task"]) == 60
    with pytest.raises(ValueError, match="curate turn"):
        resolve(compose("skillrise", ["scale=smoke", "env=chain_tasks"]), METHODS)
