"""What a column offers follows its home arm's environment settings (#46): a setting that changes what
the tasks are (families, a defective pool) changes which methods apply there."""

from envs.benchmarks.textworld.env import TextWorldEnv
from envs.testbeds.chain_tasks import ChainTasksConfig, ChainTasksEnv
from experiments.compare_config import applicable, home_env, home_seeds, load_settings, matrix


def test_offers_for_follows_the_families_setting():
    for cls in (ChainTasksEnv, TextWorldEnv):
        # (chain_tasks' class also offers the audit, which a default instance, without defects, does not)
        assert cls.offers_for({}) == cls.offers - {"env_pool_with_audit"}
        assert "task_families" not in cls.offers
        assert cls.offers_for({"families": True}) == frozenset({"task_families"})
    assert ChainTasksEnv(ChainTasksConfig()).offers == ChainTasksEnv.offers_for({"families": False})


def test_applicable_reads_the_settings_when_given():
    assert not applicable("skillrise", "chain_tasks") and applicable("iapo", "chain_tasks")
    assert applicable("skillrise", "chain_tasks", {"families": True})
    assert not applicable("iapo", "chain_tasks", {"families": True})  # family tickets emit no provenance
    assert applicable("iapo", "chain_tasks", {"families": False})


def test_each_column_is_its_home_arms_environment():
    settings = load_settings()
    # a column without a cpu budget (terminal-smollm2: River's small scale only) at the scale it has
    scale = {tag: "cpu" if home_seeds(s, "cpu") is not None else "small" for tag, s in settings.items()}
    assert [tag for tag, at in scale.items() if at != "cpu"] == ["terminal-smollm2"]
    envs = {tag: home_env(s, scale[tag]) for tag, s in settings.items()}
    assert all(e is not None and e["name"] == settings[tag].env for tag, e in envs.items())
    assert (envs["terminal-smollm2"] or {}).get("tag") == "terminal-smollm2"
    applies = matrix(["grpo", "skillrise"], settings)
    assert applies["skillrise", "skill_families"] and not applies["skillrise", "chain_tasks"]
    assert all(applies["grpo", tag] for tag in settings)


def test_a_pool_offers_its_audit_only_with_defects_in_it():
    from envs.testbeds.arith import ArithEnv
    from envs.testbeds.service_desk import ServiceDeskEnv
    for cls in (ArithEnv, ServiceDeskEnv, ChainTasksEnv):
        assert "env_pool_with_audit" not in cls.offers_for({"share_weak": 0.0})
        assert "env_pool_with_audit" in cls.offers_for({"share_weak": 0.25})
    assert not applicable("river", "arith", {"share_reject": 0.0})
    assert applicable("river", "arith", {"share_reject": 0.1})
    applies = matrix(["river"], load_settings())
    # the defective pools are the columns whose overrides choose them (#46); arith's and chain_tasks' own
    # columns stay clean;
    # terminal-smollm2 (no cpu budget, so no cpu cells) is the class's offers at cpu
    assert [t for (m, t), a in applies.items() if a] == ["terminal", "arith-defects", "chain_tasks-defects",
                                                         "service_desk-defects", "terminal-smollm2"]
