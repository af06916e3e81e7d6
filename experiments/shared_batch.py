"""The shared batch of the design check (experiments/design.py): one arm's play of dev tasks with the warm
start, every arm's advantages on those same episodes, and the figures compared on them (correlation, the
credit gap of a behaviour and its signal-to-noise over resampled batches, the share of groups with a
signal, the later passes' clip fraction after one real update)."""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

RESAMPLES = 200  # batches resampled from the shared batch's groups for the signal-to-noise
BATCH_STEPS = 4  # the shared batch: this many steps' worth of the play arm's tasks


@dataclass
class Batch:
    """The shared batch: the groups one arm played, and the per-turn keys every arm is compared on."""

    groups: list[Any]
    keys: list[tuple[int, int]] = field(default_factory=list)  # (episode index, turn index) of trained turns
    episodes: list[Any] = field(default_factory=list)


def arm_config(method: str, arm: str, scale: str, *extra: str) -> Any:
    from experiments.run import compose

    return compose(method, (f"scale={scale}", "seed=0", f"arm={arm}", "eval.split=dev", "eval.at_start=true",
                            *extra))


# ---- the shared batch -----------------------------------------------------------------------------
@dataclass
class Pieces:
    """A warm-started policy playing one arm's config (what a run builds before its first step)."""

    cfg: Any
    method: Any
    env: Any
    policy: Any
    rollout: Any
    module: Any = None


def build(method: str, arm: str, scale: str, work: Path) -> Pieces:
    return build_from(arm_config(method, arm, scale))


def build_from(cfg: Any) -> Pieces:
    """The warm-started policy of a composed config (`arm_config`, or a compare cell's on dev)."""
    import torch

    from common.chat import ChatFormat
    from common.engines import make_engine
    from common.engines.base import SamplingParams
    from common.fit import resolve
    from common.policy import Policy
    from common.rollout import Rollout
    from common.warmstart import warm_started_base
    from replications import METHODS

    r = resolve(cfg, METHODS)
    torch.manual_seed(cfg.seed)
    tokenizer, base, _ = warm_started_base(cfg.model, cfg.sft, r.env, cfg.seed, cfg.work_dir, progress=False)
    policy = Policy(base, tokenizer, cfg.model, r.env.roles)
    engine = make_engine(cfg, policy)
    t = cfg.trainer
    max_length = (cfg.model.max_length if cfg.model.kind == "tiny"
                  else getattr(base.config, "max_position_embeddings", 4096))
    chat = ChatFormat.from_tokenizer(tokenizer) if cfg.model.chat_template else None
    rollout = Rollout(r.env, engine, tokenizer, policy.role_adapter, policy.trainable_adapters,
                      SamplingParams(t.temperature, 1.0, t.max_new_tokens, tuple(r.env.stop)), max_length,
                      cfg.seed, chat)
    return Pieces(cfg, r.method, r.env, policy, rollout)


def shared_batch(p: Pieces) -> Batch:
    """`BATCH_STEPS` steps' worth of dev tasks, played once by `p`'s method (its extra plays included)."""
    from common.episode import step_episodes, tasks_of

    dev = tasks_of(p.env.task_set()["dev"])
    rng = random.Random(f"design/{p.cfg.seed}")
    tasks = [t for s in range(BATCH_STEPS) for t in p.method.tasks(dev, s, rng)]
    groups = p.method.play(p.rollout, tasks, 0, mode="train")
    episodes = step_episodes(groups)
    main = {id(e) for g in groups for e in g.episodes}  # the main plays: what every arm credits
    keys = [(i, t) for i, e in enumerate(episodes) if id(e) in main
            for t, turn in enumerate(e.turns)
            if turn.trainable and turn.adapter is not None and turn.action_ids]
    return Batch(groups, keys, episodes)


def advantages_of(arm_method: Any, batch: Batch) -> Any:
    from common.credit import to_advantages

    credit = arm_method.credit(copy.deepcopy(batch.groups), 0)
    return to_advantages(batch.groups, credit, arm_method.agent_of, arm_method.estimator, arm_method.excluded)


def labels(behaviour: str | None, method: str, batch: Batch) -> np.ndarray:
    """Per compared turn: 1 where it shows the claim's behaviour, 0 where not, NaN where it says nothing."""
    if behaviour is None:
        return np.array([float(batch.episodes[i].success) for i, _ in batch.keys])
    import importlib

    labeler = importlib.import_module(f"replications.{method}.design").BEHAVIOURS[behaviour]
    out = [labeler(batch.episodes[i], t) for i, t in batch.keys]
    return np.array([np.nan if v is None else float(v) for v in out])


def credit_gap(values: np.ndarray, label: np.ndarray) -> float:
    on, off = values[label == 1], values[label == 0]
    return float(on.mean() - off.mean()) if on.size and off.size else float("nan")


def signal_to_noise(values: np.ndarray, label: np.ndarray, batch: Batch, batch_groups: int,
                    seed: int = 0) -> float:
    """The credit gap's mean over its SD across `RESAMPLES` batches of `batch_groups` groups drawn with
    replacement from the shared batch's groups (turns keep their group)."""
    from common.credit import episode_offsets

    group_of = {}
    for g, (offset, group) in enumerate(zip(episode_offsets(batch.groups), batch.groups, strict=True)):
        for i in range(len(group.episodes)):
            group_of[offset + i] = g
    turn_group = np.array([group_of[i] for i, _ in batch.keys])
    rng = np.random.default_rng(seed)
    gaps = []
    for _ in range(RESAMPLES):
        picks = rng.integers(0, len(batch.groups), size=batch_groups)
        idx = np.concatenate([np.flatnonzero(turn_group == g) for g in picks])
        gap = credit_gap(values[idx], label[idx])
        if gap == gap:
            gaps.append(gap)
    if len(gaps) < 2:
        return float("nan")
    sd = float(np.std(gaps, ddof=1))
    return float(np.mean(gaps) / sd) if sd > 0 else float("inf") if np.mean(gaps) else float("nan")


def correlation(a: np.ndarray, b: np.ndarray) -> float:
    if a.size < 2 or a.std() == 0 or b.std() == 0:
        return float("nan")
    return float(np.corrcoef(a, b)[0, 1])


def cells_of(batch: Batch, agent_of: Any) -> list[tuple[int, Any]]:
    """Each compared turn's cell for `reversal_share`: (its group, its agent under `agent_of`)."""
    from common.credit import episode_offsets

    group_of = {}
    for g, (offset, group) in enumerate(zip(episode_offsets(batch.groups), batch.groups, strict=True)):
        for i in range(len(group.episodes)):
            group_of[offset + i] = g
    return [(group_of[i], agent_of(batch.episodes[i], t)) for i, t in batch.keys]


def reversal_share(a: np.ndarray, b: np.ndarray, cells: list[Any], tol: float = 1e-9) -> float:
    """Of the pairs of turns in one cell (e.g. one group's rollouts of one agent) that `b` orders strictly,
    the share that `a` orders the other way (a tie under `a` is no reversal). NaN with no such pair."""
    by_cell: dict[Any, list[int]] = {}
    for n, c in enumerate(cells):
        by_cell.setdefault(c, []).append(n)
    ordered = reversed_ = 0
    for idx in by_cell.values():
        for x in range(len(idx)):
            for y in range(x + 1, len(idx)):
                i, j = idx[x], idx[y]
                db = b[i] - b[j]
                if abs(db) > tol:
                    ordered += 1
                    reversed_ += bool((a[i] - a[j]) * db < 0 and abs(a[i] - a[j]) > tol)
    return reversed_ / ordered if ordered else float("nan")


def signal_fraction(groups: list[Any], arm_method: Any) -> float:
    """The share of an arm's own groups that it learns from: those whose trained turns do not all get
    one advantage."""
    from common.credit import episode_offsets

    adv = advantages_of(arm_method, Batch(groups))
    shares = []
    for offset, group in zip(episode_offsets(groups), groups, strict=True):
        values = {round(adv.scalar((offset + i, t)), 12) for i, e in enumerate(group.episodes)
                  for t in range(len(e.turns))}
        shares.append(len(values) > 1)
    return float(np.mean(shares)) if shares else float("nan")


# ---- one real update (schedule arms) --------------------------------------------------------------
def second_pass(p: Pieces, arm_method: Any, batch: Batch, work: Path) -> dict[str, float]:
    """One real update of the shared batch with the arm's schedule: the clip fraction of the passes after
    the first (an on-policy first pass never clips), and the KL (k1, per token) from the sampling policy
    to the updated one on the batch's tokens."""
    import torch

    from common.batch import build_rows, score_rows
    from common.records import RunDir
    from common.trainer import RLModule

    run_dir = RunDir(work / "update", work / "ckpt")
    module = RLModule(p.cfg, arm_method, p.env, p.policy, p.rollout.engine, run_dir)
    opt = module.configure_optimizers()
    module.optimizers = lambda: opt  # type: ignore[method-assign, misc, assignment]  # outside a Lightning Trainer
    module.manual_backward = lambda loss: loss.backward()  # type: ignore[method-assign, misc]
    rows = build_rows(batch.episodes, arm_method.trainable_roles(0), arm_method.excluded)
    reference = module.reference_logprobs(rows) if p.cfg.trainer.kl.placement != "none" else None
    stats = module.update(rows, advantages_of(arm_method, batch), 0, reference, per_pass=True)
    with torch.no_grad():
        kls = []
        for row in rows:
            with p.policy.use(row.adapter) as model:
                scored = score_rows(model, [row], p.policy.tokenizer.pad_token_id, with_entropy=False,
                                    temperature=p.cfg.trainer.temperature)
            logp = scored.logp_B_T[0, : row.num_action_tokens].float().cpu()
            kls.append(torch.tensor(row.behaviour_logprobs()) - logp)
        kl = float(torch.cat(kls).mean()) if kls else float("nan")
    later: list[float] = list(stats["clip_fraction_by_pass"])[1:]
    return {"clip_fraction": float(np.mean(later)) if later else float("nan"), "kl": kl}
