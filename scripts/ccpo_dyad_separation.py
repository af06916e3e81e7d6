"""CCPO's separation figures in thinker_solver's dyad setting on paper (#38): the design check's
correlation and signal-to-noise (experiments/shared_batch.py) on plays of the scripted demonstrator
instead of the warm-started model: no model, no SFT, seconds of CPU, and a pool of groups large enough
that the resampled signal-to-noise is not one batch's luck. Dev tasks only.

    PYTHONPATH=. python scripts/ccpo_dyad_separation.py --groups 1024 --seed 0 [env.drop=0.5 ...]

Joint plays: the demonstrator Thinker (help / silent / slip 60/20/20) and Solver; solo plays paired by
seed (crn: the same hidden draw) with a solo guess drawn apart, as a sampled Solver's would be. Every
arm's own credit and advantages (`credit` at step 0, so v1 is not yet normalizing: Δ, then GRPO). The
label: the Thinker's tier-best response (`replications/ccpo/design.py: thinker_best_response`; `--label
solver_copies`: the Solver's copying of a wrong hint, on the Solver's turns)."""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

import numpy as np

from common.episode import Episode, Group, Turn, step_episodes
from common.fit import resolve
from experiments.shared_batch import (
    Batch,
    advantages_of,
    arm_config,
    correlation,
    credit_gap,
    labels,
    signal_to_noise,
)
from replications import METHODS

ARMS = ("grpo-center", "ccpo-oracle", "ccpo-v1", "ccpo-v2", "ccpo-v2ps")


def play(env: Any, task: dict[str, Any], tier: int, seed: int, variant: str, rng: random.Random) -> Episode:
    ep = env.new_episode(task, random.Random(seed), variant)
    e = Episode(task_id=str(id(task)), tier=tier, tag="main" if variant == "main" else "solo",
                counts_for_training=variant == "main")
    obs, result = ep.start(), None
    while obs is not None:
        solo_guess = variant == "solo" and obs.role == "solver" and not ep.knows
        action = f" #{rng.randrange(env.cfg.num_values)}" if solo_guess else ep.expert_action()
        result = ep.step(action)
        e.turns.append(Turn(obs.role, obs.role, [1], [2], [-0.1], action, trainable=variant == "main"))
        obs = result.next
    e.reward, e.success, e.info = result.reward, result.success, result.info
    return e


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="dyad")
    p.add_argument("--groups", type=int, default=1024, help="groups in the pool (one per task, dev cycled)")
    p.add_argument("--batch", type=int, default=16, help="groups per resampled batch (tasks per step)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default="thinker_best_response",
                   help="a labeler of replications/ccpo/design.py")
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    resolved = {arm: resolve(arm_config("ccpo", arm, a.scale, *a.overrides), METHODS) for arm in ARMS}
    env, size = resolved["grpo-center"].env, resolved["grpo-center"].cfg.trainer.group_size
    dev = [(json.loads(r["task"]), r["tier"]) for r in env.task_set()["dev"]]
    rng = random.Random(a.seed)
    groups = []
    for k in range(a.groups):
        task, tier = dev[k % len(dev)]
        seeds = [rng.randrange(10**9) for _ in range(size)]
        groups.append(Group(f"g{k}", tier, [play(env, task, tier, s, "main", rng) for s in seeds],
                            extra={"solo": [play(env, task, tier, s, "solo", rng) for s in seeds]}))
    episodes = step_episodes(groups)
    main_ids = {id(e) for g in groups for e in g.episodes}
    role = "solver" if a.label.startswith("solver") else "thinker"
    keys = [(i, t) for i, e in enumerate(episodes) if id(e) in main_ids
            for t, turn in enumerate(e.turns) if turn.role == role]
    batch = Batch(groups, keys, episodes)
    label = labels(a.label, "ccpo", batch)
    values = {}
    for arm, r in resolved.items():
        adv = advantages_of(r.method, batch)
        values[arm] = np.array([adv.scalar(k) for k in keys])
    base = signal_to_noise(values["grpo-center"], label, batch, a.batch)
    for arm in ARMS:
        snr = signal_to_noise(values[arm], label, batch, a.batch)
        corr = correlation(values[arm], values["grpo-center"])
        print(json.dumps({"arm": arm, "correlation": round(corr, 3),
                          "credit_gap": round(credit_gap(values[arm], label), 3), "snr": round(snr, 2),
                          "snr_ratio": round(snr / base, 2)}))


if __name__ == "__main__":
    main()
