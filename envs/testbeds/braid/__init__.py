"""`braid`: DAGs of typed operations with contracts (InFlowOp's Braid-like benchmark; `env.py` tells
the whole story, `ops.py` holds the values and operations). The names InFlowOp builds on are
re-exported here, so `from envs.testbeds.braid import OPS, BraidTask` reads as the benchmark's API."""

from envs.testbeds.braid.env import BraidConfig, BraidEnv, BraidTask, Node
from envs.testbeds.braid.ops import (
    CATEGORIES,
    DOMAINS,
    OPS,
    Value,
    apply_op,
    input_contract,
    is_type,
    output_contract,
    perturb,
    read,
    render,
)

__all__ = ["CATEGORIES", "DOMAINS", "OPS", "BraidConfig", "BraidEnv", "BraidTask", "Node", "Value",
           "apply_op", "input_contract", "is_type", "output_contract", "perturb", "read", "render"]
