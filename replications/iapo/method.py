"""IAPO: Influence-Aware Policy Optimization (arXiv 2608.24588; no public code).

In a multi-turn service dialogue, the outcome hinges on a few actions: the lookup whose id a later
refund consumed, the question whose answer set the refund's method, the call that used an example
id and errored. GRPO broadcasts the trajectory's group-normalized advantage

    A_tau = (R_tau - mean_G R) / (std_G R + eps)                                  (GRPO, the baseline)

to every token of every action alike. IAPO builds a typed influence graph over the trajectory's
assistant actions (support-use edges: `input`, `success_utilization`; failed-use edges:
`failed_utilization`; error flags; direct user input) and routes the same advantage over the
actions, keeping its total mass and its sign:

    A_{i,l} = A_tau * w_i,   w_i > 0,   sum_i L_i w_i = L                         (paper, sec. 3)

with w from bounded, L-weighted z-scored features of the graph (`routing.py`: phi+, phi-, the
multipliers m, and the sign routing with beta+ and c). A success is credited toward the actions
whose information was used, away from those that erred; a failure is blamed toward the actions that
erred and whose errors were carried on. A graph that says nothing gives w = 1: GRPO.

Hooks: only `credit` changes. It computes A_tau per episode (the method's estimator over the group's
non-excluded episodes, as the core would), asks the annotator for each episode's graph (`graph.py`:
the environment's provenance events by default; argument provenance in the text for environments
without events, and in the small and paper recipes on tau2; the paper's frozen-LLM annotator at the
paper scale), and returns per-token advantages in `Credit.tokens`. Arms (`method.credit`): `broadcast`
(GRPO itself), `iapo`, and `shuffled` (the control: the same episode's IAPO weights assigned to its
actions in a random order, rescaled so that sum_i L_i w_i = L still holds: the same weight distribution
without the graph's information), and `oracle` (the positive control of the second testbed, #39: all of the
advantage on the actions the environment marks as its decisions, `info` events `{"decision": ...}`:
service_desk choice's lookup and refund; a failed episode's erring actions too, `error` and
`invalid_action` events, not its decisions marked right; a success's erring decisions left out; w = 0
elsewhere, sum_i L_i w_i = L kept; an episode without any is broadcast; CARD); `oracle-unit` the same at
w = 1 (GRPO's per-token weight), 0 elsewhere. beta+ = 0 and c = 0.5 are the paper's ablations
(`method.beta_plus`, `method.clip`). `routing_weights` (and the features, the graph, the annotators) are
public and importable here.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from common.credit import BROADCAST, Advantages, Credit, episode_offsets
from common.episode import Episode, Group, info_means
from common.method import Method, MethodConfig, RunView
from common.rollout import derive_seed
from replications.iapo.checks import check_benchmarks, check_settings
from replications.iapo.graph import (  # noqa: F401  (public API of this module too)
    Annotator,
    InfluenceGraph,
    LLMAnnotator,
    action_turns,
    argument_annotator,
    decision_turns,
    fault_turns,
    hf_greedy,
    parse_annotation,
    provenance_annotator,
    right_turns,
)
from replications.iapo.routing import (  # noqa: F401
    features,
    multipliers,
    oracle_weights,
    routing_weights,
    routing_weights_reference,
)


@dataclass
class IAPOConfig(MethodConfig):
    """The `method.*` settings of IAPO ([P] the paper, [I] ours)."""

    name: str = "iapo"
    # A_tau: group normalization (common.credit.CREDIT), GRPO's (R - mean)/(std + eps) [P]
    estimator: str = "grpo"
    # broadcast = GRPO | iapo | shuffled (control) | oracle, oracle-unit (positive controls, module doc) [I]
    credit: Literal["broadcast", "iapo", "shuffled", "oracle", "oracle-unit"] = "iapo"
    # beta+: errors cut an action's share of a positive advantage [P: 0.05; ablation 0]
    beta_plus: float = 0.05
    clip: float = 0.25  # c: z-scores clipped to [-c, c] [P: 0.25; ablations 0.125, 0.5]
    # the graph: environment events [I] | argument provenance in the text (tau2's recipes) [I] | LLM [P]
    annotator: Literal["provenance", "arguments", "llm"] = "provenance"
    # annotator=llm: a local model folder, decoded greedily (temperature 0)
    annotator_model: str | None = None


def shuffle_weights(weights: Sequence[float], lengths: Sequence[int], rng: random.Random) -> list[float]:
    """The control: the same weights in a random order over the actions, rescaled to sum_i L_i w_i = L.

    >>> [round(x, 4) for x in shuffle_weights([2.0, 0.5], [1, 2], random.Random(1))]  # [0.5, 2.0] x 3 / 4.5
    [0.3333, 1.3333]
    """
    w = list(weights)
    rng.shuffle(w)
    total = float(sum(lengths))
    mass = sum(x * n for x, n in zip(w, lengths, strict=True))
    return [x * total / mass for x in w]


class IAPO(Method):
    Config = IAPOConfig
    needs = frozenset({"provenance_events"})  # the provenance annotator reads them (cpu scale)
    # nothing to stage: the paper's tau2-bench train split and BFCL-v4 multi-turn ship inside their packages
    # (envs/benchmarks/tau2/, envs/benchmarks/bfcl/); UserBench and AgentChangeBench are not in the suite
    paper_data_hint = ""
    cfg: IAPOConfig

    def __init__(self, cfg: IAPOConfig, run: RunView):
        super().__init__(cfg, run)
        self._annotator: Annotator | None = None

    def validate(self) -> None:
        """The small and paper scales' benchmarks registered, then the core's checks, then the settings'
        (`checks.py`)."""
        check_benchmarks(self)
        super().validate()
        check_settings(self, IAPOConfig)

    def annotate(self, episode: Episode) -> InfluenceGraph:
        """The episode's influence graph from the configured annotator."""
        if self._annotator is None:
            self._annotator = ({"provenance": provenance_annotator, "arguments": argument_annotator}
                               .get(self.cfg.annotator)
                               or LLMAnnotator(hf_greedy(str(self.cfg.annotator_model))))
        return self._annotator(episode)

    def episode_weights(self, episode: Episode, advantage: float, rng: random.Random | None = None
                        ) -> dict[int, float]:
        """Turn index -> w of each assistant action of `episode` under `advantage` (shuffled with `rng` for
        the control)."""
        turns = action_turns(episode)
        lengths = [episode.turns[t].num_action_tokens for t in turns]
        if not turns or sum(lengths) == 0:
            return {t: 1.0 for t in turns}
        if self.cfg.credit in ("oracle", "oracle-unit"):
            # a success: its decisions that did not err; a failure: its wrong decisions and erring actions
            decisions, faults = decision_turns(episode), fault_turns(episode)
            marked = decisions - faults if advantage > 0 else (decisions - right_turns(episode)) | faults
            w = oracle_weights(lengths, [t in marked for t in turns], unit=self.cfg.credit == "oracle-unit")
            return dict(zip(turns, w, strict=True))
        graph = self.annotate(episode)
        w = routing_weights(lengths, *graph.degrees(), advantage, beta_plus=self.cfg.beta_plus,
                            c=self.cfg.clip)
        if rng is not None:
            w = shuffle_weights(w, lengths, rng)
        return dict(zip(turns, w, strict=True))

    def credit(self, groups: list[Group], step: int) -> Credit:
        # the environment's behaviour rates over this step's episodes (trap use, lookups), for the curves
        behaviour = info_means([e for g in groups for e in g.episodes])
        if self.cfg.credit == "broadcast":
            return Credit.outcome(groups, behaviour)
        values: list[list[dict[str, float]]] = []
        tokens: dict[tuple[int, int, int], list[float]] = {}
        spread: list[float] = []
        for g, group in enumerate(groups):
            kept = [i for i, e in enumerate(group.episodes) if not self.excluded(e)]
            advantages_G = self.estimator(np.array([group.episodes[i].reward for i in kept],
                                                   dtype=np.float64))
            values.append([{BROADCAST: 0.0} for _ in group.episodes])
            for i, a in zip(kept, advantages_G, strict=True):
                values[g][i] = {BROADCAST: float(a)}
                if a == 0:
                    continue
                episode = group.episodes[i]
                rng = (random.Random(derive_seed(self.run.seed, step, g, i, "shuffle"))
                       if self.cfg.credit == "shuffled" else None)
                weights = self.episode_weights(episode, float(a), rng)
                for t, w in weights.items():
                    tokens[(g, i, t)] = [float(a) * w] * episode.turns[t].num_action_tokens
                if weights:
                    spread.append(max(weights.values()) - min(weights.values()))
        return Credit("advantage", values, tokens,
                      {**behaviour, "weight_spread": float(np.mean(spread)) if spread else 0.0})

    def credit_metrics(self, groups: list[Group], advantages: Advantages) -> dict[str, float]:
        """Where the advantage went: the mean |advantage| per token of erroring actions and of actions whose
        output was used, relative to the mean over the episode's actions (1 = GRPO's broadcast)."""
        if self.cfg.credit == "broadcast":
            return {}
        share: dict[str, list[float]] = {"error": [], "used": []}
        for offset, group in zip(episode_offsets(groups), groups, strict=True):
            for i, episode in enumerate(group.episodes):
                turns = action_turns(episode)
                per_turn = [abs(advantages.scalar((offset + i, t))) for t in turns]
                if not turns or not any(per_turn):
                    continue
                mean = float(np.mean(per_turn))
                d_plus, _, _, errors = provenance_annotator(episode).degrees()
                for a, value in enumerate(per_turn):
                    if errors[a]:
                        share["error"].append(value / mean)
                    if d_plus[a]:
                        share["used"].append(value / mean)
        return {f"credit_share_{k}": float(np.mean(v)) for k, v in share.items() if v}
