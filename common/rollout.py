"""Play episodes: every live episode advances one action per round, and all the model actions of a
round go to the engine in one call (the engine batches them per adapter).

Each role of the environment is a seat bound to a LoRA adapter (trainable or frozen) or to the
environment's scripted demonstrator (`model.roles.<role>=scripted`). A role's context is kept as
token ids: prompt tokens, then the role's own sampled tokens exactly as sampled, then the next
observation's tokens. Nothing sampled is ever re-tokenized.

Compute is counted per play tag (`main`, and counterfactual tags such as `solo` or `masked`):
generated tokens and model calls (one call = one sampled action).

Every environment step runs under `cpu_time_limit(env.cfg.step_cpu_s)` (`envs/api/base.py`): a
step that raises, or that uses more CPU time than its limit, ends its episode as a faulted invalid
action (`Episode.faulted`, an `invalid_action` and a `fault` event saying why), never the run.
"""

from __future__ import annotations

import hashlib
import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from common.chat import ChatFormat, demonstrated_action_ids, observation_text
from common.engines.base import Engine, Request, SamplingParams
from common.episode import Episode, Event, Group, Task, Turn, tasks_of
from envs.api.base import Environment, EpisodeState, Observation, StepResult, StepTimeLimit, cpu_time_limit

MAX_ROUNDS = 512  # an environment that runs longer than this has a bug


def derive_seed(*parts: Any) -> int:
    """A stable 63-bit seed from any parts (independent of PYTHONHASHSEED)."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@dataclass
class PlaySpec:
    """One episode to play."""

    task: Task
    variant: str = "main"  # environment variant (counterfactual plays)
    tag: str = "main"  # compute-accounting tag
    trainable: bool = True  # False: scored for credit but never trained on


@dataclass
class _Live:
    state: EpisodeState
    episode: Episode
    obs: Observation
    contexts: dict[str, list[int]]
    step_cpu_s: float  # its environment's limit on one step's CPU time


class Rollout:
    def __init__(self, env: Environment, engine: Engine, tokenizer: Any, role_adapter: dict[str, str],
                 trainable_adapters: list[str], params: SamplingParams, max_length: int, seed: int,
                 chat: ChatFormat | None = None):
        self.env = env
        self.engine = engine
        self.tokenizer = tokenizer
        self.role_adapter = role_adapter
        self.trainable_adapters = set(trainable_adapters)
        self.params = params
        self.max_length = max_length
        self.seed = seed
        self.chat = chat  # the tokenizer's chat template around observations (instruct models)
        # "/rank<r>" on rank r > 0 of a multi-process run (common.trainer): its share of a step's (or
        # an evaluation's) tasks plays with seeds of its own; "" keeps the single-process seeds
        self.rank_salt = ""
        self.tokens_by_tag: dict[str, int] = defaultdict(int)
        self.calls_by_tag: dict[str, int] = defaultdict(int)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """`encode` of each text, in one call of the Rust tokenizer when there is one."""
        backend = getattr(self.tokenizer, "backend_tokenizer", None)
        if backend is None:
            return [self.encode(t) for t in texts]
        return [e.ids for e in backend.encode_batch(texts, add_special_tokens=False)]

    # ---- the public entry points --------------------------------------------------------------
    def play_groups(self, tasks: Sequence[Task | Mapping[str, Any]], sizes: list[int], step: int,
                    mode: str = "train", variant: str = "main", tag: str = "main",
                    trainable: bool | None = None, seed_tag: str | None = None,
                    demonstrator: Environment | None = None) -> list[Group]:
        """`sizes[i]` episodes of `tasks[i]`, played together; one Group per task.

        `mode="train"` seeds from (run seed, step, tag); `mode="eval"` plays the same environment
        seeds at every evaluation (step -1) and never trains. `tag` names the play for compute
        accounting (`main`, or a counterfactual such as `solo`); only `main` plays train by default.
        `seed_tag` (training only): episode k takes the environment seed of episode k of the plays
        tagged `seed_tag` at this step (common random numbers: a counterfactual play paired with the
        play it is the counterfactual of); the model's sampling seeds stay the play's own.
        `demonstrator`: the episodes are this environment's (the same tasks, e.g. with its injected
        errors turned off) and every model seat acts as its scripted demonstrator, teacher-forced:
        the demonstrated tokens become trainable turns (behaviour log-probabilities 0: only the
        strictly on-policy update, where the ratio is 1, trains on them as supervised data).
        """
        if mode == "eval":
            salt = f"eval/{variant}" if tag == "main" else f"eval/{variant}/{tag}"
            step, trainable, acct = -1, False, "eval" if tag == "main" else f"eval/{tag}"
        else:
            salt, acct = f"train/{tag}", tag
            trainable = tag == "main" if trainable is None else trainable
        salt += self.rank_salt
        tasks = tasks_of(tasks)
        episode_salt = (f"train/{seed_tag}{self.rank_salt}" if seed_tag is not None and mode != "eval"
                        else None)
        specs = [PlaySpec(t, variant, acct, trainable)
                 for t, n in zip(tasks, sizes, strict=True) for _ in range(n)]
        episodes = self.play(specs, step, salt=salt, episode_salt=episode_salt, demonstrator=demonstrator)
        groups, k = [], 0
        for task, n in zip(tasks, sizes, strict=True):
            groups.append(Group(task.id, task.tier, episodes[k : k + n]))
            k += n
        return groups

    def play(self, specs: list[PlaySpec], step: int, salt: str = "train",
             params: SamplingParams | None = None, episode_salt: str | None = None,
             demonstrator: Environment | None = None) -> list[Episode]:
        """Play every spec to the end; returns episodes in spec order. Episode k's environment rng is
        seeded from (run seed, step, `episode_salt` or `salt`, k); the model's sampling from `salt`.
        With a `demonstrator` environment, its scripted demonstrator acts for every model seat
        (`play_groups`)."""
        params = params or self.params
        env = demonstrator or self.env
        stop = env.stop[0] if env.stop else ""
        live: list[_Live] = []
        for k, spec in enumerate(specs):
            rng = random.Random(derive_seed(self.seed, step, episode_salt or salt, k))
            task = Task.of(spec.task)
            state = env.new_episode(task.data, rng, spec.variant)
            episode = Episode(task.id, task.tier, tag=spec.tag, counts_for_training=spec.trainable)
            live.append(_Live(state, episode, state.start(), {}, env.cfg.step_cpu_s))
        episodes = [slot.episode for slot in live]
        try:
            self._rounds(live, step, salt, params, demonstrator, stop)
        finally:
            if self.engine is not None:  # None: a scripted play (the demonstrator answers every turn)
                self.engine.forget()  # these episodes send no more requests: what it kept goes
        return episodes

    def _rounds(self, live: list[_Live], step: int, salt: str, params: SamplingParams,
                demonstrator: Environment | None, stop: str) -> None:
        for round_idx in range(MAX_ROUNDS):
            if not live:
                return
            requests, owners = [], []
            eos = getattr(self.tokenizer, "eos_token_id", None)
            texts = [observation_text(self.chat, slot.obs.text,
                                      slot.obs.new_context or slot.obs.role not in slot.contexts,
                                      bool(slot.contexts.get(slot.obs.role))
                                      and slot.contexts[slot.obs.role][-1] == eos)
                     for slot in live]
            for slot, obs_ids in zip(live, self.encode_many(texts), strict=True):
                role = slot.obs.role
                ctx = ([] if slot.obs.new_context else slot.contexts.get(role, [])) + obs_ids
                adapter = self.role_adapter[role]
                if adapter == "scripted":
                    self._apply(slot, Turn(role, None, [], [], [], slot.state.expert_action(),
                                           prompt_text=slot.obs.text, trainable=False), ctx)
                elif len(ctx) + params.max_new_tokens > self.max_length:
                    # the context ran out: the episode ends unfinished (reward 0), flagged so that the
                    # method decides whether it trains (`Method.excluded`) and evaluation counts it
                    slot.episode.truncated = True
                    slot.episode.events.append(Event("info", len(slot.episode.turns),
                                                     {"context_overflow": len(ctx)}))
                    slot.episode.info.update(slot.state.summary())  # its behaviour figures so far
                    slot.obs = None  # type: ignore[assignment]
                elif demonstrator is not None:
                    action = slot.state.expert_action()
                    ids = demonstrated_action_ids(self.tokenizer, action, stop)
                    self._apply(slot, Turn(role, adapter, ctx, ids, [0.0] * len(ids), action,
                                           prompt_text=slot.obs.text,
                                           trainable=adapter in self.trainable_adapters
                                           and slot.episode.counts_for_training), ctx)
                else:
                    requests.append(Request(ctx, adapter))
                    owners.append((slot, ctx, adapter))
            if requests:
                samples = self.engine.generate(requests, params,
                                               seed=derive_seed(self.seed, step, salt, round_idx))
                for (slot, ctx, adapter), s in zip(owners, samples, strict=True):
                    tag = slot.episode.tag
                    self.tokens_by_tag[tag] += len(s.action_ids)
                    self.calls_by_tag[tag] += 1
                    turn = Turn(slot.obs.role, adapter, ctx, s.action_ids, s.logprobs, s.text,
                                prompt_text=slot.obs.text,
                                trainable=adapter in self.trainable_adapters
                                and slot.episode.counts_for_training,
                                truncated=not s.stopped)
                    self._apply(slot, turn, ctx)
            live = [slot for slot in live if slot.obs is not None]
        raise RuntimeError(f"{self.env.name}: episodes still running after {MAX_ROUNDS} rounds; "
                           "the environment must cap its turns")

    def _apply(self, slot: _Live, turn: Turn, ctx: list[int]) -> None:
        episode = slot.episode
        index = len(episode.turns)
        episode.turns.append(turn)
        slot.contexts[turn.role] = ctx + turn.action_ids
        try:
            with cpu_time_limit(slot.step_cpu_s):
                result = slot.state.step(turn.text)
        except (Exception, StepTimeLimit) as e:  # an environment bug or a runaway step must not kill training
            detail = f"{type(e).__name__}: {str(e)[:200]}"
            result = StepResult(None, 0.0, [Event("invalid_action", index, {"error": detail}),
                                            Event("fault", index, {"error": detail})], info={"env_error": 1})
        for event in result.events:
            event.turn = index  # events returned by step() belong to the action just taken
            episode.events.append(event)
            if event.kind == "fault":
                episode.faulted = True
        if result.next is None:
            episode.reward = float(result.reward)
            episode.success = bool(result.success)
            episode.info.update(result.info)
            slot.obs = None  # type: ignore[assignment]
        else:  # a reward returned before the end is not kept: every method reads the outcome
            slot.obs = result.next

    def counters(self) -> dict[str, int]:
        """Cumulative generated tokens and model calls, in total and per tag."""
        out = {"generated_tokens_total": sum(self.tokens_by_tag.values()),
               "model_calls_total": sum(self.calls_by_tag.values())}
        for tag in sorted(self.tokens_by_tag):
            out[f"generated_tokens_total/{tag}"] = self.tokens_by_tag[tag]
            out[f"model_calls_total/{tag}"] = self.calls_by_tag[tag]
        return out
