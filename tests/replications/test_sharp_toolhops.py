"""SHARP's credits on the toolhops variants (envs/testbeds/toolhops.py, #17), where credit can matter:
dependent hops and redundant workers, by hand and on batches the demonstrator plays."""

import numpy as np
import pytest

from common.config import build_dataclass
from common.episode import Episode, Group, Turn
from replications.sharp.method import SHARP, SHARPConfig, leave_one_out, shapley_values
from tests.helpers import credit_advantages, run_view


def hops_record(world=12345):
    """A K=2 chain with both workers right (envs/testbeds/toolhops.py)."""
    import random

    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv, fact, right_tool

    env = ToolHopsEnv(ToolHopsConfig(k=2, train_size=4, heldout_size=4, dev_size=4))
    e1 = fact("boss", "k", world)
    ep = env.new_episode({"world": world, "start": "k", "attrs": ["boss", "twin"]}, random.Random(0))
    ep.start()
    for action in (" boss twin", " " + right_tool("boss", "k", 4), " " + right_tool("twin", e1, 4),
                   f" {e1} {fact('twin', e1, world)}"):
        r = ep.step(action)
    return env, r.info["record"]


def test_dependent_hops_shapley_and_loo_by_hand():
    """v({})=0, v({0})=1/4 (slot 1 right), v({1})=0 (its query is the placeholder), v(M)=1:
    phi_0 = 1/2 (1/4) + 1/2 (1) = 5/8, phi_1 = 1/2 (0) + 1/2 (1 - 1/4) = 3/8; loo: 1 and 3/4."""
    env, rec = hops_record()
    value = lambda s: env.replay(rec, frozenset({0, 1}) - s).value  # noqa: E731
    assert shapley_values([0, 1], value) == pytest.approx({0: 5 / 8, 1: 3 / 8})
    assert leave_one_out([0, 1], value) == pytest.approx({0: 1.0, 1: 0.75})


def test_redundant_workers_loo_gives_zero_and_shapley_splits():
    """K=2 facts, workers 0 and 2 right on fact 0, worker 1 right on fact 1 (v = 1/4 s0 + 1/4 s1 + 1/2 s0 s1):
    loo gives the redundant pair 0 each and worker 1 3/4; Shapley gives 0 and 2 each 1/4 * 1/2 + 1/2 * 1/6
    = 5/24 and worker 1 1/4 + 1/2 * 2/3 = 7/12 (sum 1 = v(M))."""
    import random

    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv, fact, right_tool

    env = ToolHopsEnv(ToolHopsConfig(mode="parallel", k=2, extra_workers=1, train_size=4, heldout_size=4,
                                     dev_size=4))
    ep = env.new_episode({"world": 7, "attrs": ["boss", "twin"], "entities": ["k", "m"]}, random.Random(0))
    ep.start()
    for action in (" boss twin boss", " " + right_tool("boss", "k", 4), " " + right_tool("twin", "m", 4),
                   " " + right_tool("boss", "k", 4), f" {fact('boss', 'k', 7)} {fact('twin', 'm', 7)}"):
        r = ep.step(action)
    rec = r.info["record"]
    value = lambda s: env.replay(rec, frozenset({0, 1, 2}) - s).value  # noqa: E731
    assert leave_one_out([0, 1, 2], value) == pytest.approx({0: 0.0, 1: 0.75, 2: 0.0})
    assert shapley_values([0, 1, 2], value) == pytest.approx({0: 5 / 24, 1: 7 / 12, 2: 5 / 24})


def sampled_groups(env, n_tasks, group_size, seed):
    """Groups played by the environment's demonstrator (its warm-start error rates)."""
    import random

    rng, out = random.Random(seed), []
    for t in range(n_tasks):
        task, eps = env.generate_task(rng, env.cfg.k), []
        for _ in range(group_size):
            ep, state = Episode(f"t{t}", env.cfg.k), env.new_episode(task, random.Random(rng.random()))
            obs = state.start()
            while obs is not None:
                ep.turns.append(Turn(obs.role, "policy", [1], [2], [-0.1], "x"))
                r = state.step(state.expert_action())
                obs = r.next
            ep.reward, ep.success, ep.info = r.reward, r.success, r.info
            eps.append(ep)
        out.append(Group(f"t{t}", env.cfg.k, eps))
    return out


def worker_advantages(env, groups, credit):
    m = SHARP(build_dataclass(SHARPConfig, {"credit": credit}, "method"), run_view(env))
    adv, _ = credit_advantages(m, groups)
    return np.array([adv.scalar(t)
                     for g in groups for e in g.episodes for t in e.turns if t.role == "worker"])


def test_dependent_hops_separate_shapley_from_broadcast_more_than_toolplan():
    """Correlation of SHARP's and broadcast worker advantages on a batch sampled at warm-start error rates
    (32 tasks x G=8, K=4). When written: toolplan 0.88 (the issue's 0.87), dependent hops 0.78 (K=5:
    0.63); at K=2 the chain gives 0.99 (a downstream worker contributes only when everything upstream is
    right), see CARD."""
    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv
    from envs.testbeds.toolplan import ToolPlanConfig, ToolPlanEnv

    def corr(env):
        groups = sampled_groups(env, 32, 8, seed=0)
        return float(np.corrcoef(worker_advantages(env, groups, "exact"),
                                 worker_advantages(env, groups, "broadcast"))[0, 1])

    easy, hops = corr(ToolPlanEnv(ToolPlanConfig(k=4))), corr(ToolHopsEnv(ToolHopsConfig(k=4)))
    assert easy > 0.8 and hops < easy - 0.05, (easy, hops)


def test_redundancy_separates_shapley_from_leave_one_out_on_a_sampled_batch():
    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv

    env = ToolHopsEnv(ToolHopsConfig(mode="parallel", k=2, extra_workers=2))
    groups = sampled_groups(env, 32, 8, seed=0)
    exact, loo = worker_advantages(env, groups, "exact"), worker_advantages(env, groups, "loo")
    assert np.mean(np.abs(exact - loo)) > 0.1  # advantages in units of a group's SD
    # no redundancy
    toolplan_k = sampled_groups(ToolHopsEnv(ToolHopsConfig(mode="parallel", k=2)), 32, 8, seed=0)
    no_extra = ToolHopsEnv(ToolHopsConfig(mode="parallel", k=2))
    assert np.mean(np.abs(exact - loo)) > np.mean(np.abs(worker_advantages(no_extra, toolplan_k, "exact")
                                                         - worker_advantages(no_extra, toolplan_k, "loo")))
