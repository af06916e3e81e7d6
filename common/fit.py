"""One training run from a resolved RunConfig: resolve, check, warm start, train, evaluate, record."""

from __future__ import annotations

import errno
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from filelock import FileLock, Timeout

from common.config import RunConfig, build_dataclass, check_machine, check_run_config
from common.method import Method, RunView
from common.records import RunDir, RunRefused
from envs.api.base import Environment
from envs.api.protocols import describe
from envs.registry import ENVS

ADAPTERS = "adapters"  # in the run folder: the final policy's adapters, one folder each (PEFT's format)


@dataclass
class Resolved:
    cfg: RunConfig
    env: Environment
    method: Method
    run_dir: RunDir


def resolve(cfg: RunConfig, methods: dict[str, type[Method]]) -> Resolved:
    """Build the environment and method objects from their configs; every check runs here."""
    check_run_config(cfg)
    env_name = cfg.env.get("name")
    if env_name not in ENVS:
        raise ValueError(f"unknown environment env.name={env_name!r}; choose one of {sorted(ENVS)}")
    env_cls = ENVS[env_name]
    env = env_cls(build_dataclass(env_cls.config_class, dict(cfg.env), "env"))
    method_name = cfg.method.get("name")
    if method_name not in methods:
        raise ValueError(f"unknown method method.name={method_name!r}; choose one of {sorted(methods)}")
    method_cls = methods[method_name]
    method = method_cls(build_dataclass(method_cls.Config, dict(cfg.method), "method"), RunView.of(cfg, env))
    method.validate()
    for protocol in method.env_protocols():
        if not isinstance(env, protocol):
            raise ValueError(f"method {method_name} with these settings needs an environment with "
                             f"{describe(protocol)}; {env.name} has none")
    for role in cfg.model.roles:
        if role not in env.roles:
            raise ValueError(f"unknown role {role!r} in model.roles; {env.name} has roles {list(env.roles)}")
    unknown_variants = sorted(set(cfg.eval.variants) - set(env.variants()))
    if unknown_variants:
        raise ValueError(f"eval.variants {unknown_variants} are not variants of {env.name}; "
                         f"it has {list(env.variants())}")
    if cfg.eval.split == "dev" and not getattr(env.cfg, "dev_size", 0):
        raise ValueError(f"eval.split=dev needs a dev split; {env.name} has env.dev_size=0: "
                         "set env.dev_size=64 (or more)")
    env_tag = env.cfg.tag or env.name
    run_dir = RunDir.for_run(cfg.out_dir, cfg.work_dir, method_name, env_tag, cfg.arm, cfg.seed)
    return Resolved(cfg, env, method, run_dir)


def _loggers(cfg: RunConfig, run_dir: RunDir) -> list[Any]:
    from lightning.pytorch.loggers import CSVLogger, TensorBoardLogger, WandbLogger

    save_dir = os.path.join(cfg.work_dir, "logs")
    name = str(run_dir.path).replace(os.sep, "__")
    out: list[Any] = []
    for kind in cfg.loggers:
        if kind == "csv":
            out.append(CSVLogger(save_dir, name=name, version=0))
        elif kind == "tensorboard":
            out.append(TensorBoardLogger(save_dir, name=name, version=0))
        elif kind == "wandb":
            out.append(WandbLogger(project=wandb_project(cfg), name=run_name(run_dir), save_dir=save_dir))
    return out


def wandb_project(cfg: RunConfig) -> str:
    """The W&B project: `log.wandb_project`, or one per method (llm-agent-rl-<method>)."""
    return cfg.log.wandb_project or f"llm-agent-rl-{cfg.method['name']}"


def run_name(run_dir: RunDir) -> str:
    """A run's name in a logger, from its identity: method/env/arm/seed-<k> (the run folder's last parts)."""
    return "/".join(run_dir.path.parts[-4:])


# ---- several processes ---------------------------------------------------------------------------
# trainer.devices x trainer.num_nodes > 1 is Lightning's DDP (gloo on CPU, NCCL on GPUs), one process
# per rank; `common.trainer` says how the ranks share a step. Two ways to start the ranks:
# - srun started one task per rank (a SLURM job with --ntasks-per-node=trainer.devices): Lightning's
#   SLURMEnvironment; they start together, so the process group is started here, and ranks > 0 wait
#   for rank 0 to prepare the run folder (`_prepare`) before they read it.
# - otherwise (one process, e.g. `python -m experiments.run trainer.devices=2`): Lightning's
#   launcher starts ranks 1.. from this process at `Trainer.fit` by running its command line again
#   (`sys.argv`; experiments.run keeps `method=` in it), after rank 0 prepared the run folder.
# Only rank 0 takes the run's lock and writes its records.


def world_size(cfg: RunConfig) -> int:
    """The run's processes: one per device and node; a training-free run is evaluated by rank 0 alone."""
    return cfg.trainer.devices * cfg.trainer.num_nodes if cfg.trainer.steps > 0 else 1


def _srun_started_ranks(cfg: RunConfig) -> bool:
    """Whether srun started one task per rank of this run (a training-free run: rank 0 alone works)."""
    ranks = cfg.trainer.devices * cfg.trainer.num_nodes
    # set in an srun step only (not in salloc's shell, nor sbatch's script)
    tasks = int(os.environ.get("SLURM_STEP_NUM_TASKS") or 1)
    if tasks > 1 and tasks != ranks:
        raise RunRefused(f"this srun step runs {tasks} tasks but the run has trainer.devices x "
                         f"trainer.num_nodes = {cfg.trainer.devices} x {cfg.trainer.num_nodes} ranks "
                         "(one task per rank); submit it with "
                         f"--ntasks-per-node={cfg.trainer.devices} --nodes={cfg.trainer.num_nodes}")
    if world_size(cfg) > 1 and tasks == 1 and cfg.trainer.num_nodes > 1:
        raise RunRefused(f"trainer.num_nodes={cfg.trainer.num_nodes} needs one task per rank started by srun "
                         "on each node (make replicate-<m> CLUSTER=slurm); here one process can only start "
                         "ranks on this machine")
    return world_size(cfg) > 1 and tasks == ranks


def _plugins(cfg: RunConfig) -> list[Any]:
    """The cluster environment. Under srun, Lightning must not requeue: submitit's checkpointing owns that
    signal."""
    if _srun_started_ranks(cfg):
        from lightning.pytorch.plugins.environments import SLURMEnvironment

        return [SLURMEnvironment(auto_requeue=False)]
    from lightning.pytorch.plugins.environments import LightningEnvironment

    return [LightningEnvironment()]


def _backend(cfg: RunConfig) -> str:
    return "nccl" if cfg.trainer.accelerator != "cpu" and torch.cuda.is_available() else "gloo"


def _strategy(cfg: RunConfig) -> Any:
    if world_size(cfg) == 1:
        return "auto"
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(process_group_backend=_backend(cfg), timeout=_dist_timeout(cfg))


def _dist_timeout(cfg: RunConfig) -> Any:
    """The collectives' timeout (`trainer.dist_timeout_s`), on both ways of starting the ranks: NCCL's
    default of 10 minutes is shorter than a paper-scale model's load and first rollout between two
    collectives."""
    from datetime import timedelta

    return timedelta(seconds=cfg.trainer.dist_timeout_s)


def _start_process_group(cfg: RunConfig) -> None:
    """The process group of ranks srun started together, as Lightning would start it (it then uses this
    one)."""
    import torch.distributed as dist

    (env,) = _plugins(cfg)
    env.validate_settings(num_devices=cfg.trainer.devices, num_nodes=cfg.trainer.num_nodes)
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = env.main_address, str(env.main_port)
    backend, device = _backend(cfg), None
    if backend == "nccl":
        device = torch.device("cuda", env.local_rank())
        torch.cuda.set_device(device)
    dist.init_process_group(backend, rank=env.global_rank(), world_size=env.world_size(), device_id=device,
                            timeout=_dist_timeout(cfg))


def _prepare(r: Resolved, cfg: RunConfig, together: bool) -> str:
    """`RunDir.prepare`, by rank 0 first. Ranks srun started together wait for it, then read what
    it left, with rank 0's `force` (each task decides FORCE=1 from the manifest, which rank 0 may
    have rewritten already); a refusal on rank 0 stops them with its message. The config and
    manifest rank 0 writes next change nothing they read."""
    import torch.distributed as dist

    if together and not r.run_dir.writer:
        message: list[Any] = [None]
        dist.broadcast_object_list(message, src=0)
        error, force = message[0]
        if error is not None:
            raise RunRefused(f"rank 0 could not start the run: {error}")
        return r.run_dir.prepare(force, asdict(cfg))
    try:
        state = r.run_dir.prepare(cfg.force, asdict(cfg))
    except Exception as error:
        if together:
            dist.broadcast_object_list([(str(error), cfg.force)], src=0)
        raise
    if together:
        dist.broadcast_object_list([(None, cfg.force)], src=0)
    return state


def quiet() -> None:
    """Quiet logs by default: Lightning's banners and known-harmless warnings off."""
    import logging
    import warnings

    import lightning  # noqa: F401 - importing it sets its loggers to INFO: imported first, then quieted

    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "transformers", "datasets"):
        logging.getLogger(name).setLevel(logging.WARNING)
    import transformers

    transformers.utils.logging.disable_progress_bar()
    for pattern in (".*srun.*", ".*LeafSpec.*", ".*IterableDataset.*__len__.*", ".*in eval mode.*",
                    ".*does not have many workers.*", ".*weights_only.*", ".*max_epochs.*",
                    ".*dataloader is not resumable.*", ".*exists and is not empty.*"):
        warnings.filterwarnings("ignore", message=pattern)


class RunStopped(RuntimeError):
    """A run its storage stopped (a full disk, a folder it may not write); the message is one line: what
    could not be written and what to do. Every record is written atomically, so the run resumes."""


# errno -> what to do about it; an OSError with any other errno is a bug to report with its traceback
STORAGE_ERRORS = {
    errno.ENOSPC: "free space on that disk (or choose another out_dir / work_dir), then run again: "
                  "it resumes",
    errno.EDQUOT: "free space within your quota (or choose another out_dir / work_dir), then run again: "
                  "it resumes",
    errno.EFBIG: "the file system limits the file's size: choose another out_dir / work_dir",
    errno.EROFS: "the file system is mounted read-only: choose a writable out_dir / work_dir",
    errno.EACCES: "make that folder writable for you, or choose another out_dir / work_dir",
    errno.EPERM: "make that folder writable for you, or choose another out_dir / work_dir",
    errno.ENOTDIR: "a part of that path is a file, not a folder: choose another out_dir / work_dir",
}


def storage_problem(error: OSError, run_folder: Path | str, work_dir: str) -> str | None:
    """One line for an error of the storage a run writes to (STORAGE_ERRORS), or None for any other error.

    A write to an open file names no file (a full disk while appending metrics): the line then names
    the run's two folders."""
    if error.errno not in STORAGE_ERRORS:
        return None
    where = error.filename or f"the run's files (in {run_folder} or {work_dir})"
    reason = error.strerror or os.strerror(error.errno)
    return f"the run stopped: cannot write {where} ({reason}); {STORAGE_ERRORS[error.errno]}"


def fit(cfg: RunConfig, methods: dict[str, type[Method]]) -> RunDir:
    """Train one run to completion (resuming an unfinished one); returns its record directory.

    A finished run asked again with the same config is skipped; with another config it is refused
    with the difference, unless cfg.force (see RunDir.prepare). A lock beside the run folder keeps
    two processes from running, or forcing, the same run, whatever their work_dirs: the second is
    refused (RunRefused, one line). A full disk or a folder it cannot write stops it with one line
    (RunStopped); what it recorded stays whole and resumes.
    """
    quiet()
    check_machine(cfg)
    r = resolve(cfg, methods)
    try:
        return _fit_exclusively(r, cfg)
    except OSError as error:
        line = storage_problem(error, r.run_dir.path, cfg.work_dir)
        if line is None:
            raise
        raise RunStopped(line) from error


def _fit_exclusively(r: Resolved, cfg: RunConfig) -> RunDir:
    """`_fit_locked` under the run's lock, taken by rank 0 (the other ranks of a run rely on it)."""
    r.run_dir.lock_path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(r.run_dir.lock_path))
    if not r.run_dir.writer:  # a rank > 0: rank 0 holds the lock
        return _fit_locked(r, cfg)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunRefused(f"another process is running {r.run_dir.path} (lock {lock.lock_file}); "
                         "wait for it or stop it before starting this run again") from None
    try:
        return _fit_locked(r, cfg)
    finally:
        lock.release()


def _warm_start(r: Resolved, cfg: RunConfig) -> tuple[Any, Any, dict[str, Any]]:
    """The tokenizer, the warm-started base and its record (`common.warmstart.warm_started_base`)."""
    from common.device import base_dtype, warm_start_device
    from common.warmstart import warm_started_base

    if cfg.trainer.threads:
        torch.set_num_threads(cfg.trainer.threads)
    torch.manual_seed(cfg.seed)
    t = cfg.trainer
    return warm_started_base(cfg.model, cfg.sft, r.env, cfg.seed, cfg.work_dir, progress=cfg.progress,
                             dtype=base_dtype(t.accelerator, t.precision),
                             device=warm_start_device(t.accelerator))


def _fit_locked(r: Resolved, cfg: RunConfig) -> RunDir:
    if world_size(cfg) == 1 and not r.run_dir.writer:
        return r.run_dir  # a training-free run: rank 0 evaluates it alone
    together = _srun_started_ranks(cfg)
    warm = None
    if together:
        # every rank reads the warm start (the first one builds it) before the process group exists:
        # transformers' save_pretrained writes nothing on a rank > 0 of one
        warm = _warm_start(r, cfg)
        _start_process_group(cfg)
    state = _prepare(r, cfg, together)
    if state == "finished":
        print(f"already finished, skipped: {r.run_dir.path}", flush=True)
        return r.run_dir

    import lightning as L

    from common.engines import make_engine
    from common.policy import Policy
    from common.trainer import RLModule

    r.run_dir.write_config(cfg)
    r.run_dir.write_manifest({"method": cfg.method["name"], "env": r.env.cfg.tag or r.env.name,
                              "arm": cfg.arm, "seed": cfg.seed, "scale": cfg.scale, "state_at_start": state,
                              "env_provenance": r.env.provenance(), "eval_split": cfg.eval.split,
                              "torch_threads": cfg.trainer.threads or torch.get_num_threads(),
                              "world_size": world_size(cfg),
                              "ranks_started_by": (("srun" if together else "lightning")
                                                   if world_size(cfg) > 1 else None)})
    tokenizer, base, info = warm or _warm_start(r, cfg)
    max_length = (cfg.model.max_length if cfg.model.kind == "tiny"
                  else getattr(base.config, "max_position_embeddings", 4096))
    r.env.check_context(lambda s: len(tokenizer.encode(s, add_special_tokens=False)), max_length,
                        cfg.trainer.max_new_tokens)
    r.run_dir.update_manifest(warmstart=info)
    policy = Policy(base, tokenizer, cfg.model, r.env.roles)
    if cfg.trainer.gradient_checkpointing:
        policy.enable_gradient_checkpointing()
    engine = make_engine(cfg, policy)
    module = RLModule(cfg, r.method, r.env, policy, engine, r.run_dir)
    trainer = L.Trainer(
        max_epochs=1, accelerator=cfg.trainer.accelerator, devices=cfg.trainer.devices,
        num_nodes=cfg.trainer.num_nodes, logger=_loggers(cfg, r.run_dir) or False,
        enable_checkpointing=False, enable_progress_bar=cfg.progress,
        enable_model_summary=False, num_sanity_val_steps=0, plugins=_plugins(cfg), log_every_n_steps=1,
        deterministic=False, strategy=_strategy(cfg), use_distributed_sampler=False,
    )
    ckpt = r.run_dir.resume_checkpoint  # verified by prepare: it loads
    if cfg.trainer.steps > 0:
        trainer.fit(module, ckpt_path=str(ckpt) if ckpt else None)
    else:
        r.run_dir.truncate_metrics(0)  # the same records as a trained run: a metrics file, with no step in it
    if "initial" not in module.evals and cfg.eval.at_start:
        module.evals["initial"] = module.run_eval(0)
    # a trained run has it: evaluated after its last step (RLModule.training_step); a training-free run
    # (zero RL steps) evaluates its one policy once: initial and final are the same
    if "final" not in module.evals:
        same = cfg.trainer.steps == 0 and "initial" in module.evals
        module.evals["final"] = module.evals["initial"] if same else module.run_eval(cfg.trainer.steps)
    r.run_dir.write_eval(module.evals)
    if r.run_dir.writer:  # the final policy in PEFT's format (what `make evaluate RUN=` reads back)
        adapters = policy.save_adapters(r.run_dir.building / ADAPTERS)
        method_state = r.method.state_dict()
        if method_state:  # what the method's play reads besides the adapters (e.g. running statistics)
            (r.run_dir.building / ADAPTERS).mkdir(exist_ok=True)
            torch.save(method_state, r.run_dir.building / ADAPTERS / "method_state.pt")
        r.run_dir.update_manifest(adapters={a: f"{ADAPTERS}/{a}" for a in adapters},
                                  role_adapters=policy.role_adapter)
    engine.close()
    r.run_dir.mark_done()
    return r.run_dir
