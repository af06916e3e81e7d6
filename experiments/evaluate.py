"""Evaluate a saved policy: a run's exported adapters (or any adapter, or the base model) on an
environment's split, with the evaluation the runs use (`common.evaluate`, through the method's play).

    python -m experiments.evaluate --run runs/smoke/grpo/arith/default/seed-0          # its final eval
    python -m experiments.evaluate --run <run folder> --split dev
    python -m experiments.evaluate --adapter <folder> method=grpo env=arith scale=smoke seed=0
    python -m experiments.evaluate --adapter none method=grpo env=arith       # the (warm-started) base

`--run` reads the run's config.yaml, its warm start (rebuilt in work_dir if it is not cached there; it
must be the one the manifest records) and its exported adapters (`adapters/<adapter>/`, written at the
end of every run, with the method's state where it has one), and plays the run's evaluation again: on
the split it was evaluated on, the same record as eval.json's `final` but for the training compute
counters (`generated_tokens_total`, `model_calls_total`: the run's, not the evaluation's).
`--adapter` composes a config from the overrides as `experiments.run` does (the base: that config's
warm start) and loads the folder as every adapter of its policy (a folder of PEFT's format), or, from a
folder of such folders (a run's `adapters/`, with the method's state where it keeps one), each adapter
by its name; `none` evaluates the base.

The record goes to `--out` (default: <work_dir>/evaluate/<method>/<env>/<arm>/seed-<k>/eval-<split>.json),
{"evaluated": what was evaluated, "final": the evaluation}; a run folder is never written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from common.run_identity import YAML_LOADER

COUNTERS = ("generated_tokens_total", "model_calls_total")  # the training plays' counters (RLModule.run_eval)


def run_config(run: Path, split: str | None, work_dir: str | None) -> Any:
    """The run's recorded config, with the evaluated split and the work dir (its warm start) as asked."""
    from common.config import to_run_config

    config = yaml.load((run / "config.yaml").read_text(), Loader=YAML_LOADER)
    cfg = to_run_config(config)
    if split is not None:
        cfg.eval = replace(cfg.eval, split=split)
    if work_dir is not None:
        cfg.work_dir = work_dir
    cfg.progress, cfg.loggers = False, []  # nothing is logged: no logger package is needed
    return cfg


def _load_adapter(policy: Any, name: str, folder: Path) -> None:
    """One adapter of PEFT's format (`save_pretrained`) into the policy's adapter `name`; every tensor of
    that adapter must be in the file, and nothing else."""
    from peft.utils import set_peft_model_state_dict
    from safetensors.torch import load_file

    weights = folder / "adapter_model.safetensors"
    if not weights.exists():
        raise FileNotFoundError(f"{folder} holds no adapter_model.safetensors "
                                "(PEFT's save_pretrained format)")
    result: Any = set_peft_model_state_dict(policy.model, load_file(str(weights)), adapter_name=name)
    missing = [k for k in result.missing_keys if f".{name}." in k and "lora_" in k]
    if missing or result.unexpected_keys:
        raise ValueError(f"{folder} does not fit adapter {name!r} of this policy: missing {missing[:3]}, "
                         f"unexpected {list(result.unexpected_keys)[:3]}")


def adapter_folders(policy: Any, adapter: str) -> dict[str, Path]:
    """Adapter name -> the folder to load it from (`--adapter`); {} for `none` (the base)."""
    if adapter == "none":
        return {}
    folder = Path(adapter)
    if (folder / "adapter_config.json").exists():
        return {name: folder for name in policy.adapters}
    missing = [a for a in policy.adapters if not (folder / a / "adapter_config.json").exists()]
    if missing:
        raise FileNotFoundError(f"{folder} is neither an adapter folder (adapter_config.json) nor holds one "
                                f"per adapter of this policy (missing: {missing})")
    return {name: folder / name for name in policy.adapters}


def evaluate_policy(cfg: Any, folders: Callable[[Any], dict[str, Path]], method_state: Path | None = None,
                    expected_warmstart: str | None = None) -> dict[str, Any]:
    """The evaluation a run of `cfg` records as `final`, of its policy with the adapters
    `folders(policy)` names loaded (adapter name -> folder; {}: as the policy starts, i.e. the base)."""
    import torch

    from common.engines import make_engine
    from common.fit import _warm_start, quiet, resolve
    from common.policy import Policy
    from common.trainer import RLModule
    from replications import METHODS

    quiet()
    r = resolve(cfg, METHODS)
    tokenizer, base, info = _warm_start(r, cfg)  # as the run built it (its seeds, threads)
    if expected_warmstart is not None and info.get("key") != expected_warmstart:
        raise ValueError(f"the warm start built here ({info.get('key')}) is not the run's "
                         f"({expected_warmstart}): the code or settings it depends on changed")
    policy = Policy(base, tokenizer, cfg.model, r.env.roles)
    for name, folder in folders(policy).items():
        _load_adapter(policy, name, folder)
    if method_state is not None:
        r.method.load_state_dict(torch.load(method_state, map_location="cpu", weights_only=False))
    engine = make_engine(cfg, policy)
    module = RLModule(cfg, r.method, r.env, policy, engine, r.run_dir)
    if cfg.trainer.accelerator != "cpu" and torch.cuda.is_available():
        module.to("cuda")
    try:
        result = module.run_eval(cfg.trainer.steps)
    finally:
        engine.close()
    return {k: v for k, v in result.items() if k not in COUNTERS}


def evaluate_run(run: Path, split: str | None = None,
                 work_dir: str | None = None) -> tuple[Any, dict[str, Any]]:
    """A run's exported policy evaluated again (see the module's docstring): its config and the record."""
    manifest = json.loads((run / "manifest.json").read_text())
    if "adapters" not in manifest:
        raise ValueError(f"{run} records no exported adapters (a run from before they were exported): "
                         "rerun it, or evaluate an adapter folder with --adapter")
    cfg = run_config(run, split, work_dir)
    folders = {name: run / rel for name, rel in manifest["adapters"].items()}
    state = run / "adapters" / "method_state.pt"
    final = evaluate_policy(cfg, lambda _: folders, state if state.exists() else None,
                            (manifest.get("warmstart") or {}).get("key"))
    return cfg, {"evaluated": {"run": str(run), "adapters": {n: str(f) for n, f in folders.items()},
                               "split": cfg.eval.split}, "final": final}


def evaluate_adapter(adapter: str, method: str, overrides: list[str]) -> tuple[Any, dict[str, Any]]:
    """An adapter folder (or `none`: the base) on the config `method` and `overrides` compose."""
    from experiments.run import compose

    cfg = compose(method, overrides)
    cfg.progress, cfg.loggers = False, []
    state = Path(adapter) / "method_state.pt"  # a run's adapters/ keeps the method's state beside them
    final = evaluate_policy(cfg, lambda policy: adapter_folders(policy, adapter),
                            state if adapter != "none" and state.exists() else None)
    return cfg, {"evaluated": {"adapter": adapter, "method": method, "overrides": overrides,
                               "split": cfg.eval.split}, "final": final}


def default_out(cfg: Any, env: str) -> Path:
    return (Path(cfg.work_dir) / "evaluate" / cfg.method["name"] / env / cfg.arm / f"seed-{cfg.seed}"
            / f"eval-{cfg.eval.split}.json")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m experiments.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--run", help="a run folder: its exported adapters, settings and evaluation")
    which.add_argument("--adapter", help="an adapter folder (PEFT's format), a run's adapters/, or none")
    parser.add_argument("--split", choices=("heldout", "dev"), help="--run: the split (default: the run's)")
    parser.add_argument("--work-dir", help="--run: where its warm start is cached (default: the run's)")
    parser.add_argument("--out", help="the record's path (default: under <work_dir>/evaluate/)")
    parser.add_argument("overrides", nargs="*", help="--adapter: method=<m> and Hydra overrides (env=...)")
    args = parser.parse_args(argv)
    try:
        if args.run:
            if args.overrides:
                raise ValueError(f"--run evaluates the run's own settings; drop {args.overrides}")
            run = Path(args.run)
            if not (run / "done").exists():
                raise ValueError(f"{run} is not a finished run folder (no `done` in it)")
            cfg, record = evaluate_run(run, args.split, args.work_dir)
            env = run.parts[-3]
        else:
            from experiments.run import split_method

            method, rest = split_method(args.overrides)
            if args.split:
                rest.append(f"eval.split={args.split}")
            cfg, record = evaluate_adapter(args.adapter, method, rest)
            env = cfg.env.get("tag") or cfg.env["name"]
    except (ValueError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    out = Path(args.out) if args.out else default_out(cfg, env)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    final = record["final"]
    print(f"{cfg.eval.split}: mean@k {final['mean@k']:.4f}, pass@k {final['pass@k']:.4f} "
          f"(k={final['k']}, {final['n_tasks']} tasks); record: {out}")


if __name__ == "__main__":
    main()
