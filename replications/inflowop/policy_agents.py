"""InFlowOp's policy agents: LoRA adapters of the suite's model, warm-started on a few operation categories.

Issue #22 asks for a pool with "policies of the suite (adapters warm-started on different operation
types, their competence measured, not declared)". Every choice here is ours [I]:

- **The agent.** One LoRA adapter (`peft`, the model's `lora_rank` / `lora_targets`) on the run's
  base model (the tiny model at `scale=cpu`, SmolLM2-135M at `scale=small`), added next to the
  run's own adapter. It computes one operation by generating the output text for braid's node
  prompt (`agents.prompt`: `OP sort | 5 1 3\\nOUT:`); the text is parsed by braid's reader and
  judged by the contracts like any agent's value (unreadable: a malformed value, never an error).
- **The warm start.** SFT (`common.warmstart.sft`, the core's loop: action tokens only, the adapter's
  parameters only) on braid's scripted demonstrator (`BraidEpisode.expert_action`, its injected
  error rate `env.demo_error` included) restricted to the nodes whose operation is in the agent's
  categories, from the `train` split. Cached under `work_dir/inflowop-agents/<hash>` by a hash of
  everything it depends on (base model and its warm start, environment, categories, SFT settings,
  seed), so the seeds and arms of a replication train each adapter once.
- **The card** declares the categories the adapter was trained on (`agents.model_agent`).
- **Competence** is measured, never declared: `measure_competence` runs every agent on every node
  of the `dev` split from the right inputs and scores its value against the truth, per category
  (the dev split's right answers, for reporting only). The optimizer never sees it: its profiles
  come from the agent's own runs as the contracts judge them, as for every agent.
- **Batching.** `Answerer` answers a batch of operations (many tasks' runs side by side,
  `execute.drive`) with one `engine.generate` call; the HF engine groups the requests by adapter
  and decodes each group together.
"""

from __future__ import annotations

import hashlib
import json
import random
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from filelock import FileLock

from common.chat import ChatFormat, demonstrated_action_ids, observation_text
from common.config import ModelConfig, SFTConfig
from common.engines.base import Engine, Request, SamplingParams
from common.episode import tasks_of
from common.warmstart import fingerprint, sft, warm_start_code
from envs.testbeds.braid import OPS, BraidEnv, BraidTask
from replications.inflowop.agents import Ask, ModelAgent, ScriptedAgent, prompt, read_output

if TYPE_CHECKING:
    from common.method import RunView
    from replications.inflowop.method import InFlowOpConfig


@dataclass(frozen=True)
class AgentTraining:
    """How each policy agent's adapter is warm-started (method.agent_* settings) [I]."""

    steps: int = 300  # SFT steps per adapter
    lr: float = 3e-3  # the core's SFT rate for the tiny model (SmolLM2 wants ~2e-5: scale=small sets it)
    batch_size: int = 32
    demos: int = 256  # train tasks demonstrated (only their nodes of the agent's categories are kept)
    seed: int = 0  # one adapter per agent for every run seed (the pool is the same across paired seeds)


def agent_demonstrations(env: BraidEnv, tokenizer: Any, categories: Sequence[str], n_tasks: int, seed: int,
                         chat: ChatFormat | None = None) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, action ids) for every node of `categories` in braid's scripted plays of the first
    `n_tasks` train tasks: the prompt as a policy agent sees the node, the demonstrator's action
    (with its injected errors) as the core's warm start tokenizes it."""
    rng = random.Random(seed)
    stop = env.stop[0] if env.stop else ""
    train = env.task_set()["train"]
    pairs = []
    for row in train.select(range(min(n_tasks, len(train)))):
        episode: Any = env.new_episode(json.loads(row["task"]), rng)
        episode.start()
        for node in episode.task.nodes:
            action = episode.expert_action()
            if OPS[node.op].category in categories:
                text = prompt(node.op, node.k, episode.task.inputs_of(node, episode.values))
                ids = tokenizer.encode(observation_text(chat, text, True), add_special_tokens=False)
                pairs.append((ids, demonstrated_action_ids(tokenizer, action, stop)))
            episode.step(action)
    if not pairs:
        raise ValueError(f"no train node of categories {list(categories)} in the first {n_tasks} train "
                         "tasks: raise method.agent_demos or env.train_size")
    return pairs


def _lora_names(model: Any, adapter: str) -> list[str]:
    tag = f".{adapter}."
    return [n for n, _ in model.named_parameters() if "lora_" in n and tag in n]


def add_agents(policy: Any, agents: Sequence[ModelAgent], env: BraidEnv, run_model: ModelConfig,
               run_sft: SFTConfig, training: AgentTraining, work_dir: str, chat: ChatFormat | None = None
               ) -> dict[str, dict[str, Any]]:
    """Add each agent's adapter to `policy.model` (a peft model), warm-started by SFT on its
    categories, or loaded from the cache when that exact warm start was done before. Returns, per
    agent, its warm-start record (`cached`: loaded, not retrained; SFT losses; seconds)."""
    from peft import LoraConfig, PeftModel, get_peft_model_state_dict, set_peft_model_state_dict

    model = policy.model
    if not isinstance(model, PeftModel):
        raise ValueError("policy agents are LoRA adapters next to the run's own: the run's policy has no "
                         "adapter (model.roles maps every role to 'scripted'); keep the default adapter")
    lora = LoraConfig(r=run_model.lora_rank, lora_alpha=run_model.lora_alpha, lora_dropout=0.0,
                      target_modules=list(run_model.lora_targets), bias="none", task_type="CAUSAL_LM")
    records: dict[str, dict[str, Any]] = {}
    # what the adapters depend on besides their settings: braid's code, the SFT code and this module
    # (its demonstrations), so an edit there trains new adapters instead of loading stale ones
    code = warm_start_code(env) | {__name__: hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]}
    for agent in agents:
        key = fingerprint(run_model.__dict__ | {"roles": None, "frozen_adapters": None},
                          asdict(run_sft) if run_sft.enabled else None, env.cfg, list(agent.trained_on),
                          asdict(training), code)
        folder = Path(work_dir) / "inflowop-agents" / key
        folder.parent.mkdir(parents=True, exist_ok=True)
        if agent.adapter not in model.peft_config:
            with torch.random.fork_rng():
                torch.manual_seed(training.seed)
                model.add_adapter(agent.adapter, lora)
        with FileLock(str(folder) + ".lock"):
            if (folder / "record.json").exists():
                set_peft_model_state_dict(model, torch.load(folder / "adapter.pt"),
                                          adapter_name=agent.adapter)
                records[agent.name] = json.loads((folder / "record.json").read_text()) | {"cached": True}
                continue
            start = time.perf_counter()
            pairs = agent_demonstrations(env, policy.tokenizer, agent.trained_on, training.demos,
                                         training.seed, chat)
            model.set_adapter(agent.adapter)
            mine = set(_lora_names(model, agent.adapter))
            for name, p in model.named_parameters():
                p.requires_grad_(name in mine)
            cfg = SFTConfig(enabled=True, steps=training.steps, lr=training.lr,
                            batch_size=training.batch_size, demos=training.demos, seed=training.seed)
            with torch.random.fork_rng():
                torch.manual_seed(training.seed)
                losses = sft(model, pairs, cfg, training.seed, policy.tokenizer.pad_token_id)
            for p in model.parameters():
                p.requires_grad_(False)
            # peft's active adapter changed under the policy: its next `use` re-activates
            policy._active = None
            record = {"key": key, "categories": list(agent.trained_on), "pairs": len(pairs),
                      "loss_first": losses[0], "loss_last": losses[-1],
                      "seconds": round(time.perf_counter() - start, 2)}
            tmp = folder.with_suffix(".tmp")
            tmp.mkdir(parents=True, exist_ok=True)
            torch.save(get_peft_model_state_dict(model, adapter_name=agent.adapter), tmp / "adapter.pt")
            (tmp / "record.json").write_text(json.dumps(record, indent=1))
            tmp.rename(folder)
            records[agent.name] = record | {"cached": False}
    if policy.adapters:
        policy._active = None
        policy.activate(policy.adapters[0])  # the run's own adapter trainable again, as the core left it
    return records


@dataclass
class Answerer:
    """Policy agents' operations -> their generated texts: one `engine.generate` call per batch."""

    engine: Engine
    tokenizer: Any
    params: SamplingParams
    seed: int
    chat: ChatFormat | None = None
    calls: int = 0  # generate calls made
    asks: int = 0  # operations answered
    seconds: float = 0.0  # wall time inside generate
    _ids: dict[str, list[int]] = field(default_factory=dict)

    def __call__(self, asks: list[Ask]) -> list[str]:
        requests = []
        for ask in asks:
            ids = self._ids.get(ask.prompt)
            if ids is None:
                ids = self._ids[ask.prompt] = self.tokenizer.encode(
                    observation_text(self.chat, ask.prompt, True), add_special_tokens=False)
            requests.append(Request(ids, ask.adapter))
        start = time.perf_counter()
        samples = self.engine.generate(requests, self.params, seed=self.seed * 1_000_003 + self.calls)
        self.seconds += time.perf_counter() - start
        self.calls += 1
        self.asks += len(asks)
        return [s.text for s in samples]


def measure_competence(tasks: Sequence[BraidTask], scripted: Sequence[ScriptedAgent],
                       models: Sequence[ModelAgent], answer: Answerer | None, seed: int = 0
                       ) -> dict[str, dict[str, dict[str, float]]]:
    """Per agent and category: the share of nodes it computes right from the right inputs
    (`accuracy`), the share of unreadable/malformed outputs (`malformed`) and the node count `n`,
    over every node of `tasks` (the dev split). Scored against the truth: for reporting only, the
    optimizer never reads it. Each policy agent answers all nodes in one batch."""
    nodes = [(t, n, t.truth()) for t in tasks for n in t.nodes]
    outputs: dict[str, list[Any]] = {}
    rng = random.Random(f"competence/{seed}")
    for agent in scripted:
        outputs[agent.name] = [agent.attempt(n.op, n.k, t.inputs_of(n, truth), 0, rng)
                               for t, n, truth in nodes]
    for model_agent in models:
        if answer is None:
            raise ValueError("measuring a policy agent needs an answer function")
        asks = [Ask(model_agent.name, model_agent.adapter, prompt(n.op, n.k, t.inputs_of(n, truth)))
                for t, n, truth in nodes]
        outputs[model_agent.name] = [read_output(text, n.op)
                                     for text, (_, n, _) in zip(answer(asks), nodes, strict=True)]
    table: dict[str, dict[str, dict[str, float]]] = {}
    for name, values in outputs.items():
        tally: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
        for value, (_, n, truth) in zip(values, nodes, strict=True):
            row = tally[OPS[n.op].category]
            row[0] += value == truth[n.index]
            row[1] += value is None
            row[2] += 1
        table[name] = {c: {"accuracy": r[0] / r[2], "malformed": r[1] / r[2], "n": r[2]}
                       for c, r in sorted(tally.items())}
    return table


def policy_pool(rollout: Any, models: list[ModelAgent], env: BraidEnv, cfg: InFlowOpConfig, run: RunView
                ) -> tuple[Answerer, dict[str, dict[str, Any]], dict[str, dict[str, dict[str, float]]]]:
    """Warm-start (or load) the policy agents' adapters on the run's model, then measure their competence
    on the dev split: the answer function that generates their operations, their warm-start records and
    their competence per category."""
    policy = getattr(rollout.engine, "policy", None)
    if policy is None:
        raise ValueError("policy agents are adapters of the HF engine's policy: set engine=hf")
    training = AgentTraining(cfg.agent_steps, cfg.agent_lr, cfg.agent_batch_size, cfg.agent_demos,
                             cfg.agent_seed)
    records = add_agents(policy, models, env, run.model, run.sft, training, run.work_dir, rollout.chat)
    answer = Answerer(rollout.engine, rollout.tokenizer, SamplingParams(temperature=cfg.agent_temperature,
                      max_new_tokens=cfg.agent_max_tokens, stop=env.stop), run.seed, rollout.chat)
    dev = [BraidTask.parse(t.data) for t in tasks_of(env.task_set()["dev"])]
    return answer, records, measure_competence(dev, (), models, answer)
