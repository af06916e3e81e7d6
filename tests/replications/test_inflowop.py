"""InFlowOp (replications/inflowop/): every formula against hand-computed cases, COALESCE against a
brute-force search, contracts, fault classification, repair and its cache, the arms, the configs."""

import json
import math
import random
from dataclasses import replace
from pathlib import Path

import pytest

from envs.testbeds.braid import BraidConfig, BraidEnv, BraidTask, Node
from replications.inflowop import execute
from replications.inflowop.agents import (
    COMPOSITION,
    CREATED,
    HANDOFF,
    POOL,
    AgentCard,
    Prior,
    Profile,
    ScriptedAgent,
    reliability,
)
from replications.inflowop.method import (
    ARMS,
    InFlowOpConfig,
    Subtask,
    Weights,
    best_agent,
    classify,
    coalesce,
    cost,
    greedy_split,
    latency,
    record,
    solve,
    warm_up,
)
from replications.inflowop.plan import handoffs_in, order, plan_cost, single_plan, template_plan

ROOT = Path(__file__).resolve().parents[2]
LIST = AgentCard("L", frozenset({"list"}), 1.0, 0.2)
NUM = AgentCard("N", frozenset({"num"}), 1.0, 0.2)
GEN = AgentCard("G", frozenset({"list", "num"}), 2.0, 0.5)


def chain() -> BraidTask:
    """x0 -> sort (0) -> sum (1) -> add 3 (2)."""
    return BraidTask(0, ([4, 1, 2],),
                     (Node(0, "sort", 0, ("x0",)), Node(1, "sum", 0, (0,)), Node(2, "add", 3, (1,))))


def rel_table(table: dict[tuple[str, str], float]):
    return lambda card, c: table[card.name, c]


# ---- eq. R and profiles ------------------------------------------------------------------------
def test_reliability_is_the_card_prior_updated_by_own_runs():
    prior = Prior(declared=0.9, undeclared=0.5, strength=4)
    assert reliability(LIST, "list", None, prior) == 0.9 and reliability(LIST, "num", None, prior) == 0.5
    p = Profile()
    for passed in (True, True, True, False):
        p.record("L", ["list", "list", "num"], passed)  # a category counts once per run
    assert p.get("L", "list") == (3, 4) and p.get("L", "num") == (3, 4) and p.get("N", "list") == (0, 0)
    assert reliability(LIST, "list", p, prior) == pytest.approx((3 + 4 * 0.9) / (4 + 4))  # 0.825
    assert reliability(LIST, "num", p, prior) == pytest.approx((3 + 4 * 0.5) / (4 + 4))  # 0.625


# ---- eq. C ---------------------------------------------------------------------------------------
def test_cost_by_hand():
    t = chain()
    rel = rel_table({("L", "list"): 0.9, ("L", "num"): 0.6})
    w = Weights(beta=0.1, gamma=2.0)
    assert (handoffs_in(t, [0]) == 0 and handoffs_in(t, [1]) == 1
            and handoffs_in(t, [1, 2]) == 1 and handoffs_in(t, [0, 1, 2]) == 0)
    assert latency(LIST, 2) == pytest.approx(1.4)
    # S = {0, 1} (sort, sum: both list) by L: -2 log 0.9 - log COMPOSITION, no handoff in; + 0.1 * 1.4
    assert cost(t, [0, 1], LIST, rel, w) == pytest.approx(-2 * math.log(0.9) - math.log(COMPOSITION) + 0.14)
    # S = {2} (add: num) by L: -log 0.6 - log HANDOFF (from node 1) + 0.1 * 1.2
    assert cost(t, [2], LIST, rel, w) == pytest.approx(-math.log(0.6) - math.log(HANDOFF) + 0.12)
    created = CREATED[0].card  # new-list: 1.5 + 0.3 per op + 2.0 to create; gamma charged
    assert cost(t, [0], created, lambda c, cat: 0.95, w) == pytest.approx(-math.log(0.95) + 0.1 * 3.8 + 2.0)


def test_best_agent_and_created_specialists_take_atomic_steps_of_their_category_only():
    t = chain()
    rel = rel_table({("L", "list"): 0.97, ("L", "num"): 0.6, ("N", "list"): 0.7, ("N", "num"): 0.97})
    w = Weights(0.0, 0.0)
    assert best_agent(t, [0], [LIST, NUM], rel, w)[0] == "L"
    assert best_agent(t, [2], [LIST, NUM], rel, w)[0] == "N"
    assert best_agent(t, [2], [LIST, NUM], rel, w, exclude={"N"})[0] == "L"
    with pytest.raises(ValueError, match="no agent left"):
        best_agent(t, [2], [LIST, NUM], rel, w, exclude={"N", "L"})
    new_list = CREATED[0].card
    assert best_agent(t, [0, 1], [new_list, LIST], lambda c, cat: 0.99 if c.created else 0.5, w)[0] == "L"
    assert best_agent(t, [0], [new_list, LIST], lambda c, cat: 0.99 if c.created else 0.5, w)[0] == "new-list"


# ---- COALESCE ----------------------------------------------------------------------------------
def test_coalesce_merges_when_one_agent_fits_and_splits_when_specialists_differ():
    t = chain()
    w = Weights(0.05, 0.0)
    same = rel_table({("L", "list"): 0.97, ("L", "num"): 0.97, ("N", "list"): 0.5, ("N", "num"): 0.5})
    plan = coalesce(t, [LIST, NUM], same, w)
    # saves 2 handoffs and 2 calls for 2 composition factors
    assert plan == [Subtask(frozenset({0, 1, 2}), "L")]
    apart = rel_table({("L", "list"): 0.97, ("L", "num"): 0.5, ("N", "list"): 0.5, ("N", "num"): 0.97})
    plan = coalesce(t, [LIST, NUM], apart, w)
    assert plan == [Subtask(frozenset({0, 1}), "L"), Subtask(frozenset({2}), "N")]
    assert (greedy_split(t, [LIST, NUM], apart, w)
            == [Subtask(frozenset({v}), a) for v, a in ((0, "L"), (1, "L"), (2, "N"))])


def _convex_partitions(task: BraidTask):
    """Every partition of the nodes into groups whose quotient graph is acyclic (brute force)."""
    nodes = [n.index for n in task.nodes]

    def partitions(items):
        if not items:
            yield []
            return
        first, rest = items[0], items[1:]
        for p in partitions(rest):
            for i in range(len(p)):
                yield [*p[:i], p[i] | {first}, *p[i + 1:]]
            yield [*p, frozenset({first})]

    for p in partitions(nodes):
        try:
            order(task, [Subtask(frozenset(g), "x") for g in p])
        except ValueError:
            continue
        yield [frozenset(g) for g in p]


def test_coalesce_never_costs_more_than_greedy_and_never_less_than_the_brute_force_optimum():
    env = BraidEnv(BraidConfig(train_size=40, heldout_size=8, dev_size=8))
    cards = [a.card for a in POOL]
    rng = random.Random(0)
    checked = 0
    for row in env.task_set()["train"]:
        t = BraidTask.parse(json.loads(row["task"]))
        if len(t.nodes) > 5:
            continue
        table = {(c.name, cat): rng.uniform(0.5, 0.99)
                 for c in cards for cat in ("list", "num", "text", "cipher")}
        rel, w = rel_table(table), Weights(rng.choice([0.0, 0.05, 0.2]), 0.0)
        merged, greedy = coalesce(t, cards, rel, w), greedy_split(t, cards, rel, w)
        assert sorted(v for s in merged for v in s.nodes) == [n.index for n in t.nodes]  # a partition
        order(t, merged)  # acyclic, ordered by data flow
        c_merged, c_greedy = plan_cost(t, merged, cards, rel, w), plan_cost(t, greedy, cards, rel, w)
        optimum = min(sum(best_agent(t, g, cards, rel, w)[1] for g in p) for p in _convex_partitions(t))
        assert optimum - 1e-9 <= c_merged <= c_greedy + 1e-9
        checked += 1
    assert checked >= 20


def test_order_respects_the_data_flow_and_refuses_a_cycle():
    t = chain()
    assert order(t, [Subtask(frozenset({2}), "a"), Subtask(frozenset({0}), "b"),
                     Subtask(frozenset({1}), "c")]) == [
        Subtask(frozenset({0}), "b"), Subtask(frozenset({1}), "c"), Subtask(frozenset({2}), "a")]
    with pytest.raises(ValueError, match="cycle"):
        order(t, [Subtask(frozenset({0, 2}), "a"), Subtask(frozenset({1}), "b")])


def test_template_and_single_plans():
    t = chain()
    assert template_plan(t, [a.card for a in (*POOL, *CREATED)]) == [
        Subtask(frozenset({0}), "lister"), Subtask(frozenset({1}), "lister"),
        Subtask(frozenset({2}), "numeric")]
    assert single_plan(t, "generalist") == [Subtask(frozenset({0, 1, 2}), "generalist")]


# ---- the agents ----------------------------------------------------------------------------------
def test_scripted_agents_err_at_their_stated_rates_and_none_covers_every_category():
    rng = random.Random(0)
    lister = POOL[0]
    right = sum(lister.attempt("sort", 0, [[3, 1, 2]], 0, rng) == [1, 2, 3] for _ in range(20000)) / 20000
    assert right == pytest.approx(1 - 0.03, abs=0.006)
    right = sum(lister.attempt("add", 2, [5], 1, rng) == 7 for _ in range(20000)) / 20000
    assert right == pytest.approx((1 - 0.25) * COMPOSITION, abs=0.012)
    assert lister.attempt("max", 0, [[]], 0, rng) is None  # a broken input gives a malformed output
    for agent in POOL:
        assert max(agent.error.values()) >= 0.2, f"{agent.name} covers every category well"


# ---- contracts, faults, repair ------------------------------------------------------------------
class Fixed(ScriptedAgent):
    """A deterministic agent: right, except malformed on `bad` ops (always, or only inside merged calls)."""

    def __init__(self, card: AgentCard, bad=(), merged_only=False, empty_evens=False):
        super().__init__(card, {c: 0.0 for c in ("list", "num", "text", "cipher")})
        object.__setattr__(self, "bad", set(bad))
        object.__setattr__(self, "merged_only", merged_only)
        object.__setattr__(self, "empty_evens", empty_evens)

    def attempt(self, op, k, inputs, position, rng):
        from envs.testbeds.braid import apply_op

        if self.empty_evens and op == "evens":
            return []  # plausible: passes evens' output contract
        if op in self.bad and (position > 0 or not self.merged_only):
            return None
        return apply_op(op, k, inputs)


@pytest.fixture(autouse=False)
def no_handoff_noise(monkeypatch):
    monkeypatch.setattr(execute, "HANDOFF", 1.0)


def run(task, plan, agents, rel, repair="local", tau=0.85, max_repairs=4, profile=None):
    cards = [a.card for a in agents]
    return execute.Executor(task, {a.name: a for a in agents}, cards, rel, Weights(0.0, 0.0),
                            random.Random(0), repair=repair, max_repairs=max_repairs, tau=tau,
                            profile=profile).run(plan)


def test_an_output_fault_reassigns_and_reruns_only_that_subtask(no_handoff_noise):
    t = chain()
    bad, good = (Fixed(AgentCard("bad", frozenset({"num"}), 1.0, 0.2), bad={"add"}),
                 Fixed(AgentCard("good", frozenset({"num"}), 1.0, 0.2)))
    plan = [Subtask(frozenset({0}), "bad"), Subtask(frozenset({1}), "bad"), Subtask(frozenset({2}), "bad")]
    profile = Profile()
    trace = run(t, plan, [bad, good], lambda c, cat: 0.9, profile=profile)
    assert trace.values[2] == t.truth()[2]
    assert trace.executions == {0: 1, 1: 1, 2: 2}  # nodes 0 and 1 were cached, not re-run
    assert trace.faults == {"assignment": 1} and trace.repair_calls == 1 and trace.calls == 4
    assert trace.repair_latency == pytest.approx(1.2) and trace.latency == pytest.approx(4 * 1.2)
    assert trace.plan[-1] == Subtask(frozenset({2}), "good")
    assert (profile.get("bad", "num") == (0, 1) and profile.get("good", "num") == (1, 1)
            and profile.get("bad", "list") == (2, 2))


def fan_task() -> BraidTask:
    """x0 -> evens (0); 0 -> rev (1); x0 -> len (2); 0 -> max (3, needs a non-empty list)."""
    return BraidTask(0, ([3, 5, 8, 2],), (Node(0, "evens", 0, ("x0",)), Node(1, "rev", 0, (0,)),
                                          Node(2, "len", 0, ("x0",)), Node(3, "max", 0, (0,))))


def test_an_input_fault_repairs_the_producer_and_reruns_its_dependents_only(no_handoff_noise):
    t = fan_task()
    liar = Fixed(AgentCard("liar", frozenset({"list"}), 1.0, 0.2), empty_evens=True)
    good = Fixed(AgentCard("good", frozenset({"list"}), 1.0, 0.2))
    plan = [Subtask(frozenset({v}), "liar") for v in range(4)]
    trace = run(t, plan, [liar, good], lambda c, cat: 0.9)
    assert all(trace.values[v] == t.truth()[v] for v in range(4))
    # node 0 re-run by `good`, node 1 (already run on the bad value) re-run, node 2 cached, node 3 ran
    # once it could
    assert trace.executions == {0: 2, 1: 2, 2: 1, 3: 1}
    assert any("input contract of node 3 broken" in line for line in trace.log)
    rerun = run(t, plan, [liar, good], lambda c, cat: 0.9, repair="rerun", max_repairs=1)
    assert rerun.executions[2] == 2  # re-run everything: the cached node too
    none = run(t, plan, [liar, good], lambda c, cat: 0.9, repair="none")
    assert (none.executions == {0: 1, 1: 1, 2: 1, 3: 1} and none.values[3] is None
            and none.violations == 2)  # its input, then its output


def test_a_merged_fault_of_a_fit_agent_is_a_decomposition_fault_and_is_split(no_handoff_noise):
    t = chain()
    fit = Fixed(GEN, bad={"sum"}, merged_only=True)  # right alone, wrong inside a longer call
    trace = run(t, [Subtask(frozenset({0, 1, 2}), "G")], [fit], lambda c, cat: 0.95, tau=0.9)
    assert trace.faults == {"decomposition": 1}
    assert trace.plan == [Subtask(frozenset({v}), "G") for v in range(3)]
    assert trace.values[2] == t.truth()[2]


def test_repair_reassigns_first_then_redecomposes(no_handoff_noise):
    t = chain()
    weak = Fixed(AgentCard("weak", frozenset({"list"}), 1.0, 0.2), bad={"sum"}, merged_only=True)
    other = Fixed(AgentCard("other", frozenset({"list"}), 1.0, 0.2), bad={"sum"}, merged_only=True)
    trace = run(t, [Subtask(frozenset({0, 1, 2}), "weak")], [weak, other], lambda c, cat: 0.5, tau=0.9)
    # rated unfit: re-assigned first, then (second fault) re-decomposed
    assert trace.faults == {"assignment": 2}
    assert [line.split(":")[1].strip().split(",")[1].strip().split(" ")[0]
            for line in trace.log if line.startswith("repair")] == ["re-assign", "re-decompose"]
    assert len(trace.plan) == 3 and trace.values[2] == t.truth()[2]


def test_classify_by_hand():
    t = chain()
    assert classify(Subtask(frozenset({0}), "G"), GEN, t, lambda c, cat: 0.99, 0.85) == "assignment"
    assert classify(Subtask(frozenset({0, 1, 2}), "G"), GEN, t,
                    rel_table({("G", "list"): 0.9, ("G", "num"): 0.86}), 0.85) == "decomposition"
    assert classify(Subtask(frozenset({0, 1, 2}), "G"), GEN, t,
                    rel_table({("G", "list"): 0.9, ("G", "num"): 0.84}), 0.85) == "assignment"


# ---- the arms ------------------------------------------------------------------------------------
def test_profiles_never_read_the_ground_truth(monkeypatch):
    env = BraidEnv(BraidConfig(train_size=32, heldout_size=16, dev_size=8))
    tasks = [BraidTask.parse(json.loads(r["task"])) for r in env.task_set()["train"]]

    def forbidden(self):
        raise AssertionError("the ground truth was read")

    monkeypatch.setattr(BraidTask, "truth", forbidden)
    profile = warm_up(tasks, Profile(), random.Random(0))
    assert sum(n for _, n in profile.counts.values()) > 0
    for arm in ARMS:
        solve(tasks[0], replace(InFlowOpConfig(), arm=arm), profile if ARMS[arm]["profiles"] else None,
              random.Random(1))


def test_every_arm_solves_tasks_and_records_per_domain_numbers():
    env = BraidEnv(BraidConfig(train_size=32, heldout_size=16, dev_size=8))
    tasks = [BraidTask.parse(json.loads(r["task"])) for r in env.task_set()["heldout"]]
    for arm in ARMS:
        cfg = replace(InFlowOpConfig(), arm=arm)
        infos = [record(t, solve(t, cfg, Profile() if ARMS[arm]["profiles"] else None, random.Random(i)))
                 for i, t in enumerate(tasks)]
        assert all(isinstance(i["success"], bool) and i["latency"] > 0 for i in infos)
        assert all(f"success_{t.domain_name}" in i for t, i in zip(tasks, infos, strict=True))
        if arm in ("single", "template", "no-repair"):
            assert all(i["repair_calls"] == 0 for i in infos)
        if arm == "single":
            assert all(i["subtasks"] == 1 for i in infos)


# ---- configs -------------------------------------------------------------------------------------
def test_config_defaults_are_the_dev_tuning_choice():
    tuned = json.loads((ROOT / "results/inflowop/dev-tuning.json").read_text())["chosen"]
    cfg = InFlowOpConfig()
    assert (cfg.beta, cfg.gamma, cfg.single_agent) == (tuned["beta"], tuned["gamma"], tuned["single_agent"])


def test_every_cpu_cell_composes_and_resolves_and_paper_refuses():
    from common.fit import resolve
    from experiments.replicate import plan, validate_cells
    from experiments.run import compose
    from replications import METHODS

    cells = plan("inflowop", "cpu")
    # the hand-set pool's 7 arms (braid) and the 7 arms over pools drawn from the prior (braid-pools, #42)
    assert len(cells) == 140 and {c.arm for c in cells if c.env == "braid"} == set(ARMS) - {"single-retry"}
    pool_arms = ("single", "single-retry", "template", "greedy", "no-repair", "no-profile", "inflowop")
    assert {c.arm for c in cells if c.env == "braid-pools"} == {f"pools-{a}" for a in pool_arms}
    cfgs = validate_cells(cells)
    assert {c.trainer.steps for c in cfgs} == {0} and {c.env["name"] for c in cfgs} == {"braid"}
    # scale=small (#46): SmolLM2 adapters as policy agents, a warm start sized to the hour (CARD)
    small = resolve(compose("inflowop", ["scale=small"]), METHODS).cfg
    agents, steps = small.method["policy_agents"], small.method["agent_steps"]
    assert len(agents) == 3 and len(agents) * steps * 15 <= 3600  # ~15 s a SmolLM2 SFT step here
    assert small.env["tag"] == "braid-smollm2" and small.model.hf_id == "HuggingFaceTB/SmolLM2-135M-Instruct"
    # Braid itself is not public: no environment reads it
    with pytest.raises(ValueError, match="braid_paper"):
        resolve(compose("inflowop", ["scale=paper", f"model.path={ROOT}", f"method.paper_data={ROOT}"]),
                METHODS)
    with pytest.raises(ValueError, match="training-free"):
        resolve(compose("inflowop", ["trainer.steps=3"]), METHODS)
    with pytest.raises(ValueError, match="env=braid"):
        resolve(compose("inflowop", ["env=arith"]), METHODS)
