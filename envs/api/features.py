"""What an environment offers and a method needs: a small typed vocabulary (`make compare`, #23).

Each environment class declares `offers` (a frozenset of `Feature`), each method class `needs`; a
method applies to an environment when everything it needs is offered. `experiments/compare.py`
builds the matrix of applicable (method, environment) pairs from these declarations alone, and its
test checks that every applicable pair resolves to a valid config. The declarations describe the
method's main arm (the one `make compare` runs): a broadcast-credit arm needs no replay, say, but
an exact Shapley credit does.

A new feature is one line in `FEATURES` (and the `Feature` literal); what it promises is its
description, and where a runtime protocol exists (`counterfactual_replay`) a test checks that the
declaration and the protocol agree.
"""

from __future__ import annotations

from typing import Literal, get_args

Feature = Literal[
    "single_agent",
    "multi_agent_shared_outcome",
    "counterfactual_replay",
    "two_role_dialogue",
    "majority_vote",
    "provenance_events",
    "env_pool_with_audit",
    "task_families",
    "typed_operation_dags",
]

FEATURES: dict[str, str] = {
    "single_agent": "one trained role plays the whole episode (a simulated user or tool may answer it)",
    "multi_agent_shared_outcome": "two or more roles act in one episode and share its one outcome",
    "counterfactual_replay": "a finished episode re-scored with some agents masked, without sampling "
                             "(envs.api.protocols.CounterfactualReplay: a coalition's value)",
    "two_role_dialogue": "a thinker writes to a solver who answers; the solver can also play alone "
                         "(variant 'solo')",
    "majority_vote": "several voters answer and the majority decides (variants 'without<i>')",
    "provenance_events": "the environment reports which earlier turn each action used (provenance events)",
    "env_pool_with_audit": "train tasks carry audit labels of their defects, so a task pool can be filtered",
    "task_families": "tasks in families sharing a hidden procedure, with a curate turn between tasks",
    "typed_operation_dags": "tasks are DAGs of typed operations with contracts, played by an agent pool",
}

assert set(FEATURES) == set(get_args(Feature)), "FEATURES and Feature must list the same names"

