"""The prototype of #37: which `toolhops` setting gives Shapley credit information that neither broadcast
nor own-slot credit has? Before any training, on groups the demonstrator plays (the warm start's error
rates, no model), every credit's per-worker advantages are computed on the same episodes (SHARP's own
`credit` and `common.credit.to_advantages`), and Shapley's are compared with broadcast's and own-slot's:
their correlation over worker turns and the share of a worker's rollout pairs (same group, same worker)
whose order Shapley reverses (`experiments.shared_batch.reversal_share`).

    PYTHONPATH=. python -m replications.sharp.candidates      # a table, about a minute of CPU

The chosen setting is the one where exact Shapley correlates below 0.9 with both and reverses pairs
(CARD.md, #37).
"""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np

from common.config import RunConfig, build_dataclass
from common.credit import to_advantages
from common.episode import Episode, Group, Turn
from common.method import RunView
from experiments.shared_batch import correlation, reversal_share

# name -> (the candidate, toolhops settings)
CHAIN, PAR = {"mode": "chain"}, {"mode": "parallel"}
RED = {"mode": "parallel", "extra_workers": 2}  # two workers beyond the facts: substitutes
CANDIDATES: dict[str, tuple[str, dict[str, Any]]] = {
    "chain-k4-soft": ("#17's dependent hops", {**CHAIN, "k": 4}),
    "chain-k4-exact": ("complements (every hop needed, answer alone)", {**CHAIN, "k": 4, "value": "exact"}),
    "par-k3-exact": ("complements (every fact needed, answer alone)", {**PAR, "k": 3, "value": "exact"}),
    "par-k3-harm": ("harmful (no redundancy)", {**PAR, "k": 3, "value": "harm"}),
    "red-k3-soft": ("substitutes", {**RED, "k": 3}),
    "red-k3-exact": ("substitutes, answer alone", {**RED, "k": 3, "value": "exact"}),
    "red-k3-harm": ("substitutes + harmful", {**RED, "k": 3, "value": "harm"}),
    "red-k4-exact": ("substitutes, answer alone, K=4", {**RED, "k": 4, "value": "exact"}),
    "red-k4-harm": ("substitutes + harmful, K=4", {**RED, "k": 4, "value": "harm"}),
}
CREDITS = ("broadcast", "local", "loo", "mc", "exact")


def scripted_groups(env: Any, n_tasks: int, group_size: int, seed: int) -> list[Group]:
    """Groups of `group_size` episodes per task, played by the environment's demonstrator."""
    rng, out = random.Random(seed), []
    for t in range(n_tasks):
        task, eps = env.generate_task(rng, env.cfg.k), []
        for _ in range(group_size):
            ep, state = Episode(f"t{t}", env.cfg.k), env.new_episode(task, random.Random(rng.random()))
            obs = state.start()
            while obs is not None:
                ep.turns.append(Turn(obs.role, "policy", [1], [2], [-0.1], "x"))
                r = state.step(state.expert_action())
                obs = r.next
            ep.reward, ep.success, ep.info = r.reward, r.success, r.info
            eps.append(ep)
        out.append(Group(f"t{t}", env.cfg.k, eps))
    return out


def worker_advantages(env: Any, groups: list[Group], credit: str, weights: str = "matched",
                      lambda_s: float = 1.0, lambda_p: float = 0.0) -> tuple[np.ndarray, list[Any]]:
    """Every worker turn's advantage under `credit`, and its cell (group, worker) for pair comparisons."""
    from replications.sharp.method import SHARP, SHARPConfig

    cfg = build_dataclass(SHARPConfig, {"credit": credit, "weights": weights, "lambda_s": lambda_s,
                                      "lambda_p": lambda_p}, "method")
    m = SHARP(cfg, RunView.of(RunConfig(scale="cpu"), env))
    adv = to_advantages(groups, m.credit(groups, 0), m.agent_of, m.estimator, m.excluded)
    values, cells, offset = [], [], 0
    for g, group in enumerate(groups):
        for i, ep in enumerate(group.episodes):
            for t, turn in enumerate(ep.turns):
                if turn.role == "worker":
                    values.append(adv.scalar((offset + i, t)))
                    cells.append((g, m.agent_of(ep, t)))
        offset += len(group.all_episodes())
    return np.array(values), cells


def figures(settings: dict[str, Any], n_tasks: int = 32, group_size: int = 8, seed: int = 0,
            weights: str = "matched", lambda_s: float = 1.0) -> dict[str, float]:
    """Exact Shapley against broadcast and own-slot (and leave-one-out) on one scripted batch."""
    from envs.testbeds.toolhops import ToolHopsConfig, ToolHopsEnv

    env = ToolHopsEnv(ToolHopsConfig(train_size=8, heldout_size=8, dev_size=8, **settings))
    groups = scripted_groups(env, n_tasks, group_size, seed)
    adv = {c: worker_advantages(env, groups, c, weights, lambda_s) for c in CREDITS}
    cells = adv["exact"][1]
    exact = adv["exact"][0]
    return {"success": float(np.mean([e.success for g in groups for e in g.episodes])),
            "corr_broadcast": correlation(exact, adv["broadcast"][0]),
            "corr_local": correlation(exact, adv["local"][0]),
            "corr_loo": correlation(exact, adv["loo"][0]),
            "corr_mc": correlation(exact, adv["mc"][0]),
            "rev_broadcast": reversal_share(exact, adv["broadcast"][0], cells),
            "rev_local": reversal_share(exact, adv["local"][0], cells),
            "rev_loo": reversal_share(exact, adv["loo"][0], cells)}


def main(argv: list[str] | None = None) -> int:
    args = argv or sys.argv[1:]
    weights, lambda_s = (args[0] if args else "matched"), float(args[1]) if len(args) > 1 else 1.0
    cols = ("success", "corr_broadcast", "corr_local", "corr_loo", "corr_mc", "rev_broadcast", "rev_local",
            "rev_loo")
    print(f"weights={weights}, lambda_s={lambda_s}, lambda_p=0; exact Shapley vs each credit "
          "(32 tasks x G=8, demonstrator play)")
    print(f"| setting | candidate | {' | '.join(cols)} |\n|---|---|{'---|' * len(cols)}")
    for name, (what, settings) in CANDIDATES.items():
        f = figures(settings, weights=weights, lambda_s=lambda_s)
        print(f"| {name} | {what} | " + " | ".join(f"{f[c]:.3f}" for c in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
