"""service_desk: the customer, the tools, the trap, the delay knob, the budget, provenance, probes, the
demonstrator."""

import json
import random

import pytest

from envs.testbeds.service_desk import DONE_TALKING, ServiceDeskConfig, ServiceDeskEnv, ideal_actions, schema
from tests.helpers import play_events


def task(intent="refund", delay=2, method="cash", order="K", trap="Q"):
    return {"intent": intent, "method": method, "order": order, "trap": trap, "delay": delay,
            "remarks": ["it was a gift", "the box was blue", "i live far away", "it came late"][:delay],
            "probe": "refund"}


def play(actions, t=None, **cfg):
    return play_events(ServiceDeskEnv(ServiceDeskConfig(**cfg)), t or task(), actions)


def test_ideal_dialogue_succeeds_and_context_grows():
    result, texts, _ = play(ideal_actions(task()))
    assert result.reward == 1.0 and result.success and result.next is None
    assert texts[0].startswith(schema("Q")) and "refund card Q" in texts[0]
    assert texts[1] == "user: refund to cash please\n> "
    assert texts[2] == "tool: order K\nuser: it was a gift\n> "
    assert texts[4] == f"user: {DONE_TALKING}\n> "
    assert result.info["trap_use"] is False and result.info["redundant_lookup"] is False


@pytest.mark.parametrize("delay", [0, 2, 4])
def test_every_delay_is_solvable_by_the_oracle(delay):
    result, _, _ = play(ideal_actions(task(delay=delay)), task(delay=delay))
    assert result.reward == 1.0 and result.info["actions"] == 4 + delay


def test_human_intent_wants_a_transfer():
    assert play(["ask", "transfer"], task(intent="human"))[0].reward == 1.0
    assert play(["ask", "end"], task(intent="human"))[0].reward == 0.0
    assert play(["transfer"], task())[0].reward == 0.0  # a refund customer transferred


def test_trap_errors_and_costs_an_action():
    actions = ["ask", "refund cash Q", "lookup", "ok", "ok", "refund cash K", "end"]
    result, texts, events = play(actions, slack=1)
    assert texts[2] == "tool: error: example id\n> "
    assert (1, "error", {"why": "tool: error: example id"}) in events
    assert (2, "provenance", {"source": 1, "kind": "failed_utilization"}) in events  # the fallback lookup
    assert result.reward == 1.0 and result.info["trap_use"] is True
    # trap and a repeated lookup in one episode exhaust the budget (ideal 6 + slack 1)
    result, _, _ = play(["ask", "refund cash Q", "lookup", "lookup", "ok", "ok", "refund cash K", "end"],
                        slack=1)
    assert result.reward == 0.0 and result.info["out_of_turns"] is True


def test_wrong_method_or_id_fails():
    assert play(["ask", "lookup", "ok", "ok", "refund card K", "end"])[0].reward == 0.0
    result, texts, events = play(["ask", "lookup", "ok", "ok", "refund cash L", "end"])
    assert texts[-1].startswith("tool: error: no order L") and result.reward == 0.0
    # a second refund is refused (state unchanged): it costs an action and is flagged as an error
    result, texts, events = play(["ask", "lookup", "ok", "ok", "refund cash K", "refund cash K", "end"],
                                 slack=2)
    assert texts[-1].startswith("tool: error: already refunded")
    assert (5, "error", {"why": "tool: error: already refunded"}) in events
    assert result.reward == 1.0


def test_remarks_must_be_acknowledged_before_closing():
    result, texts, _ = play(["ask", "lookup", "refund cash K", "end"], slack=3)
    assert texts[3] == "tool: refunded\nuser: it was a gift\n> "  # the unacknowledged remark is said again
    assert result.reward == 0.0


@pytest.mark.parametrize("bad", ["", "  ", "refund", "refund cash", "refund gold K", "refund cash ٨٣",
                                 "refund cash 9" * 50, "lookup K", "ask me", "\x00", "transfer now",
                                 "9" * 5000, "Ask"])
def test_malformed_actions_are_invalid_observations(bad):
    result, texts, events = play(["ask", bad])
    assert result.next is not None and texts[-1].startswith("error: bad call")
    assert [k for j, k, _ in events if j == 1 and k in ("invalid_action", "error")] == ["invalid_action"]


def test_provenance_events_of_the_ideal_dialogue():
    _, _, events = play(ideal_actions(task()))
    prov = {(j, d["source"], d["kind"]) for j, k, d in events if k == "provenance"}
    assert (4, 1, "success_utilization") in prov  # the refund used the lookup's id
    assert (4, 0, "input") in prov  # ... and the method the ask elicited
    assert (5, 4, "success_utilization") in prov  # end closes after the refund
    assert all((j, -1, "input") in prov for j in range(5))  # each acted on a customer line
    assert (5, -1, "input") not in prov  # "tool: refunded" is not the customer's
    assert [(j, d["id"]) for j, k, d in events if k == "tool_result"] == [(1, "K")]


def test_redundant_lookup_has_no_consumer():
    result, _, events = play(["ask", "lookup", "lookup", "ok", "ok", "refund cash K", "end"])
    assert result.reward == 1.0 and result.info["redundant_lookups"] == 1
    sources = {d["source"] for _, k, d in events if k == "provenance"}
    assert 1 in sources and 2 not in sources


def test_demonstrator_error_rates():
    env = ServiceDeskEnv(ServiceDeskConfig(train_size=600, heldout_size=8))
    rng = random.Random(0)
    traps = repeats = refunds = wins = 0
    for row in env.task_set()["train"]:
        t = json.loads(row["task"])
        ep = env.new_episode(t, rng)
        obs, result = ep.start(), None
        while obs is not None:
            result = ep.step(ep.expert_action())
            obs = result.next
        refunds += t["intent"] == "refund"
        traps += result.info["trap_use"]
        repeats += result.info["redundant_lookup"]
        wins += result.reward
    assert 0.15 < traps / refunds < 0.25 and 0.15 < repeats / refunds < 0.25
    assert 0.9 < wins / 600 < 1.0  # both errors in one episode (~4%) run out of budget


def test_probes_are_single_turn_calls():
    env = ServiceDeskEnv(ServiceDeskConfig())
    kinds = {}
    for p in ("ask", "lookup", "refund", "end"):
        ep = env.new_episode({**task(), "probe": p}, random.Random(0), "probe")
        kinds[p] = ep.expert_action()
        assert ep.step(ep.expert_action()).reward == 1.0
        assert ep.step(" nonsense").reward == 0.0
    assert kinds == {"ask": "ask", "lookup": "lookup", "refund": "refund cash K", "end": "end"}
    ep = env.new_episode({**task(), "probe": "refund"}, random.Random(0), "probe")
    assert ep.start().text.endswith("> lookup\ntool: order K\nuser: that is all\n> ")
    assert env.new_episode(task(intent="human"), random.Random(0), "probe").expert_action() == "transfer"


def test_splits_and_tiers():
    env = ServiceDeskEnv(ServiceDeskConfig(train_size=60, heldout_size=12, delays=[0, 4]))
    sets = env.task_set()
    assert env.tiers == (0, 4) and set(sets["train"]["tier"]) == {0, 4}
    ids = [set(sets[s]["task"]) for s in sets]
    assert sum(map(len, ids)) == len(set().union(*ids))  # no task in two splits
    with pytest.raises(ValueError, match="delays"):
        ServiceDeskEnv(ServiceDeskConfig(delays=[9]))
    with pytest.raises(ValueError, match="no episode variant"):
        env.new_episode(task(), random.Random(0), "masked")


def test_demonstrations_teach_copying_with_the_same_id_tokens():
    """What the warm start must learn to copy (CARD: why the first cpu run learned nothing): every
    demonstrated refund takes its method from the customer's line and its id from the latest tool
    reply (or, the trap, from the schema), and the id is the same tokens in the reply and in the
    refund under the tokenizer the tiny model trains on the environment's own text."""
    from common.chat import demonstrated_action_ids
    from common.models import train_tokenizer

    env = ServiceDeskEnv(ServiceDeskConfig(train_size=200, heldout_size=8))
    tok = train_tokenizer(list(env.corpus(200)), 384)
    rng, refunds = random.Random(0), 0
    for row in env.task_set()["train"]:
        t = json.loads(row["task"])
        ep = env.new_episode(t, rng)
        obs, context = ep.start(), ""
        while obs is not None:
            context += obs.text
            action = ep.expert_action()
            if action.startswith("refund"):
                refunds += 1
                _, method, order = action.split()
                assert f"user: refund to {method} please" in context
                looked_up = "tool: order " in context
                assert order == (context.rsplit("tool: order ", 1)[1][0] if looked_up else t["trap"])
                shown = tok.encode(f"tool: order {order}", add_special_tokens=False)
                called = demonstrated_action_ids(tok, action, "\n")
                assert tok.decode(called[-1:]) == "\n"
                n = next(i for i in range(1, 4)
                         if shown[-i:] == called[-1 - i:-1] and tok.decode(shown[-i:]) == f" {order}")
                # the space and the letter: one or two tokens, the same in the reply and the call
                assert n <= 2
            obs = ep.step(action).next
            context += action + "\n"
    assert refunds > 150
