"""The training loop: a LightningModule whose every step is play -> credit -> update.

The method plays the step's episodes and returns its credit as a value (`common.method`); the core
builds the training rows, the reference log-probabilities (when a KL term needs them), turns the
credit into advantages (`common.credit.to_advantages`, the KL-in-reward penalty included) and runs
the update, whose objective is assembled in `common.loss.policy_loss`.

Strictly on-policy by default (one pass, one minibatch: the ratio is exactly 1). PPO epochs and
minibatches are settings; with more than one update, the old log-probabilities are the behaviour
log-probabilities the engine sampled with (exact in float32, so no extra forward pass).

Determinism: every random choice of step s (tasks, environment seeds, sampling) is seeded from
(run seed, s), so a run resumed from a checkpoint replays exactly what an uninterrupted run does.

Several processes (`trainer.devices` x `trainer.num_nodes` > 1, Lightning's DDP): every rank draws
the same task list from (run seed, s) and plays its share, `tasks[rank::world]`, with seeds of its
own (rank r > 0 adds `/rank<r>` to the play's salt; rank 0 plays with the single-process seeds), so
the union of the ranks' episodes is the step's batch. Credit and advantages are computed by each
rank on its own groups (group-local, as every estimator is); a method's state (`state_dict`, e.g.
CCPO's running reward statistics) is rank 0's, handed to every rank after each step's credit, so
the ranks agree and a resumed run continues as an uninterrupted one (it is updated from rank 0's
share of the batch only). The update sums the ranks' gradients after each minibatch
(`sum_gradients_over_ranks`): each rank's loss is its share of the whole minibatch's mean (token
and row counts summed over the ranks first), so the sum is the gradient of the union batch,
whatever the number of rows or chunks each rank has. The step's metrics are gathered
(`combine_rank_metrics`), evaluation plays `eval_tasks[rank::world]` on every rank and summarizes
the gathered episodes, and only rank 0 writes the records. At the end the ranks compare a digest of
their adapters (the manifest keeps them): a mismatch stops the run.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import random
import time
from collections.abc import Iterator
from typing import Any

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset

from common.batch import Row, build_rows, micro_batches, padded, score_rows
from common.chat import ChatFormat
from common.config import RunConfig
from common.credit import Advantages, to_advantages
from common.engines.base import Engine, SamplingParams
from common.episode import step_episodes, tasks_of
from common.evaluate import eval_split, evaluate, summarize_groups
from common.loss import LossBatch, kl_reward_penalty, policy_loss
from common.method import Method
from common.policy import Policy
from common.ranks import (
    combine_rank_metrics,
    gather,
    interleave,
    light,
    rank_and_world,
    sum_counts,
    sum_gradients_over_ranks,
    sum_over_ranks,
)
from common.records import RunDir
from common.rollout import Rollout, derive_seed
from common.samples import due, log_text, sample_rows
from common.step_metrics import outcome_metrics
from envs.api.base import Environment


class _Steps(IterableDataset):
    """Yields the RL step numbers still to run (read from the module, so a resume skips the rest)."""

    def __init__(self, module: RLModule):
        self.module = module

    def __iter__(self) -> Iterator[int]:
        yield from range(self.module.next_step, self.module.cfg.trainer.steps)

    def __len__(self) -> int:
        # the whole run: Lightning's restored loop counts the steps already done against it
        return self.module.cfg.trainer.steps


class RLModule(L.LightningModule):
    def __init__(self, cfg: RunConfig, method: Method, env: Environment, policy: Policy, engine: Engine,
                 run_dir: RunDir):
        super().__init__()
        self.automatic_optimization = False
        self.strict_loading = False  # checkpoints hold only the adapters, not the frozen base
        self.cfg, self.method, self.env, self.policy, self.engine, self.run_dir = (
            cfg, method, env, policy, engine, run_dir)
        self.net = policy.model  # registers the parameters with Lightning
        t = cfg.trainer
        self.params = SamplingParams(t.temperature, 1.0, t.max_new_tokens, tuple(env.stop))
        eval_params = SamplingParams(cfg.eval.temperature, cfg.eval.top_p, t.max_new_tokens, tuple(env.stop))
        max_length = (cfg.model.max_length if cfg.model.kind == "tiny"
                      else getattr(policy.model.config, "max_position_embeddings", 4096))
        chat = ChatFormat.from_tokenizer(policy.tokenizer) if cfg.model.chat_template else None
        self.rollout = Rollout(env, engine, policy.tokenizer, policy.role_adapter, policy.trainable_adapters,
                               self.params, max_length, cfg.seed, chat)
        self.eval_rollout = Rollout(env, engine, policy.tokenizer, policy.role_adapter, [], eval_params,
                                    max_length, cfg.seed, chat)
        self.train_pool = tasks_of(env.task_set()["train"])
        evaluated = tasks_of(eval_split(env, cfg.eval.split))
        self.eval_tasks = evaluated[: cfg.eval.max_tasks or len(evaluated)]
        self.next_step = 0
        self.evals: dict[str, Any] = {"history": []}

    # ---- Lightning plumbing -----------------------------------------------------------------
    def configure_optimizers(self) -> torch.optim.Optimizer:
        t = self.cfg.trainer
        return torch.optim.AdamW(self.policy.trainable_parameters(), lr=t.lr, weight_decay=t.weight_decay)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(_Steps(self), batch_size=None, num_workers=0)

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, Any]:  # type: ignore[override]
        full = super().state_dict(*args, **kwargs)
        return {k: v for k, v in full.items() if "lora_" in k}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # called on every rank (Lightning writes rank 0's): the compute counters kept are the run's, all
        # ranks summed
        checkpoint["rl"] = {"next_step": self.next_step, "evals": self.evals,
                            "tokens_by_tag": sum_counts(gather(dict(self.rollout.tokens_by_tag))),
                            "calls_by_tag": sum_counts(gather(dict(self.rollout.calls_by_tag))),
                            "method_state": self.method.state_dict()}

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        rl = checkpoint["rl"]
        self.next_step = rl["next_step"]
        self.evals = rl["evals"]
        if rank_and_world()[0] == 0:  # the run's counters so far; the other ranks count from zero
            self.rollout.tokens_by_tag.update(rl["tokens_by_tag"])
            self.rollout.calls_by_tag.update(rl["calls_by_tag"])
        if rl.get("method_state"):
            self.method.load_state_dict(rl["method_state"])

    def setup(self, stage: str) -> None:
        # after Lightning started the processes: rank r > 0 plays its share of the tasks with seeds of
        # its own; rank 0 (and a single process) with the single-process seeds
        rank, _ = rank_and_world()
        if rank > 0:
            self.rollout.rank_salt = self.eval_rollout.rank_salt = f"/rank{rank}"

    def on_train_start(self) -> None:
        # Everything built so far (libraries, model, tokenizer, task sets) lives for the whole run:
        # keep it out of the cyclic GC, whose full collections would otherwise walk ~500k objects
        # (~0.3 s on 2 cores) every few steps.
        gc.freeze()
        self.engine.ready()  # every rank starts its engine here, together (vLLM's start is collective)
        if rank_and_world()[1] > 1:  # Lightning's DDP launcher gave each process its share of the cores
            if self.cfg.trainer.threads:
                torch.set_num_threads(self.cfg.trainer.threads)
            self.run_dir.update_manifest(torch_threads=torch.get_num_threads())
        self.run_dir.truncate_metrics(self.next_step)
        if self.next_step == 0 and self.cfg.eval.at_start and "initial" not in self.evals:
            self.evals["initial"] = self.run_eval(0)
            self.run_dir.write_eval(self.evals)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        every = self.cfg.trainer.checkpoint_every
        if every and (self.next_step % every == 0 or self.next_step == self.cfg.trainer.steps):
            self.save_checkpoint()

    def save_checkpoint(self) -> None:
        # written beside the last one, then kept: last.ckpt -> prev.ckpt (the fallback), this one -> last.ckpt
        tmp = self.run_dir.checkpoint_dir / "next.ckpt.tmp"
        self.trainer.save_checkpoint(tmp)
        self.run_dir.keep_checkpoint(tmp)

    # ---- evaluation -------------------------------------------------------------------------
    def run_eval(self, step: int) -> dict[str, Any]:
        """Held-out evaluation through the method's play, plus each `eval.variants` variant.

        With several processes every rank plays its share of the held-out tasks and every rank
        summarizes the gathered episodes (the same record on each); the compute counters are the run's.
        """
        with self._autocast():
            result = self._evaluate(step)
            if self.cfg.eval.variants:
                result["variants"] = {v: self._evaluate(step, variant=v) for v in self.cfg.eval.variants}
        result.update(self._run_counters())
        return result

    def _evaluate(self, step: int, variant: str = "main") -> dict[str, Any]:
        rank, world = rank_and_world()
        if world == 1:
            return evaluate(self.method, self.eval_rollout, self.eval_tasks, step, variant=variant)
        groups = self.method.play(self.eval_rollout, self.eval_tasks[rank::world], step, mode="eval",
                                  variant=variant)
        return summarize_groups(interleave(gather([light(g) for g in groups])), step)

    def _run_counters(self) -> dict[str, int]:
        """The training plays' compute counters, every rank's summed."""
        return sum_counts(gather(self.rollout.counters()))

    def _no_ddp_sync(self) -> contextlib.AbstractContextManager[Any]:
        """DDP's own all-reduce at every backward would need the same number of backward passes on
        every rank; the ranks' rows differ, so the update sums the gradients itself (`update`)."""
        model = self._trainer.strategy.model if self._trainer is not None else None
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            return model.no_sync()
        return contextlib.nullcontext()

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        """precision=bf16: autocast on the device type the module is on now ('cuda' once Lightning moved
        it)."""
        bf16 = self.cfg.trainer.precision == "bf16"
        return torch.autocast(self.device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()

    # ---- one RL step ------------------------------------------------------------------------
    def training_step(self, step: int, batch_idx: int) -> None:
        """play -> credit (a value) -> rows -> reference -> advantages -> update."""
        step = int(step)
        t0 = time.perf_counter()
        before = self.rollout.counters()
        rng = random.Random(derive_seed(self.cfg.seed, step, "tasks"))
        rank, world = rank_and_world()
        tasks = self.method.tasks(self.train_pool, step, rng)[rank::world]  # every rank drew the same list
        with self._autocast():
            groups = self.method.play(self.rollout, tasks, step, mode="train")
        t_rollout = time.perf_counter() - t0
        metrics = outcome_metrics(groups)
        credit = self.method.credit(groups, step)
        if world > 1:  # every rank continues with rank 0's method state (what a checkpoint keeps)
            state = gather(self.method.state_dict())[0]
            if rank > 0 and state:
                self.method.load_state_dict(state)
        metrics.update(credit.metrics)
        episodes = step_episodes(groups)
        rows = build_rows(episodes, self.method.trainable_roles(step), self.method.excluded)
        kl = self.cfg.trainer.kl
        self.engine.release()  # vLLM's sleep mode: its weights and KV cache leave the GPU until sync()
        t_ref = time.perf_counter()
        reference = self.reference_logprobs(rows) if kl.placement != "none" and rows else None
        t_ref = time.perf_counter() - t_ref
        penalty = (kl_reward_penalty(rows, reference or [], episodes, kl.coef, kl.estimator,
                                     self.method.agent_of)
                   if kl.placement == "reward" else None)
        advantages = to_advantages(groups, credit, self.method.agent_of, self.method.estimator,
                                   self.method.excluded, penalty)
        metrics.update(self.method.credit_metrics(groups, advantages))
        t1 = time.perf_counter()
        # with several processes every rank takes part in the update (its gradient sums are collective)
        with self.policy.training_forward():  # checkpointed layers recompute (trainer.gradient_checkpointing)
            metrics.update(self.update(rows, advantages, step, reference) if rows or world > 1
                           else {"loss": 0.0})
        self.engine.sync()
        self.next_step = step + 1
        after = self.rollout.counters()
        metrics.update(after)
        metrics["generated_tokens"] = after["generated_tokens_total"] - before["generated_tokens_total"]
        metrics["model_calls"] = after["model_calls_total"] - before["model_calls_total"]
        # rollout, reference forward (KL) and update; credit and bookkeeping are the step's remainder
        metrics.update(time_rollout_s=t_rollout, time_reference_s=t_ref,
                       time_train_s=time.perf_counter() - t1)
        every = self.cfg.eval.every
        if every and self.next_step % every == 0 and self.next_step < self.cfg.trainer.steps:
            self.evals["history"].append(self.run_eval(self.next_step))
            self.run_dir.write_eval(self.evals)
        metrics["time_step_s"] = time.perf_counter() - t0
        if world > 1:
            metrics = combine_rank_metrics(gather((metrics, sum(len(g.episodes) for g in groups))))
        self.run_dir.append_metrics({"step": step, **metrics})
        if rank == 0 and due(step, self.cfg.trainer.steps, self.cfg.log.samples_every):
            # the step's first groups (`common.samples`): no random draw, nothing the run computes changes
            samples = sample_rows(groups, advantages, step, self.cfg.log.samples_groups)
            self.run_dir.append_samples(samples)
            log_text(self.trainer.loggers, samples, step)
        if self.trainer.loggers or self.cfg.progress:  # Lightning's logging costs ~1 ms a key
            self.log_dict({k: float(v) for k, v in metrics.items()
                           if isinstance(v, int | float) and "/" not in k},
                          on_step=True, prog_bar=False, batch_size=1)
            self.log("success", metrics["success_rate"], prog_bar=True, batch_size=1)
        if self.next_step == self.cfg.trainer.steps:
            if world > 1:
                self.check_ranks_agree()
            # The trained policy is evaluated here, on the training device and by every rank: after
            # `Trainer.fit`, Lightning has moved the module back to the CPU and only one process is left.
            self.evals["final"] = self.run_eval(self.next_step)
            self.run_dir.write_eval(self.evals)

    def check_ranks_agree(self) -> None:
        """Every rank must hold the same adapters (their gradients are summed, their updates identical);
        the digests go in the manifest, and a mismatch stops the run rather than record it."""
        digest = hashlib.sha1()
        for p in self.policy.trainable_parameters():
            digest.update(p.detach().float().cpu().numpy().tobytes())
        digests = gather(digest.hexdigest())
        self.run_dir.update_manifest(adapter_sha1_by_rank=digests)
        if len(set(digests)) > 1:
            raise RuntimeError(f"the ranks' adapters differ after training (sha1 by rank: {digests}): their "
                               "gradients were not summed the same way; this run's records cannot be trusted")

    @torch.no_grad()
    def reference_logprobs(self, rows: list[Row]) -> list[torch.Tensor]:
        """Each row's action tokens scored by the reference (the base, adapters off), on the model's
        device."""
        pad = self.policy.tokenizer.pad_token_id
        out: list[torch.Tensor] = []
        with self.policy.use(None) as model, self._autocast():
            t = self.cfg.trainer
            for idx in micro_batches(rows, t.micro_batch_rows, t.micro_batch_tokens):
                chunk = [rows[i] for i in idx]
                scored = score_rows(model, chunk, pad, with_entropy=False,
                                    temperature=self.cfg.trainer.temperature,
                                    fast=self.cfg.trainer.fast_forward)
                out += [scored.logp_B_T[b, : row.num_action_tokens].clone() for b, row in enumerate(chunk)]
        return out

    def update(self, rows: list[Row], advantages: Advantages, step: int,
               reference: list[torch.Tensor] | None = None, per_pass: bool = False) -> dict[str, Any]:
        """PPO epochs x minibatches over `rows`; each chunk's objective is `common.loss.policy_loss`.
        `reference` (aligned with `rows`) is needed when `trainer.kl.placement` is not `none`. `per_pass`
        adds `clip_fraction_by_pass` (one mean per minibatch update, in order: the design check's view
        of how off-policy the passes after the first are).

        With several processes, minibatch i is the union of every rank's minibatch i: the token and
        row counts the loss divides by are summed over the ranks, and so are the gradients, before
        clipping and the optimizer step (identical on every rank)."""
        t = self.cfg.trainer
        world = rank_and_world()[1]
        opt: Any = self.optimizers()
        single_update = t.ppo_epochs == 1 and t.minibatches == 1
        with_ref = t.kl.placement != "none"
        if with_ref and (reference is None or len(reference) != len(rows)):
            raise ValueError("trainer.kl.placement needs the reference log-probabilities of every row")
        row_advantages = [row.advantages(advantages) for row in rows]
        pad = self.policy.tokenizer.pad_token_id
        rng = np.random.default_rng(derive_seed(self.cfg.seed, step, "minibatches"))
        stats: dict[str, list[float]] = {k: [] for k in ("loss", "clip_fraction", "entropy", "kl",
                                                        "grad_norm", "logprob_diff_max")}
        passes: list[float] = []
        for _epoch in range(t.ppo_epochs):
            order = rng.permutation(len(rows)) if t.minibatches > 1 else np.arange(len(rows))
            for mb_idx in np.array_split(order, t.minibatches):
                first_chunk = len(stats["clip_fraction"])
                mb = [rows[i] for i in mb_idx]
                n_tokens, n_rows = sum(r.num_action_tokens for r in mb), len(mb)
                if world > 1:  # every rank's share of the whole minibatch's mean
                    n_tokens, n_rows = (int(n) for n in sum_over_ranks(torch.tensor([n_tokens, n_rows])))
                if not n_rows:
                    continue
                opt.zero_grad(set_to_none=True)
                total = 0.0
                for adapter in dict.fromkeys(r.adapter for r in mb):
                    with self.policy.use(adapter) as model:
                        mine = [int(i) for i in mb_idx if rows[i].adapter == adapter]
                        for part in micro_batches([rows[i] for i in mine], t.micro_batch_rows,
                                                  t.micro_batch_tokens):
                            idx = [mine[j] for j in part]
                            chunk = [rows[i] for i in idx]
                            with self._autocast():
                                scored = score_rows(model, chunk, pad, with_entropy=True,
                                                    entropy_grad=t.entropy_coef > 0,
                                                    temperature=t.temperature, fast=t.fast_forward)
                            width, device = scored.logp_B_T.size(1), scored.logp_B_T.device
                            behaviour = padded([r.behaviour_logprobs() for r in chunk], width, device)
                            assert scored.entropy_B_T is not None
                            batch = LossBatch(
                                rows=chunk, adapter=adapter, logp_B_T=scored.logp_B_T,
                                old_logp_B_T=scored.logp_B_T.detach() if single_update else behaviour,
                                behaviour_logp_B_T=behaviour,
                                adv_B_T=padded([row_advantages[i] for i in idx], width, device),
                                mask_B_T=scored.mask_B_T, entropy_B_T=scored.entropy_B_T,
                                ref_logp_B_T=(padded([reference[i] for i in idx], width, device)
                                              if reference else None),
                                num_tokens=n_tokens, num_rows=n_rows)
                            terms = policy_loss(batch, t, self.method.extra_loss(batch, step))
                            with self._no_ddp_sync():  # the gradients are summed once per minibatch, below
                                self.manual_backward(terms.loss)
                            total += float(terms.loss.detach())
                            stats["clip_fraction"].append(terms.clip_fraction)
                            stats["entropy"].append(terms.entropy)
                            stats["logprob_diff_max"].append(terms.logprob_diff_max)
                            if terms.kl is not None:
                                stats["kl"].append(terms.kl)
                params = self.policy.trainable_parameters()
                if world > 1:
                    total = sum_gradients_over_ranks(params, total)
                grad_norm = torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None],
                                                           t.max_grad_norm)
                opt.step()
                passes.append(float(np.mean(stats["clip_fraction"][first_chunk:])))
                stats["loss"].append(total)
                stats["grad_norm"].append(float(grad_norm))
        out: dict[str, Any] = {k: float(np.mean(v)) for k, v in stats.items() if v}
        if per_pass:
            out["clip_fraction_by_pass"] = passes
        out.setdefault("loss", 0.0)
        out["logprob_diff_max"] = (float(np.max(stats["logprob_diff_max"])) if stats["logprob_diff_max"]
                                   else 0.0)
        out["rows"] = len(rows)
        return out
