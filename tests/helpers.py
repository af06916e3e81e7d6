"""Small helpers the tests share (import as `from tests.helpers import ...`)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from common.config import RunConfig
from common.credit import Advantages, to_advantages
from common.episode import Group, Turn, step_episodes
from common.method import RunView


class ByTurn:
    """A step's advantages read by `Turn` (the core keys them by (episode index, turn index)): tests name
    the turn they mean, this finds its key."""

    def __init__(self, advantages: Advantages, groups: list[Group]):
        self.advantages = advantages
        self.keys = {id(t): (e, i)
                     for e, ep in enumerate(step_episodes(groups)) for i, t in enumerate(ep.turns)}

    def scalar(self, turn: Turn) -> float:
        return self.advantages.scalar(self.keys[id(turn)])

    def tokens(self, turn: Turn) -> list[float]:
        return self.advantages.tokens(self.keys[id(turn)], turn)


def run_view(env: Any, scale: str = "cpu", **fields: Any) -> RunView:
    """What a method sees of a default run (`RunConfig()`) at `scale`, with `fields` changed (e.g.
    group_size=8)."""
    return dataclasses.replace(RunView.of(RunConfig(scale=scale), env), **fields)


def credit_advantages(method: Any, groups: list[Group], step: int = 0) -> tuple[ByTurn, dict[str, float]]:
    """What the trainer does with a method's credit: (the advantages, the credit's metrics +
    credit_metrics)."""
    credit = method.credit(groups, step)
    adv = to_advantages(groups, credit, method.agent_of, method.estimator, method.excluded)
    return ByTurn(adv, groups), {**credit.metrics, **method.credit_metrics(groups, adv)}


def last_checkpoint(run_dir: Path) -> Path | None:
    """The run's own `last.ckpt` (its folder is recorded in the manifest), or None while there is none yet."""
    import json

    try:
        folder = json.loads((Path(run_dir) / "manifest.json").read_text())["checkpoints"]
    except (OSError, ValueError, KeyError):
        return None
    path = Path(folder) / "last.ckpt"
    return path if path.exists() else None


def skill_env(**settings: Any) -> Any:
    """A small skill_families environment (its layout and other settings overridable)."""
    from envs.testbeds.skill_families import SkillFamiliesConfig, SkillFamiliesEnv

    base = {"train_size": 30, "heldout_size": 6, "dev_size": 6, "demo_size": 50}
    return SkillFamiliesEnv(SkillFamiliesConfig(**{**base, **settings}))


def play_skill(e: Any, task: dict[str, Any], actions: list[str],
               variant: str = "main") -> tuple[list[str], Any]:
    """Play `actions` on one skill_families episode: the observation texts before each, the last result."""
    import random

    ep = e.new_episode(task, random.Random(0), variant)
    obs, texts, result = ep.start(), [], None
    for a in actions:
        texts.append(obs.text)
        result = ep.step(a)
        obs = result.next
        if obs is None:
            break
    return texts, result


# ---- pins: an environment's splits and plays as digests (tests/envs/test_split_pins.py, #46's pins) ----
def play_events(e: Any, task: dict[str, Any], actions: list[str]) -> tuple[Any, list[str], list[Any]]:
    """Play `actions` on one episode of `e` (rng seed 0) until it ends: the last result, the observation
    texts (the first one and after each action), and every event as (action index, kind, data)."""
    import random

    ep = e.new_episode(task, random.Random(0))
    obs, events, result = ep.start(), [], None
    texts = [obs.text]
    for j, a in enumerate(actions):
        result = ep.step(a)
        events += [(j, ev.kind, ev.data) for ev in result.events]
        if result.next is None:
            break
        texts.append(result.next.text)
    return result, texts, events


def digest(obj: Any) -> str:
    """sha256 (16 hex) of the JSON of `obj` (sorted keys; anything else as its str)."""
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def split_digests(env: Any) -> dict[str, str]:
    """Each split's digest over its whole columns (id, tier, task) as lists: a datasets Column hashed
    through str would cover its repr, the first five rows only."""
    tasks = env.task_set()
    return {s: digest([list(tasks[s][c]) for c in ("id", "tier", "task")]) for s in tasks}


def transcript(env: Any, task: dict[str, Any], rng: Any, variant: str = "main", policy: Any = "expert",
               action_rng: Any = None, keep_event: Any = None,
               drop_info: tuple[str, ...] = ()) -> list[list[Any]]:
    """One episode played by the demonstrator (`policy="expert"`), `env.random_action` (`"random"`) or
    `policy(env, episode, observation, rng)`, drawing from `action_rng`, else `rng`: each turn's role,
    observation, new_context, action, reward, success, events (those `keep_event` keeps) and info (without
    `drop_info`)."""
    ep = env.new_episode(task, rng, variant)
    obs = ep.start()
    turns: list[list[Any]] = []
    draw = rng if action_rng is None else action_rng
    while obs is not None:
        action = (ep.expert_action() if policy == "expert" else policy(env, ep, obs, draw) if callable(policy)
                  else env.random_action(ep, obs, draw))
        r = ep.step(action)
        events = [dataclasses.asdict(e) for e in r.events if keep_event is None or keep_event(e)]
        info = {k: v for k, v in r.info.items() if k not in drop_info}
        turns.append([obs.role, obs.text, obs.new_context, action, r.reward, r.success, events, info])
        obs = r.next
    return turns


def play_to_end(env: Any, task: Any, actions: list[str]) -> list[Any]:
    """Each step's result of one episode of `env` on `task`, played to its end with `actions`."""
    import random

    ep = env.new_episode(task, random.Random(0))
    obs, results = ep.start(), []
    for action in actions:
        assert obs is not None
        results.append(ep.step(action))
        obs = results[-1].next
    assert obs is None
    return results


def provenance_edges(results: list[Any]) -> list[tuple[int, int, str]]:
    """(source, target, kind) of every provenance event, the target being the step's own turn."""
    return [(e.data["source"], j, e.data["kind"]) for j, r in enumerate(results) for e in r.events
            if e.kind == "provenance"]


def played_episode(role: str, actions: list[str], results: list[Any]) -> Any:
    """An `Episode` of `actions` (one turn each, by `role`) carrying every step's events stamped with the
    step's turn index, as the rollout stamps them: what IAPO's `provenance_annotator` reads."""
    from common.episode import Episode

    ep = Episode("t", 0, [Turn(role, "a", [], [1], [0.0], a) for a in actions])
    for j, r in enumerate(results):
        for e in r.events:
            e.turn = j
            ep.events.append(e)
    return ep


@contextlib.contextmanager
def chat_endpoint(reply: Callable[[dict[str, Any]], str]) -> Iterator[str]:
    """An OpenAI-compatible `/chat/completions` on 127.0.0.1 that answers each request with `reply(body)` (a
    scripted user behind an endpoint); yields its base url (`http://127.0.0.1:<port>/v1`), stopped on exit
    (the url then reaches nothing that answers)."""
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = reply(body)
            out = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/v1"
    finally:
        server.shutdown()
