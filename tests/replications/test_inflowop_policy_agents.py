"""InFlowOp's policy agents (issue #22): LoRA adapters of the suite's model as pool agents.

The contract path and the batching are checked with answer functions written by hand (no model);
the adapters' warm start, its cache and the play path with the tiny model (a few SFT steps)."""

import json
import random
from dataclasses import replace

import pytest
import torch

from common.config import ModelConfig, RunConfig, SFTConfig
from common.engines.base import SamplingParams
from common.engines.hf import HFEngine
from common.episode import tasks_of
from common.method import RunView
from common.policy import Policy
from common.warmstart import warm_started_base
from envs.testbeds.braid import OPS, BraidConfig, BraidEnv, BraidTask, Node, apply_op, render
from replications.inflowop import policy_agents
from replications.inflowop.agents import (
    POOL,
    AgentCard,
    Ask,
    Prior,
    Profile,
    model_agent,
    read_output,
    reliability,
)
from replications.inflowop.execute import Executor, drive
from replications.inflowop.method import InFlowOp, InFlowOpConfig, pool_of, prepare, warm_up
from replications.inflowop.plan import Subtask, Weights
from replications.inflowop.policy_agents import AgentTraining, Answerer, add_agents, measure_competence

LISTER = model_agent(["list"])


def chain() -> BraidTask:
    """x0 -> sort (0) -> rev (1) -> sum (2)."""
    return BraidTask(0, ([5, 1, 3],),
                     (Node(0, "sort", 0, ("x0",)), Node(1, "rev", 0, (0,)), Node(2, "sum", 0, (1,))))


def oracle_for(categories, garbage="not a value"):
    """An answer function that computes every operation of `categories` right and answers the others
    with `garbage`."""

    def answer(asks):
        texts = []
        for ask in asks:
            head, ins = ask.prompt[len("OP "):].split("\nOUT:")[0].split(" | ", 1)
            op, *k = head.split()
            inputs = [read_output(x, p) for x, p in zip(ins.split(" | "), _producers(op), strict=True)]
            right = apply_op(op, int(k[0]) if k else 0, inputs)
            texts.append(" " + render(right) if OPS[op].category in categories else garbage)
        answer.batches.append(len(asks))
        return texts

    answer.batches = []
    return answer


def _producers(op):
    """An operation that outputs each input type of `op` (to parse the prompt's inputs back)."""
    by_type = {"list": "sort", "int": "sum", "str": "rev_s"}
    return [by_type[t] for t in OPS[op].inputs]


def test_model_agent_cards_declare_what_they_were_trained_on_and_bad_specs_fail():
    assert LISTER.card.declares == {"list"} and LISTER.trained_on == ("list",)
    assert ([a.name for a in pool_of(InFlowOpConfig(policy_agents=["list", "text+cipher"]))]
            == ["lora-list", "lora-text+cipher"])
    with pytest.raises(ValueError, match="categories"):
        model_agent(["lists"])


def test_a_policy_agents_output_goes_through_the_contracts_and_malformed_text_is_a_violation():
    t = chain()
    plan = [Subtask(frozenset({v}), LISTER.name) for v in range(3)]
    for text, ok in ((None, True), ("5 3 1 x", False), ("", False), ("1 3", False)):
        answer = oracle_for({"list"}) if text is None else (lambda asks, text=text: [text] * len(asks))
        profile = Profile()
        trace = Executor(t, {LISTER.name: LISTER}, [LISTER.card], lambda c, cat: 0.9, Weights(0, 0),
                         random.Random(0), repair="none", profile=profile).run(plan, answer)
        assert (trace.violations == 0) is ok
        assert (trace.values[2] == t.truth()[2]) is ok
        s, n = profile.get(LISTER.name, "list")
        assert n == 3 and (s == 3) is ok  # its own runs, as the contracts judged them
    # "1 3" is a well-formed list that sort's output contract rejects (length 2 of 3): a contract, not a
    # parse, catches it


def test_a_plan_with_a_policy_agent_but_no_answer_fails_clearly():
    t = chain()
    with pytest.raises(ValueError, match="no answer function"):
        Executor(t, {LISTER.name: LISTER}, [LISTER.card], lambda c, cat: 0.9, Weights(0, 0),
                 random.Random(0)).run([Subtask(frozenset({0, 1, 2}), LISTER.name)])


def test_drive_batches_the_operations_of_many_runs_and_a_merged_call_reads_its_own_outputs():
    t = chain()
    answer = oracle_for({"list"})
    runs = [Executor(t, {LISTER.name: LISTER}, [LISTER.card], lambda c, cat: 0.9, Weights(0, 0),
                     random.Random(i), repair="none").steps([Subtask(frozenset({0, 1, 2}), LISTER.name)])
            for i in range(5)]
    traces = drive(runs, answer)
    assert all(tr.values == {2: t.truth()[2]} and tr.calls == 1 for tr in traces)
    assert answer.batches == [5, 5, 5]  # three operations in one call, each a batch over the five runs


def test_profiles_of_policy_agents_come_from_their_own_runs_never_the_truth(monkeypatch):
    env = BraidEnv(BraidConfig(train_size=32, heldout_size=16, dev_size=8))
    tasks = [BraidTask.parse(json.loads(r["task"])) for r in env.task_set()["train"]]
    models = [LISTER, model_agent(["num"])]
    answer = oracle_for({"list"})  # lora-list is right on lists; both answer everything else with garbage
    monkeypatch.setattr(BraidTask, "truth",
                        lambda self: (_ for _ in ()).throw(AssertionError("the ground truth was read")))
    profile = warm_up(tasks, Profile(), random.Random(0), models, answer, batch=8)
    assert max(answer.batches) > 1  # batched across tasks
    prior = Prior()
    s, n = profile.get("lora-list", "list")
    assert n > 0 and s / n > 0.8
    s, n = profile.get("lora-num", "num")
    assert n > 0 and s == 0  # garbage: every run broke its contract
    assert (reliability(LISTER.card, "list", profile, prior)
            > reliability(models[1].card, "num", profile, prior))
    monkeypatch.undo()
    # the dev-split measure (truth, reporting only)
    competence = measure_competence(tasks, POOL[:1], models, answer)
    assert (competence["lora-list"]["list"]["accuracy"] == 1.0
            and competence["lora-num"]["num"]["accuracy"] == 0.0)
    assert competence["lora-num"]["num"]["malformed"] == 1.0 and competence["lister"]["list"]["n"] > 0


def test_the_optimizer_plans_with_policy_agents_like_any_agent():
    t = chain()
    profile = Profile()
    for _ in range(50):  # lora-list is never wrong in its own runs; the scripted list agent is
        profile.record("lora-list", ["list"], True)
        profile.record("lister", ["list"], False)
    cfg = InFlowOpConfig(policy_agents=["list"], create=False)
    _, plan = prepare(t, cfg, profile, random.Random(0), pool_of(cfg))
    assert {s.agent for s in plan} == {"lora-list"}


# ---- the model: the tiny model, a few SFT steps -------------------------------------------------------
TINY = ModelConfig(hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2, num_kv_heads=1,
                   head_dim=16, vocab_size=300, max_length=256)


def tiny_policy(tmp_path):
    env = BraidEnv(BraidConfig(train_size=16, heldout_size=8, dev_size=4))
    tokenizer, base, _ = warm_started_base(TINY, SFTConfig(enabled=False), env, 0, str(tmp_path))
    return env, Policy(base, tokenizer, TINY, env.roles)


def lora_weights(policy, adapter):
    return {n.replace(f".{adapter}.", "."): p.detach().clone() for n, p in policy.model.named_parameters()
            if "lora_" in n and f".{adapter}." in n}


def test_adapters_for_two_categories_differ_and_the_warm_start_is_cached(tmp_path, monkeypatch):
    torch.set_num_threads(1)
    env, policy = tiny_policy(tmp_path)
    agents = [LISTER, model_agent(["text", "cipher"])]
    training = AgentTraining(steps=3, batch_size=4, demos=16)
    own = lora_weights(policy, "policy")
    records = add_agents(policy, agents, env, TINY, SFTConfig(enabled=False), training, str(tmp_path))
    assert [r["cached"] for r in records.values()] == [False, False]
    assert records["lora-list"]["categories"] == ["list"] and records["lora-list"]["pairs"] > 0
    a, b = lora_weights(policy, "lora-list"), lora_weights(policy, "lora-text+cipher")
    # trained on different operations
    assert a.keys() == b.keys() and any(not torch.equal(a[k], b[k]) for k in a)
    # trained at all (B starts at zero)
    assert any(k.endswith("lora_B.weight") and a[k].abs().sum() > 0 for k in a)
    # the run's adapter untouched
    assert all(torch.equal(v, lora_weights(policy, "policy")[k]) for k, v in own.items())
    assert {n for n, p in policy.model.named_parameters() if p.requires_grad} == {
        n for n, _ in policy.model.named_parameters() if "lora_" in n and ".policy." in n}

    def no_training(*args, **kwargs):
        raise AssertionError("the warm start was redone")

    monkeypatch.setattr(policy_agents, "sft", no_training)
    _, again = tiny_policy(tmp_path)
    records = add_agents(again, agents, env, TINY, SFTConfig(enabled=False), training, str(tmp_path))
    assert [r["cached"] for r in records.values()] == [True, True]
    assert all(torch.equal(v, lora_weights(again, "lora-list")[k]) for k, v in a.items())
    with pytest.raises(AssertionError, match="redone"):  # another category is another warm start
        add_agents(again, [model_agent(["num"])], env, TINY, SFTConfig(enabled=False), training,
                   str(tmp_path))
    real_code = policy_agents.warm_start_code
    monkeypatch.setattr(policy_agents, "warm_start_code",
                        lambda e: real_code(e) | {"envs.testbeds.braid": "edited"})
    with pytest.raises(AssertionError, match="redone"):  # an edit of braid's code is another warm start too
        add_agents(again, agents, env, TINY, SFTConfig(enabled=False), training, str(tmp_path))


class FakeRollout:
    def __init__(self, engine, tokenizer):
        self.engine, self.tokenizer, self.chat = engine, tokenizer, None


def test_play_with_policy_agents_measures_competence_and_batches_generation(tmp_path):
    torch.set_num_threads(1)
    env, policy = tiny_policy(tmp_path)
    cfg = InFlowOpConfig(policy_agents=["list", "num"], agent_steps=2, agent_batch_size=4, agent_demos=8,
                         warmup_tasks=4, play_batch=8, agent_max_tokens=8)
    run = replace(RunConfig(), model=TINY, work_dir=str(tmp_path), seed=0)
    method = InFlowOp(cfg, RunView.of(run, env))
    tasks = tasks_of(env.task_set()["heldout"])
    groups = method.play(FakeRollout(HFEngine(policy), policy.tokenizer), tasks, 0, mode="eval")
    assert len(groups) == len(tasks) and all(len(g.episodes) == method.group_size(tasks[0], "eval")
                                             for g in groups)
    info = groups[0].episodes[0].info
    assert 0.0 <= info["competence_lora-list_list"] <= 1.0 and "competence_lora-num_text" in info
    assert 0.0 <= info["policy_share"] <= 1.0 and 0.0 <= info["policy_share_planned"] <= 1.0
    assert set(method.competence) == {"lora-list", "lora-num"}
    assert method.competence["lora-num"]["num"]["n"] == sum(
        OPS[n.op].category == "num"
        for r in env.task_set()["dev"] for n in BraidTask.parse(json.loads(r["task"])).nodes)


def test_answerer_makes_one_generate_call_per_batch(tmp_path):
    torch.set_num_threads(1)
    env, policy = tiny_policy(tmp_path)
    add_agents(policy, [LISTER], env, TINY, SFTConfig(enabled=False),
               AgentTraining(steps=1, batch_size=2, demos=4), str(tmp_path))
    answer = Answerer(HFEngine(policy), policy.tokenizer,
                      SamplingParams(temperature=0.0, max_new_tokens=4, stop=("\n",)), 0)
    texts = answer([Ask(LISTER.name, LISTER.adapter, f"OP len | {i} 2\nOUT:") for i in range(6)])
    assert len(texts) == 6 and answer.calls == 1 and answer.asks == 6
    assert all(read_output(t, "len") is None or isinstance(read_output(t, "len"), int) for t in texts)


def test_bad_policy_agent_settings_fail_before_the_run():
    from common.fit import resolve
    from experiments.run import compose
    from replications import METHODS

    with pytest.raises(ValueError, match="categories"):
        resolve(compose("inflowop", ["+pool=policy", "method.policy_agents=[lists]"]), METHODS)
    with pytest.raises(ValueError, match="twice"):
        resolve(compose("inflowop", ["+pool=policy", "method.policy_agents=[list,list]"]), METHODS)
    with pytest.raises(ValueError, match="agent_steps"):
        resolve(compose("inflowop", ["+pool=policy", "method.agent_steps=0"]), METHODS)
    r = resolve(compose("inflowop", ["+pool=policy", "method.single_agent=lora-list"]), METHODS)
    assert r.method.cfg.policy_agents == ["list", "num", "text+cipher"]


def test_policy_agent_helpers_are_public_api_of_method():
    from replications.inflowop.method import model_agent as exported

    assert exported(["num"]).card == AgentCard("lora-num", frozenset({"num"}), 1.0, 0.2)
