"""chain_tasks' provenance events (#46): which earlier turn each call used, for IAPO's influence graph."""

import json
import random

from envs.testbeds.chain_tasks import ChainTasksConfig, ChainTasksEnv

TASK = {"items": [["tea", 2], ["rice", 1]], "contact": "ana", "day": "fri"}


def make(**kw):
    return ChainTasksEnv(ChainTasksConfig(**{"train_size": 60, "heldout_size": 12, "busy_rate": 0.0, **kw}))


def edges(results):
    """(source, target, kind) of every provenance event, the target being the step's own turn."""
    return [(e.data["source"], j, e.data["kind"]) for j, r in enumerate(results) for e in r.events
            if e.kind == "provenance"]


def test_offered_and_each_call_names_the_turns_it_used():
    assert "provenance_events" in ChainTasksEnv.offers
    ep = make().new_episode(TASK, random.Random(0))
    order, cid = ep.world.order_id, ep.world.contact_ids["ana"]
    ep.start()
    actions = ["add tea 2", "add rice 1", "pay", "find ana", f"send {cid} {order}", f"book fri {cid}", "done"]
    results = [ep.step(a) for a in actions]
    assert results[-1].success
    ok = "success_utilization"
    assert edges(results) == [(0, 2, ok), (1, 2, ok),  # pay: the cart's adds
                              (3, 4, ok), (2, 4, ok),  # send: the find that showed the id, the pay
                              (4, 5, ok),  # book: the send's reply showed the id last
                              (5, 6, ok)]  # done: the last call that changed a state


def test_the_call_after_an_error_falls_back_on_it():
    ep = make().new_episode(TASK, random.Random(0))
    ep.start()
    results = [ep.step(a) for a in ("add tea 2", "send 1 2", "add rice 1", "add rice x")]
    assert edges(results) == [(1, 2, "failed_utilization")]
    assert [e.kind for e in results[1].events] == ["error"]


def test_busy_refusals_are_sources_and_every_source_is_earlier():
    env = make(busy_rate=0.3, slack=10)
    found_busy = False
    for k, row in enumerate(env.task_set()["train"]):
        ep = env.new_episode(json.loads(row["task"]), random.Random(k))
        obs, results = ep.start(), []
        while obs is not None:
            results.append(ep.step(ep.expert_action()))
            obs = results[-1].next
        assert results[-1].success
        for source, target, kind in edges(results):
            assert 0 <= source < target
            if kind == "failed_utilization":
                found_busy = True
                assert any(e.kind == "error" and e.data.get("busy") for e in results[source].events)
    assert found_busy
