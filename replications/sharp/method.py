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
within its own role. Arms (`method.credit`): `broadcast` (GRPO), `local` (the control of #17: phi
replaced by worker m's own-slot reward, 1 if its result is the true value of the fact it was sent
for, no coalition and no replay), `loo` (Delta_m = v(M) - v(M\\m) in place of phi), `exact` (exact
Shapley, 2^K coalitions), `mc` (permutation sampling).

v(S) is measured by the environment's deterministic replay (the `CounterfactualReplay` protocol,
required before the run starts): the planner's composition is replayed with the masked workers'
tool results replaced by the placeholder, without sampling, so it costs no model call or token;
every distinct coalition re-scored is counted (`rescores`, `rescores_total`) as SHARP's extra compute.
With no workers (`voting`, #46) the players are the env's roles (voter i: masked index i, key its role),
nobody plans, R^tool = 0, and `local` gives a voter 1 when its own vote is right.

The formulas (`shapley_values`, `shapley_values_mc`, `leave_one_out`, `agent_rewards`,
`per_agent_advantages`) are plain functions in `shapley.py`, importable from here too.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Literal, cast

import numpy as np

from common.credit import Advantages, Credit, episode_offsets
from common.episode import Episode, Group
from common.method import Method, MethodConfig, RunView
from envs.api.protocols import CounterfactualReplay
from replications.sharp.shapley import (  # noqa: F401  (the formulas are public API of this module too)
    agent_rewards,
    leave_one_out,
    matched_credit,
    own_slot,
    per_agent_advantages,
    shapley_values,
    shapley_values_mc,
)


@dataclass
class SHARPConfig(MethodConfig):
    name: str = "sharp"
    estimator: str = "grpo"  # normalization within (query, agent): grpo = (r - mean) / (std + eps) (card)
    # broadcast = GRPO; local = own slot; loo; exact Shapley; mc = permutation Shapley
    credit: Literal["broadcast", "local", "loo", "exact", "mc"] = "exact"
    lambda_s: float = 0.9  # weight of the Shapley (or leave-one-out, or own-slot) term [S: 0.9]
    lambda_p: float = 0.1  # weight of the tool-process reward [S: 0.1]
    permutations: int = 32  # credit=mc only: orderings sampled per episode (>= 2, for the standard error)
    # raw: phi as it comes (#16, #17); matched (#37): each worker's credit standardized over the step's
    # batch (unit SD per worker, `matched_credit`), so lambda_s sets every arm's per-worker weight alike
    weights: Literal["raw", "matched"] = "raw"


def worker_key(m: int) -> str:
    return f"worker_{m}"


class SHARP(Method):
    Config = SHARPConfig
    needs = frozenset({"multi_agent_shared_outcome", "counterfactual_replay"})  # exact Shapley's replays
    compare_arm = "sharp-exact-k4"  # exact Shapley credit (its method.* settings; the env is make compare's)
    paper_data_hint = ("put MuSiQue, GAIA (text), WebWalkerQA and FRAMES in one local folder and pass "
                       "method.paper_data=<folder> (and model.path=<local Qwen3-8B>)")
    cfg: SHARPConfig

    def __init__(self, cfg: SHARPConfig, run: RunView):
        super().__init__(cfg, run)
        self.rescores_total = 0

    def validate(self) -> None:
        super().validate()
        if self.cfg.permutations < 2:
            raise ValueError("method.permutations must be >= 2 (the Monte-Carlo standard error needs two); "
                             f"got {self.cfg.permutations}")

    def env_protocols(self) -> tuple[type, ...]:
        return () if self.cfg.credit in ("broadcast", "local") else (CounterfactualReplay,)

    def agent_of(self, episode: Episode, index: int) -> str:
        """The planner is one agent; the m-th worker turn of the episode is worker m."""
        role = episode.turns[index].role
        return (worker_key(sum(t.role == "worker" for t in episode.turns[:index])) if role == "worker"
                else role)

    def players(self, episode: Episode) -> list[str]:
        """The replay game's players' agent keys, by masked index: its workers, else the env's roles."""
        return ([worker_key(m) for m in range(len(episode.turns_of("worker")))] if "worker" in self.env.roles
                else list(self.env.roles))

    def contributions(self, record: dict[str, Any] | None, n_workers: int, salt: int
                      ) -> tuple[dict[int, float], int, float]:
        """phi (or Delta) of each worker, the number of coalitions re-scored, the mean MC stderr."""
        players = list(range(n_workers))
        if record is None or not players:
            return {m: 0.0 for m in players}, 0, 0.0
        if self.cfg.credit == "local":
            return own_slot(record, n_workers), 0, 0.0
        seen: set[frozenset] = set()
        env = cast(CounterfactualReplay, self.env)  # env_protocols() made sure of it before the run

        def value(coalition: frozenset) -> float:
            seen.add(coalition)
            return env.replay(record, frozenset(players) - coalition).value

        if self.cfg.credit == "loo":
            return leave_one_out(players, value), len(seen), 0.0
        if self.cfg.credit == "exact":
            return shapley_values(players, value), len(seen), 0.0
        phi, se = shapley_values_mc(players, value, self.cfg.permutations, seed=salt)
        return phi, len(seen), float(np.mean(list(se.values())))

    def credit(self, groups: list[Group], step: int) -> Credit:
        """R_{i,m} = R^b + lambda_s phi_m + lambda_p R^tool_m per worker, R^b for the planner (card)."""
        t0 = time.perf_counter()
        if self.cfg.credit == "broadcast":
            return Credit.outcome(groups, {"rescores": 0.0, "rescores_total": float(self.rescores_total),
                                           "rescores_per_episode": 0.0,
                                           "time_credit_s": time.perf_counter() - t0})
        rescores, stderrs = 0, []
        phis: list[list[dict[int, float]]] = []
        for gi, group in enumerate(groups):
            phis.append([])
            for ei, ep in enumerate(group.episodes):
                phi, n, se = self.contributions(ep.info.get("record"), len(self.players(ep)),
                                                salt=step * 1_000_003 + gi * 1009 + ei)
                rescores += n
                stderrs.append(se)
                phis[-1].append(phi)
        if self.cfg.weights == "matched":
            phis = matched_credit(phis)
        values = []
        for group, phis_G in zip(groups, phis, strict=True):
            rewards_G = []
            for ep, phi in zip(group.episodes, phis_G, strict=True):
                kinds, keys = (ep.info.get("record") or {}).get("tool_kinds", []), self.players(ep)
                tool = {m: float(kinds[m] in ("value", "distractor")) if m < len(kinds) else 0.0 for m in phi}
                r = agent_rewards(ep.reward, phi, tool, self.cfg.lambda_s, self.cfg.lambda_p)
                lead = {"planner": ep.reward} if "planner" in self.env.roles else {}
                rewards_G.append({**lead, **{keys[m]: x for m, x in r.items()}})
            values.append(rewards_G)
        self.rescores_total += rescores
        n_eps = max(sum(len(g.episodes) for g in groups), 1)
        metrics = {"rescores": float(rescores), "rescores_total": float(self.rescores_total),
                   "rescores_per_episode": rescores / n_eps, "time_credit_s": time.perf_counter() - t0}
        if self.cfg.credit == "mc":
            metrics["mc_stderr_mean"] = float(np.mean(stderrs)) if stderrs else 0.0
        return Credit("reward", values, metrics=metrics)

    def credit_metrics(self, groups: list[Group], advantages: Advantages) -> dict[str, float]:
        """What the workers did, and how their credit separated good from bad tool calls.

        `credit_gap`: mean advantage of worker turns that called the right tool minus that of worker
        turns that called the distractor (broadcast credit dilutes this gap as K grows).
        """
        kinds, advs = [], []
        episodes = [e for g in groups for e in g.episodes]
        for offset, group in zip(episode_offsets(groups), groups, strict=True):
            for i, ep in enumerate(group.episodes):
                if (record := ep.info.get("record")) is not None:
                    workers = [t for t, turn in enumerate(ep.turns) if turn.role == "worker"]
                    for t, kind in zip(workers, record.get("tool_kinds", []), strict=False):
                        kinds.append(kind)
                        advs.append(advantages.scalar((offset + i, t)))
        out: dict[str, float] = {}
        if kinds:
            out["distractor_rate"] = kinds.count("distractor") / len(kinds)
            if firsts := [ep.info["record"]["tool_kinds"][0] for ep in episodes
                          if ep.info.get("record") and ep.info["record"]["tool_kinds"]]:
                # the most upstream worker
                out["distractor_rate_first"] = firsts.count("distractor") / len(firsts)
            out["tool_error_rate"] = (kinds.count("error") + kinds.count("invalid")) / len(kinds)
            right = [a for a, k in zip(advs, kinds, strict=True) if k == "value"]
            bad = [a for a, k in zip(advs, kinds, strict=True) if k == "distractor"]
            if right and bad:
                out["credit_gap"] = float(np.mean(right) - np.mean(bad))
        if slots := [ep.info["slot_accuracy"] for ep in episodes if "slot_accuracy" in ep.info]:
            out["slot_accuracy"] = float(np.mean(slots))
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rescores_total": self.rescores_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rescores_total = int(state.get("rescores_total", 0))
