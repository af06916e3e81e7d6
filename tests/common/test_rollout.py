"""The rollout and the method contract around it: episodes flagged truncated or faulted, an
environment that raises, the chat template, evaluation through the method's own play."""

from __future__ import annotations

import contextlib
import random
import signal
import threading
import time
from typing import Any

import pytest

from common.chat import ChatFormat, observation_text
from common.config import RunConfig
from common.credit import Credit
from common.engines.base import Engine, Request, Sample, SamplingParams
from common.episode import Group
from common.evaluate import evaluate
from common.method import Method, MethodConfig, RunView
from common.rollout import Rollout
from envs.api.base import (
    EnvConfig,
    Environment,
    EpisodeState,
    Observation,
    StepResult,
    StepTimeLimit,
    cpu_time_limit,
)


class _Tokenizer:
    """One token per character (ids = code points): lengths are easy to count by hand."""

    chat_template = None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return [ord(c) for c in text]


class _Echo(Engine):
    """Answers every request with a fixed action (one token per character), counting the calls."""

    def __init__(self, action: str = "ok"):
        self.action, self.requests = action, []

    def generate(self, requests: list[Request], params: SamplingParams, seed: int) -> list[Sample]:
        self.requests.extend(requests)
        return [Sample([ord(c) for c in self.action], [-0.1] * len(self.action), self.action, True)
                for _ in requests]


class _Episode(EpisodeState):
    def __init__(self, task: dict[str, Any], variant: str):
        self.task, self.variant, self.turn = task, variant, 0

    def start(self) -> Observation:
        return Observation("agent", self.task["prompt"])

    def step(self, action: str) -> StepResult:
        self.turn += 1
        if self.task.get("raise_at") == self.turn:
            raise RuntimeError("the environment has a bug")
        if self.task.get("spin_at") == self.turn:  # a runaway step: endless Python, swallowing what it can
            while True:
                with contextlib.suppress(Exception):
                    sum(range(1000))
        if self.task.get("busy_s"):  # a step that returns, late: CPU time spent, one interruption swallowed
            end = time.process_time() + self.task["busy_s"]
            while time.process_time() < end:
                try:
                    sum(range(1000))
                except BaseException:
                    break
        if self.turn < self.task.get("turns", 1):
            return StepResult(Observation("agent", " more"))
        return StepResult(None, reward=1.0, success=True)

    def expert_action(self) -> str:
        return "ok"

    def summary(self) -> dict[str, Any]:
        return {"played": self.turn} if self.task.get("summarise") else super().summary()


class _Env(Environment):
    name, roles, stop = "toy", ("agent",), ("\n",)

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        return {"prompt": "hi", "n": rng.random()}

    @property
    def tiers(self) -> tuple[int, ...]:
        return (1,)

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        return _Episode(task, variant)

    def variants(self) -> tuple[str, ...]:
        return ("main", "alone")


def task(i: int, **kw: Any) -> dict[str, Any]:
    import json

    return {"id": f"t{i}", "tier": 1, "task": json.dumps({"prompt": "hi", **kw})}


def rollout(engine: Engine, max_length: int = 512, chat: ChatFormat | None = None, **env: Any) -> Rollout:
    return Rollout(_Env(EnvConfig(**env)), engine, _Tokenizer(), {"agent": "policy"}, ["policy"],
                   SamplingParams(1.0, 1.0, 4, ("\n",)), max_length, seed=0, chat=chat)


def test_an_episode_that_runs_out_of_context_is_flagged_truncated():
    # turn 1: "hi" (2) + 4 new tokens <= 12; turn 2: "hi" + "ok" + " more" = 9 tokens + 4 new = 13 > 12
    groups = rollout(_Echo(), max_length=12).play_groups([task(0, turns=3), task(1, turns=1)], [1, 1], step=0)
    long, short = groups[0].episodes[0], groups[1].episodes[0]
    assert long.truncated and long.reward == 0.0 and not long.success and len(long.turns) == 1
    assert not short.truncated and short.reward == 1.0
    summary = evaluate(Method(MethodConfig(), RunView.of(RunConfig(), _Env(EnvConfig()))),
                       rollout(_Echo(), 12),
                       [{"id": "a", "tier": 1, "task": task(0, turns=3)["task"]},
                        {"id": "b", "tier": 1, "task": task(1)["task"]}], 0)
    assert summary["truncated_rate"] == 0.5  # over every episode, not only those that set a flag


def test_an_episode_cut_by_the_context_records_its_summary_so_far():
    """The environment's figures (`EpisodeState.summary`) of an episode the context cut, so that its info
    means average over every episode (#39: right_tool read 0.82 over the episodes that ended, ~0.4 in all)."""
    tasks = [task(0, turns=3, summarise=True), task(1, turns=1, summarise=True), task(2, turns=3)]
    groups = rollout(_Echo(), max_length=12).play_groups(tasks, [1, 1, 1], step=0)
    cut, ended, plain = (g.episodes[0] for g in groups)
    assert cut.truncated and cut.info == {"played": 1}
    assert not ended.truncated and ended.info == {}  # an episode that ends reports its last step's info only
    assert plain.truncated and plain.info == {}  # an environment without a summary: nothing, as before


def test_a_truncated_episode_trains_unless_the_method_drops_it():
    groups = rollout(_Echo(), max_length=12).play_groups([task(0, turns=3)], [1], step=0)
    ep = groups[0].episodes[0]
    view = RunView.of(RunConfig(), _Env(EnvConfig()))
    assert not Method(MethodConfig(), view).excluded(ep)
    assert Method(MethodConfig(train_truncated=False), view).excluded(ep)


def test_an_exception_inside_the_environment_is_a_faulted_invalid_action():
    groups = rollout(_Echo()).play_groups([task(0, turns=3, raise_at=2), task(1, turns=2)], [2, 2], step=0)
    for ep in groups[0].episodes:
        assert ep.faulted and ep.reward == 0.0 and len(ep.turns) == 2
        kinds = [e.kind for e in ep.events]
        assert (kinds == ["invalid_action", "fault"]
                and "RuntimeError: the environment has a bug" in ep.events[0].data["error"])
        assert ep.events[0].turn == 1 and ep.info["env_error"] == 1
    assert all(not e.faulted and e.reward == 1.0 for e in groups[1].episodes)  # the other episodes go on
    assert Method(MethodConfig(), RunView.of(RunConfig(), _Env(EnvConfig()))).excluded(groups[0].episodes[0])


def test_a_step_past_its_cpu_time_limit_is_a_faulted_invalid_action():
    before = time.process_time()
    groups = rollout(_Echo(), step_cpu_s=0.2).play_groups([task(0, turns=3, spin_at=2), task(1, turns=2)],
                                                          [1, 1], step=0)
    assert time.process_time() - before < 5  # the endless step was stopped, not waited out
    ep = groups[0].episodes[0]
    assert ep.faulted and ep.reward == 0.0 and len(ep.turns) == 2 and ep.info["env_error"] == 1
    assert [e.kind for e in ep.events] == ["invalid_action", "fault"]
    assert ep.events[0].data["error"].startswith("StepTimeLimit: the step used more than 0.2 s of CPU time")
    assert not groups[1].episodes[0].faulted and groups[1].episodes[0].reward == 1.0  # the others go on
    assert (signal.getsignal(signal.SIGPROF) == signal.SIG_DFL
            and signal.getitimer(signal.ITIMER_PROF) == (0.0, 0.0))


def test_a_late_step_that_swallowed_the_interruption_still_faults():
    ep = rollout(_Echo(), step_cpu_s=0.1).play_groups([task(0, busy_s=0.3)], [1], step=0)[0].episodes[0]
    assert ep.faulted and "StepTimeLimit" in ep.events[0].data["error"]


def test_outside_the_main_thread_a_late_step_faults_when_it_returns():
    found: list[Any] = []
    worker = threading.Thread(target=lambda: found.extend(
        rollout(_Echo(), step_cpu_s=0.1).play_groups([task(0, busy_s=0.3), task(1)], [1, 1], step=0)))
    worker.start()
    worker.join()
    late, fine = found[0].episodes[0], found[1].episodes[0]
    assert late.faulted and "used 0." in late.events[0].data["error"] and not fine.faulted


def test_the_cpu_time_limit_is_checked_and_costs_microseconds():
    with pytest.raises(ValueError, match="env.step_cpu_s must be a number of seconds > 0"):
        _Env(EnvConfig(step_cpu_s=0))
    with pytest.raises(StepTimeLimit), cpu_time_limit(0.05):
        while True:
            pass
    before = time.perf_counter()
    for _ in range(1000):
        with cpu_time_limit(30.0):
            pass
    assert (time.perf_counter() - before) / 1000 < 1e-3  # measured ~10 us


class _ChatTokenizer(_Tokenizer):
    chat_template = "chatml"

    def apply_chat_template(self, messages: list[dict[str, str]], tokenize: bool,
                            add_generation_prompt: bool) -> str:
        out = "".join(f"<|{m['role']}|>{m['content']}<|end|>" for m in messages)
        return out + ("<|assistant|>" if add_generation_prompt else "")


def test_chat_template_wraps_observations_in_rollouts_and_demonstrations():
    chat = ChatFormat.from_tokenizer(_ChatTokenizer())
    assert chat == ChatFormat("<|user|>", "<|end|><|assistant|>", "<|end|><|user|>", "<|end|><|assistant|>")
    engine = _Echo()
    rollout(engine, chat=chat).play_groups([task(0, turns=2)], [1], step=0)
    prompts = ["".join(map(chr, r.prompt_ids)) for r in engine.requests]
    assert prompts == ["<|user|>hi<|end|><|assistant|>",
                       "<|user|>hi<|end|><|assistant|>ok<|end|><|user|> more<|end|><|assistant|>"]
    assert observation_text(None, "x", True) == "x"
    with pytest.raises(ValueError, match="no chat template"):
        ChatFormat.from_tokenizer(_Tokenizer())


class _WithCounterfactual(Method):
    """A method whose evaluation also plays a counterfactual variant, under its own tag."""

    def play(self, rollout: Rollout, tasks: list[dict[str, Any]], step: int, mode: Any = "train",
             variant: str = "main") -> list[Group]:
        groups = super().play(rollout, tasks, step, mode, variant)
        alone = rollout.play_groups(tasks, [len(g.episodes) for g in groups], step, mode=mode,
                                    variant="alone", tag="alone")
        for g, a in zip(groups, alone, strict=True):
            g.extra["alone"] = a.episodes
        return groups


def test_evaluation_goes_through_the_methods_play_with_fixed_seeds():
    run = RunConfig()
    run.eval.k = 3
    method = _WithCounterfactual(MethodConfig(), RunView.of(run, _Env(EnvConfig())))
    r = rollout(_Echo())
    tasks = [{"id": f"h{i}", "tier": 1, "task": task(i)["task"]} for i in range(4)]
    result = evaluate(method, r, tasks, step=7)
    assert result["k"] == 3 and result["n_tasks"] == 4 and result["mean@k"] == 1.0 and result["step"] == 7
    assert result["extra"]["alone"]["n_tasks"] == 4
    groups = method.play(r, tasks, 7, mode="eval")
    assert all(not e.counts_for_training for g in groups for e in g.all_episodes())  # evaluation never trains
    assert ({e.tag for g in groups for e in g.episodes} == {"eval"}
            and {e.tag for g in groups for e in g.extra["alone"]} == {"eval/alone"})
    # the same environment seeds at every evaluation: the step does not enter them
    a = [e.turns[0].prompt_ids for g in method.play(r, tasks, 1, mode="eval") for e in g.episodes]
    b = [e.turns[0].prompt_ids for g in method.play(r, tasks, 50, mode="eval") for e in g.episodes]
    assert a == b


def test_the_default_credit_is_a_value_broadcast_per_episode():
    method = Method(MethodConfig(), RunView.of(RunConfig(), _Env(EnvConfig())))
    groups = rollout(_Echo()).play_groups([task(0), task(1, raise_at=1)], [2, 2], step=0)
    credit = method.credit(groups, step=0)
    assert isinstance(credit, Credit) and credit.kind == "reward"
    assert credit.values == [[{"*": 1.0}, {"*": 1.0}], [{"*": 0.0}, {"*": 0.0}]]
    assert method.state_dict() == {} and method.env_protocols() == () and method.trainable_roles(0) is None


class _EosChatTokenizer(_ChatTokenizer):
    eos_token, eos_token_id = "<|end|>", 0


class _StopsAtEos(_Echo):
    def generate(self, requests: list[Request], params: SamplingParams, seed: int) -> list[Sample]:
        self.requests.extend(requests)
        return [Sample([ord("o"), ord("k"), 0], [-0.1] * 3, "ok", True) for _ in requests]


def test_an_action_that_ended_its_turn_with_eos_is_not_closed_twice():
    tok = _EosChatTokenizer()
    chat = ChatFormat.from_tokenizer(tok)
    assert chat.end_of_turn == "<|end|>"
    engine = _StopsAtEos()
    r = Rollout(_Env(EnvConfig()), engine, tok, {"agent": "policy"}, ["policy"],
                SamplingParams(1.0, 1.0, 4, ("\n",)), 512, seed=0, chat=chat)
    r.play_groups([task(0, turns=2)], [1], step=0)
    second = "".join("<EOS>" if i == 0 else chr(i) for i in engine.requests[1].prompt_ids)
    assert second == "<|user|>hi<|end|><|assistant|>ok<EOS><|user|> more<|end|><|assistant|>"
