"""Engine benchmark: the HF engine against the vLLM engine on the same rollouts and the same steps.

    .venv/bin/python -m bench.engines                      # CPU: tiny model, results/bench/engines.{json,md}
    .venv/bin/python -m bench.engines --quick --out /tmp/b # a few seconds of work (tests)
    bash bench/gpu_engines.sh                              # one GPU, a larger model (under 10 minutes)

Columns: `hf`, `vllm/adapter` (a fresh LoRA id per step) and `vllm/full` (weights reloaded in place,
prefix cache reset, adapters re-registered). Each step plays `--tasks` arith tasks x `--group`
episodes through the suite's own Rollout (GRPO's rollout), then takes one real optimizer step on the
adapters (and, for `vllm/full`, changes the base weights too) and calls `engine.sync()`.
Reported per column: engine start-up, generated tokens per second of rollout, rollout and sync time
per step (medians over the timed steps, after `--warmup` steps). A column whose engine is missing
(vLLM not installed) or fails says why instead of a number. Take numbers on a quiet machine
(`flock /tmp/cpu-heavy.lock ...`): the load average is recorded with the results.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import platform
import statistics
import time
import traceback
from pathlib import Path
from typing import Any

import torch

COLUMNS = ("hf", "vllm/adapter", "vllm/full")


def parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def build_base(args: argparse.Namespace) -> tuple[Any, Any, Any, Any]:
    from common.config import ModelConfig, SFTConfig
    from common.warmstart import warm_started_base
    from envs.testbeds.arith import ArithConfig, ArithEnv

    env = ArithEnv(ArithConfig(train_size=max(256, args.tasks), heldout_size=16))
    model_cfg = ModelConfig(**{k: parse_value(v) for k, v in (kv.split("=", 1) for kv in args.model_arg)})
    sft = SFTConfig(enabled=args.sft_steps > 0, steps=args.sft_steps)
    tok, base, _ = warm_started_base(model_cfg, sft, env, 0, args.work_dir)
    return env, model_cfg, tok, base


def make_column_engine(column: str, policy: Any, model_cfg: Any, args: argparse.Namespace) -> Any:
    from common.config import EngineConfig, RunConfig, SFTConfig, TrainerConfig

    if column == "hf":
        from common.engines.hf import HFEngine

        return HFEngine(policy, max_batch=256)
    from common.engines.vllm import VLLMEngine

    kv = args.kv_cache_bytes if args.kv_cache_bytes > 0 else None
    cfg = RunConfig(model=model_cfg, sft=SFTConfig(enabled=False),
                    trainer=TrainerConfig(precision=args.precision),
                    engine=EngineConfig(name="vllm", kv_cache_memory_bytes=kv, sync=column.split("/")[1],
                                        gpu_memory_utilization=args.gpu_memory_utilization))
    return VLLMEngine(policy, cfg)


def fake_optimizer_step(policy: Any, column: str, step: int) -> None:
    """One real AdamW-free SGD step on every trainable adapter (and the base, for full sync)."""
    params = policy.trainable_parameters()
    gen = torch.Generator().manual_seed(step)
    with torch.no_grad():
        for p in params:
            p.add_(1e-3 * torch.randn(p.shape, generator=gen).to(p.device))
        if column == "vllm/full":
            for name, p in policy.model.named_parameters():
                if "lora_" not in name and name.endswith("mlp.down_proj.base_layer.weight"):
                    p.mul_(1.0 + 1e-3)


def run_column(column: str, parts: tuple[Any, Any, Any, Any], args: argparse.Namespace) -> dict[str, Any]:
    from common.engines.base import SamplingParams
    from common.policy import Policy
    from common.rollout import Rollout

    env, model_cfg, tok, base = parts
    policy = Policy(copy.deepcopy(base), tok, model_cfg, env.roles)
    if args.device != "cpu":
        policy.model.to(args.device)
    t0 = time.perf_counter()
    engine = make_column_engine(column, policy, model_cfg, args)
    startup = time.perf_counter() - t0
    try:
        params = SamplingParams(temperature=1.0, max_new_tokens=args.max_new_tokens, stop=tuple(env.stop))
        rollout = Rollout(env, engine, tok, policy.role_adapter, policy.trainable_adapters, params,
                          model_cfg.max_length, seed=0)
        pool = env.task_set()["train"]
        steps: list[dict[str, float]] = []
        for step in range(args.warmup + args.steps):
            tasks = [pool[(step * args.tasks + i) % len(pool)] for i in range(args.tasks)]
            before = rollout.counters()["generated_tokens_total"]
            t0 = time.perf_counter()
            rollout.play_groups(tasks, [args.group] * len(tasks), step=step)
            t_rollout = time.perf_counter() - t0
            tokens = rollout.counters()["generated_tokens_total"] - before
            fake_optimizer_step(policy, column, step)
            t0 = time.perf_counter()
            engine.sync()
            t_sync = time.perf_counter() - t0
            if step >= args.warmup:
                steps.append({"rollout_s": t_rollout, "sync_s": t_sync, "tokens": tokens})
    finally:
        engine.close()
    rollout_s = sum(s["rollout_s"] for s in steps)
    return {
        "startup_s": startup,
        "tokens_per_s": sum(s["tokens"] for s in steps) / rollout_s if rollout_s else 0.0,
        "rollout_s_per_step": statistics.median(s["rollout_s"] for s in steps),
        "sync_ms_per_step": 1000 * statistics.median(s["sync_s"] for s in steps),
        "generated_tokens_per_step": statistics.mean(s["tokens"] for s in steps),
        "steps": steps,
    }


def markdown(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [
        f"# Engines: HF vs vLLM ({c['device']}, {c['params'] / 1e6:.2f}M-parameter model, "
        f"{c['tasks']} tasks x {c['group']} episodes per step, up to {c['max_new_tokens']} new tokens, "
        f"{c['steps']} timed steps)",
        "",
        "| engine | start-up s | tokens/s | rollout s/step | sync ms/step | tokens/step |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for col, r in result["columns"].items():
        if "error" in r:
            lines.append(f"| {col} | {r['error']} | | | | |")
        else:
            lines.append(f"| {col} | {r['startup_s']:.1f} | {r['tokens_per_s']:.0f} | "
                         f"{r['rollout_s_per_step']:.2f} | {r['sync_ms_per_step']:.1f} | "
                         f"{r['generated_tokens_per_step']:.0f} |")
    lines += ["", f"load average at start / end: {result['load_start']} / {result['load_end']}; "
              f"torch threads {c['threads']}; {result['machine']}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--columns", default=",".join(COLUMNS), help=f"comma-separated subset of {COLUMNS}")
    ap.add_argument("--tasks", type=int, default=16)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--sft-steps", type=int, default=0, help="warm start first (0: the untrained tiny model)")
    ap.add_argument("--model-arg", action="append", default=[], help="ModelConfig field=value (repeatable)")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--precision", default="32", choices=["32", "bf16"])
    ap.add_argument("--kv-cache-bytes", type=int, default=256 << 20,
                    help="vLLM KV cache; 0 = gpu_memory_utilization")
    ap.add_argument("--gpu-memory-utilization", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--work-dir", default=".cache")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--quick", action="store_true", help="4 tasks x 2 episodes, 8 tokens, 1 timed step")
    args = ap.parse_args(argv)
    if args.quick:
        args.tasks, args.group, args.max_new_tokens, args.steps, args.warmup = 4, 2, 8, 1, 0
    if args.threads:
        torch.set_num_threads(args.threads)
    columns = [c for c in args.columns.split(",") if c]
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        ap.error(f"unknown column(s) {unknown}; choose from {COLUMNS}")
    load_start = os.getloadavg()
    parts = build_base(args)
    result: dict[str, Any] = {
        "config": {**vars(args), "params": sum(p.numel() for p in parts[3].parameters()),
                   "threads": torch.get_num_threads()},
        "machine": f"{platform.machine()} {os.cpu_count()} cores, torch {torch.__version__}",
        "columns": {},
    }
    for col in columns:
        if col.startswith("vllm") and importlib.util.find_spec("vllm") is None:
            result["columns"][col] = {"error": "vLLM not installed (make setup VLLM=1)"}
            continue
        try:
            result["columns"][col] = run_column(col, parts, args)
        except Exception as e:  # a column that cannot run says why; the others still report
            traceback.print_exc()
            result["columns"][col] = {
                "error": f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"}
        shown = {k: v for k, v in result["columns"][col].items() if k != "steps"}
        print(f"[bench.engines] {col}: {json.dumps(shown)}", flush=True)
    result["load_start"], result["load_end"] = ([round(x, 2) for x in load_start],
                                                [round(x, 2) for x in os.getloadavg()])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "engines.json").write_text(json.dumps(result, indent=2))
    md = markdown(result)
    (out / "engines.md").write_text(md)
    print(md)
    return result


if __name__ == "__main__":
    main()
