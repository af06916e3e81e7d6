"""SHARP: Shapley credit for a planner and its tool-using workers (arXiv 2602.08335).

One shared model plays a planner and K workers; the outcome R^b (1 if the final answer is right)
is the only reward of the episode. Broadcast GRPO gives every agent the same group-normalized
R^b, so a worker's own tool choice is seen only through an outcome that also needs the K - 1 other
workers right. SHARP gives each worker m of episode i

    R_{i,m} = R^b_i + lambda_s * phi_{i,m} + lambda_p * R^tool_{i,m}                        (card)

with phi the Shapley value of m in the game v(S) = the re-scored answer when the workers outside
S are replaced by a neutral placeholder, and R^tool the share of m's tool calls that returned a
valid result, then normalizes per agent within one query's G rollouts:

    A_{i,m} = (R_{i,m} - mean_G R_{.,m}) / (std_G R_{.,m} + eps)                            (card)

The planner (not a player of the game: without its plan there is no answer) gets R^b, normalized
within its own role. Arms (`method.credit`): `broadcast` (GRPO), `loo` (Delta_m = v(M) - v(M\\m)
in place of phi), `exact` (exact Shapley, 2^K coalitions), `mc` (permutation sampling).

v(S) is measured by the environment's deterministic replay (`env.replay(record, masked)`): the
planner's composition is replayed with the masked workers' tool results replaced by the
placeholder, without sampling, so it costs no model call or token; every distinct coalition
re-scored is counted (`rescores`, `rescores_total` in metrics.jsonl) as SHARP's extra compute.

`shapley_values`, `shapley_values_mc` and `leave_one_out` are plain functions (no torch).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from common.credit import Estimator, assign_outcome_credit, normalize_by_key
from common.episode import Episode, Group
from common.method import Method, MethodConfig

Player = Hashable
Value = Callable[[frozenset], float]
CREDITS = ("broadcast", "loo", "exact", "mc")


# ---- the pure formulas -------------------------------------------------------------------------
def shapley_values(players: Sequence[Player], value: Value) -> dict[Player, float]:
    """Exact Shapley values (Shapley 1953):

        phi_m = sum_{S subset of M minus m} |S|! (|M| - |S| - 1)! / |M|! * (v(S + m) - v(S)).

    `value` maps a frozenset of players to a float (v of the empty set included). Evaluates v on
    all 2^|M| coalitions, each once.
    """
    players = list(players)
    n = len(players)
    cache: dict[frozenset, float] = {}

    def v(s: frozenset) -> float:
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    phi: dict[Player, float] = {}
    for m in players:
        others = [p for p in players if p != m]
        total = 0.0
        for size in range(n):
            weight = math.factorial(size) * math.factorial(n - size - 1) / math.factorial(n)
            for subset in combinations(others, size):
                s = frozenset(subset)
                total += weight * (v(s | {m}) - v(s))
        phi[m] = total
    return phi


def shapley_values_mc(players: Sequence[Player], value: Value, permutations: int,
                      seed: int) -> tuple[dict[Player, float], dict[Player, float]]:
    """Monte-Carlo Shapley values over random orderings (Castro et al. 2009).

    For each of `permutations` uniformly random orderings, player m's marginal contribution is
    v(players before m, plus m) - v(players before m); phi_m is their mean. Returns (phi, stderr),
    stderr_m = sample std of m's marginal contributions / sqrt(permutations): the estimate's
    standard error (0 when every ordering gives m the same contribution).
    """
    if permutations < 1:
        raise ValueError(f"permutations must be >= 1; got {permutations}")
    players = list(players)
    rng = random.Random(seed)
    cache: dict[frozenset, float] = {}

    def v(s: frozenset) -> float:
        if s not in cache:
            cache[s] = float(value(s))
        return cache[s]

    contributions: dict[Player, list[float]] = {m: [] for m in players}
    for _ in range(permutations):
        order = players[:]
        rng.shuffle(order)
        before: frozenset = frozenset()
        for m in order:
            after = before | {m}
            contributions[m].append(v(after) - v(before))
            before = after
    phi = {m: float(np.mean(c)) if c else 0.0 for m, c in contributions.items()}
    stderr = {m: float(np.std(c, ddof=1) / math.sqrt(len(c))) if len(c) > 1 else float("inf")
              for m, c in contributions.items()}
    return phi, stderr


def leave_one_out(players: Sequence[Player], value: Value) -> dict[Player, float]:
    """Leave-one-out credit: Delta_m = v(M) - v(M minus m) (|M| + 1 evaluations)."""
    grand = frozenset(players)
    full = float(value(grand))
    return {m: full - float(value(grand - {m})) for m in players}


def agent_rewards(outcome: float, contribution: dict[Player, float], tool: dict[Player, float],
                  lambda_s: float, lambda_p: float) -> dict[Player, float]:
    """R_m = R^b + lambda_s * phi_m + lambda_p * R^tool_m for every player m (the card's sum)."""
    return {m: outcome + lambda_s * contribution[m] + lambda_p * tool.get(m, 0.0) for m in contribution}


def per_agent_advantages(rewards_G: list[dict[str, float]], estimator: Estimator) -> list[dict[str, float]]:
    """Normalize each agent's reward within one query's G rollouts (an agent absent from a rollout,
    e.g. no workers after a malformed plan, is left out of that agent's statistics)."""
    flat = [(i, agent, r) for i, rewards in enumerate(rewards_G) for agent, r in rewards.items()]
    advs = normalize_by_key(np.array([r for _, _, r in flat]), [agent for _, agent, _ in flat], estimator)
    out: list[dict[str, float]] = [{} for _ in rewards_G]
    for (i, agent, _), a in zip(flat, advs, strict=True):
        out[i][agent] = float(a)
    return out


# ---- the method -----------------------------------------------------------------------------------
@dataclass
class SHARPConfig(MethodConfig):
    name: str = "sharp"
    estimator: str = "grpo"  # normalization within (query, agent): grpo = (r - mean) / (std + eps) (card)
    credit: str = "exact"  # broadcast (GRPO) | loo (leave-one-out) | exact (Shapley) | mc (permutation Shapley)
    lambda_s: float = 0.9  # weight of the Shapley (or leave-one-out) term [S: 0.9]
    lambda_p: float = 0.1  # weight of the tool-process reward [S: 0.1]
    permutations: int = 32  # credit=mc only: orderings sampled per episode
    paper_data: str | None = None  # scale=paper only: local folder with MuSiQue, GAIA-text, WebWalkerQA, FRAMES


def worker_key(m: int) -> str:
    return f"worker_{m}"


class SHARP(Method):
    Config = SHARPConfig

    def __init__(self, cfg: SHARPConfig, run: Any, env: Any):
        super().__init__(cfg, run, env)
        self.cfg: SHARPConfig = cfg
        self.rescores_total = 0

    def validate(self) -> None:
        if self.cfg.credit not in CREDITS:
            raise ValueError(f"method.credit must be one of {' | '.join(CREDITS)}; got {self.cfg.credit!r}")
        if self.cfg.credit != "broadcast" and not hasattr(self.env, "replay"):
            raise ValueError(f"method.credit={self.cfg.credit} needs an environment with counterfactual replay "
                             f"(env.replay); {self.env.name} has none: use env=toolplan")
        if self.cfg.permutations < 1:
            raise ValueError(f"method.permutations must be >= 1; got {self.cfg.permutations}")
        if self.run.scale == "paper":
            from pathlib import Path

            if not self.cfg.paper_data or not Path(self.cfg.paper_data).is_dir():
                raise ValueError(
                    f"scale=paper needs the paper's data sets locally; method.paper_data={self.cfg.paper_data!r} is not a "
                    "folder: put MuSiQue, GAIA (text), WebWalkerQA and FRAMES in one local folder and pass "
                    "method.paper_data=<folder> (and model.path=<local Qwen3-8B>)")

    def state_dict(self) -> dict[str, Any]:
        return {"rescores_total": self.rescores_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rescores_total = int(state.get("rescores_total", 0))

    # ---- credit ---------------------------------------------------------------------------------
    def contributions(self, record: dict[str, Any] | None, n_workers: int, salt: int) -> tuple[dict[int, float], int, float]:
        """phi (or Delta) of each worker, the number of coalitions re-scored, the mean MC stderr."""
        players = list(range(n_workers))
        if record is None or not players:
            return {m: 0.0 for m in players}, 0, 0.0
        seen: set[frozenset] = set()

        def value(coalition: frozenset) -> float:
            seen.add(coalition)
            return self.env.replay(record, frozenset(players) - coalition).value

        stderr = 0.0
        if self.cfg.credit == "loo":
            phi = leave_one_out(players, value)
        elif self.cfg.credit == "exact":
            phi = shapley_values(players, value)
        else:
            phi, se = shapley_values_mc(players, value, self.cfg.permutations, seed=salt)
            stderr = float(np.mean(list(se.values())))
        return phi, len(seen), stderr

    def credit(self, groups: list[Group], step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        episodes = [e for g in groups for e in g.episodes]
        rescores, stderrs = 0, []
        if self.cfg.credit == "broadcast":
            assign_outcome_credit(groups, self.estimator)
        else:
            for gi, group in enumerate(groups):
                rewards_G = []
                for ei, ep in enumerate(group.episodes):
                    record = ep.info.get("record")
                    n_workers = len(ep.turns_of("worker"))
                    phi, n, se = self.contributions(record, n_workers, salt=step * 1_000_003 + gi * 1009 + ei)
                    rescores += n
                    stderrs.append(se)
                    kinds = record["tool_kinds"] if record else []
                    tool = {m: float(kinds[m] in ("value", "distractor")) if m < len(kinds) else 0.0 for m in phi}
                    r = agent_rewards(ep.reward, phi, tool, self.cfg.lambda_s, self.cfg.lambda_p)
                    rewards_G.append({"planner": ep.reward, **{worker_key(m): x for m, x in r.items()}})
                for ep, adv in zip(group.episodes, per_agent_advantages(rewards_G, self.estimator), strict=True):
                    assign_agent_advantages(ep, adv)
        self.rescores_total += rescores
        out = {"rescores": float(rescores), "rescores_total": float(self.rescores_total),
               "rescores_per_episode": rescores / max(len(episodes), 1), "time_credit_s": time.perf_counter() - t0,
               **worker_credit_metrics(episodes)}
        if self.cfg.credit == "mc":
            out["mc_stderr_mean"] = float(np.mean(stderrs)) if stderrs else 0.0
        return out


def assign_agent_advantages(episode: Episode, adv: dict[str, float]) -> None:
    """Planner turns get the planner's advantage; the m-th worker turn gets worker m's."""
    m = 0
    for turn in episode.turns:
        if turn.role == "worker":
            turn.advantage = adv.get(worker_key(m), 0.0)
            m += 1
        else:
            turn.advantage = adv.get(turn.role, 0.0)


def worker_credit_metrics(episodes: list[Episode]) -> dict[str, float]:
    """What the workers did this step, and how their credit separated good from bad tool calls.

    `credit_gap`: mean advantage of worker turns that called the right tool minus that of worker
    turns that called the distractor (broadcast credit dilutes this gap as K grows).
    """
    kinds: list[str] = []
    advs: list[float] = []
    for ep in episodes:
        record = ep.info.get("record")
        workers = ep.turns_of("worker")
        if record is None:
            continue
        for turn, kind in zip(workers, record["tool_kinds"], strict=False):
            kinds.append(kind)
            advs.append(0.0 if turn.advantage is None else turn.advantage)
    out: dict[str, float] = {}
    if kinds:
        out["distractor_rate"] = kinds.count("distractor") / len(kinds)
        out["tool_error_rate"] = (kinds.count("error") + kinds.count("invalid")) / len(kinds)
        right = [a for a, k in zip(advs, kinds, strict=True) if k == "value"]
        bad = [a for a, k in zip(advs, kinds, strict=True) if k == "distractor"]
        if right and bad:
            out["credit_gap"] = float(np.mean(right) - np.mean(bad))
    slots = [ep.info["slot_accuracy"] for ep in episodes if "slot_accuracy" in ep.info]
    if slots:
        out["slot_accuracy"] = float(np.mean(slots))
    return out
