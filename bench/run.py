"""`make bench`: our GRPO step against TRL's GRPOTrainer on the same work, against the eager minimal
work of a step and against the machine's matmul rate; and batched multi-turn rollouts against a
one-episode-at-a-time engine. Writes results/bench/bench.json and bench.md and prints the table.

    .venv/bin/python -m bench.run                       # the full benchmark (both model sizes)
    .venv/bin/python -m bench.run --quick --out /tmp/b  # a tiny configuration (tests)

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

from bench.report import markdown
from bench.work import Setting, matmul_rate, summary


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return sorted(f for f in flags if f.startswith(("avx512_bf16", "amx", "avx512f", "avx2", "avx_vnni")))


def series_stats(records: list[dict[str, Any]], stats: dict[str, Any]) -> dict[str, Any]:
    times = [r["time_s"] for r in records]
    tokens = [r["generated_tokens"] for r in records]
    out = {"step": summary(times), "generated_tokens_per_step": statistics.mean(tokens),
           "tokens_per_s": sum(tokens) / sum(times), **stats}
    for part in ("time_rollout_s", "time_train_s", "time_generate_s", "flops_train", "flops_generate"):
        if records and part in records[0]:
            out[part] = statistics.median(r[part] for r in records)
    return out


def run_cell(s: Setting, precisions: list[str], trl_precisions: list[str], warmup: int, steps: int) -> dict[str, Any]:
    """One model x KL cell: every trainer series, alternating step by step."""
    from bench.alternate import alternate

    series: dict[str, tuple[str, dict[str, Any]]] = {}
    for p in dict.fromkeys(precisions + trl_precisions):  # the reference of every series' precision
        series[f"minimal/{p}"] = ("minimal", replace(s, precision=p).as_dict())
    for p in precisions:
        series[f"ours/{p}"] = ("ours", replace(s, precision=p).as_dict())
    for p in trl_precisions:
        series[f"trl/{p}"] = ("trl", replace(s, precision=p).as_dict())
    workers = alternate(series, warmup, steps)
    return {name: series_stats(w.records, w.stats) for name, w in workers.items()}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,tiny10m", help="common/conf/model/<name>.yaml, comma-separated")
    ap.add_argument("--steps", default="12,5", help="measured steps per series, per model (comma list, last repeats)")
    ap.add_argument("--warmup", type=int, default=1, help="unmeasured steps first")
    ap.add_argument("--all-precisions", dest="best_only_after_first", action="store_false",
                    help="every precision in every KL cell (default: after the first cell, each trainer at its best)")
    ap.add_argument("--precisions", default="32,bf16", help="our trainer's trainer.precision values")
    ap.add_argument("--trl-precisions", default="32,bf16", help="TRL's (bf16 = its bf16=True autocast)")
    ap.add_argument("--kl", default="0,0.04", help="KL coefficients (k3 in the loss); 0 = off")
    ap.add_argument("--tasks", type=int, default=16, help="prompts per step")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads of every part; 0 = all cores")
    ap.add_argument("--mt-tasks", type=int, default=16, help="multi-turn: tasks x group episodes per rollout")
    ap.add_argument("--mt-group", type=int, default=8)
    ap.add_argument("--mt-reps", type=int, default=2)
    ap.add_argument("--mt-sft-steps", type=int, default=200)
    ap.add_argument("--device", default="cpu", help="cpu | cuda (bench/gpu.sh)")
    ap.add_argument("--engine", default="hf", help="our engine: hf | vllm (then TRL generates with vLLM too)")
    ap.add_argument("--no-multiturn", action="store_true", help="skip the multi-turn rollout part")
    ap.add_argument("--no-engines", action="store_true", help="skip bench/engines.py (HF vs vLLM engine columns)")
    ap.add_argument("--no-trl", action="store_true", help="skip TRL (also skipped when it is not installed)")
    ap.add_argument("--quick", action="store_true", help="a tiny configuration for tests (2 steps, tiny model)")
    ap.add_argument("--work-dir", default=".cache/bench")
    ap.add_argument("--out", default="results/bench")
    a = ap.parse_args(argv)
    if a.quick:
        a.models, a.steps, a.warmup, a.kl, a.precisions, a.trl_precisions = "tiny", "2", 1, "0", "32", "32"
        a.tasks, a.group, a.mt_tasks, a.mt_group, a.mt_reps, a.mt_sft_steps = 4, 4, 2, 2, 1, 20
    from common.run import quiet

    quiet()
    have_trl = importlib.util.find_spec("trl") is not None
    trl_precisions = [] if a.no_trl or not have_trl else a.trl_precisions.split(",")
    threads = a.threads or os.cpu_count() or 1
    torch.set_num_threads(threads)
    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "machine": {"cpus": os.cpu_count(), "threads": threads, "cpu_flags": cpu_flags(), "platform": platform.platform(),
                    "torch": torch.__version__, "trl": _version("trl") if have_trl else None,
                    "transformers": _version("transformers"), "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
                    "load_average_start": list(os.getloadavg())},
        "settings": {"device": a.device, "engine": a.engine, "tasks_per_step": a.tasks, "group_size": a.group, "max_new_tokens": a.new_tokens, "lr": a.lr,
                     "temperature": 1.0, "steps": a.steps, "warmup": a.warmup, "kl": a.kl},
        "trl_skipped": None if trl_precisions else ("--no-trl" if a.no_trl else "trl is not installed (pip install .[bench])"),
        "matmul_flops": {"32": matmul_rate(torch.float32, device=a.device), "bf16": matmul_rate(torch.bfloat16, device=a.device)},
        "models": {},
    }
    steps = [int(x) for x in a.steps.split(",")]
    for i, model in enumerate(a.models.split(",")):
        n_steps = steps[min(i, len(steps) - 1)]
        base = Setting(model=model, tasks_per_step=a.tasks, group_size=a.group, max_new_tokens=a.new_tokens, lr=a.lr,
                       threads=a.threads, work_dir=a.work_dir, device=a.device, engine=a.engine)
        entry: dict[str, Any] = {"params": _params(base), "cells": {}}
        if "bf16" in a.precisions.split(","):
            from bench.precision import precision_accuracy

            entry["bf16_accuracy"] = precision_accuracy(base)
        precisions, trl_cell = a.precisions.split(","), trl_precisions
        for kl in a.kl.split(","):
            cell = run_cell(replace(base, kl_coef=float(kl)), precisions, trl_cell, a.warmup, n_steps)
            entry["cells"][f"kl={kl}"] = cell
            if a.best_only_after_first:  # later cells: each trainer at its best precision of the first cell
                precisions = [_best(cell, "ours")]
                trl_cell = [_best(cell, "trl")] if trl_cell else []
        result["models"][model] = entry
        print(f"[bench] {model} done at {time.perf_counter() - t_start:.0f} s", flush=True)
    from bench.multiturn import measure_multiturn

    if not a.no_multiturn:
        result["multiturn"] = measure_multiturn(Setting(threads=a.threads, work_dir=a.work_dir), a.mt_tasks, a.mt_group,
                                                a.new_tokens, a.mt_sft_steps, a.mt_reps)
    if not a.quick and not a.no_engines and (Path(__file__).parent / "engines.py").exists():
        result["engines"] = run_engines(a.out, a.threads)
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


def derive(result: dict[str, Any]) -> None:
    """Ratios, overheads over the minimal work (same cell, same precision), and MFU."""
    for entry in result["models"].values():
        for cell in entry["cells"].values():
            series = {k: v for k, v in cell.items() if isinstance(v, dict) and "step" in v}
            ours = {k: v for k, v in series.items() if k.startswith("ours/")}
            trl = {k: v for k, v in series.items() if k.startswith("trl/")}
            for name, stats in series.items():
                p = name.split("/")[1]
                minimal = series.get(f"minimal/{p}")
                if minimal is None or name.startswith("minimal/"):
                    continue
                stats["overhead_over_minimal"] = stats["step"]["median_s"] / minimal["step"]["median_s"] - 1
                if name.startswith("ours/"):
                    rate = result["matmul_flops"][p]
                    stats["mfu_train"] = minimal["flops_train"] / stats["time_train_s"] / rate
                    stats["mfu_step"] = (minimal["flops_train"] + minimal["flops_generate"]) / stats["step"]["median_s"] / rate
            for p in {k.split("/")[1] for k in series}:
                m = series.get(f"minimal/{p}")
                if m is not None:
                    m["mfu_train"] = m["flops_train"] / m["time_train_s"] / result["matmul_flops"][p]
            best_ours = min(ours, key=lambda k: ours[k]["step"]["median_s"])
            cell["best_ours"] = best_ours
            if trl:
                best_trl = min(trl, key=lambda k: trl[k]["step"]["median_s"])
                cell["best_trl"] = best_trl
                cell["ratio_ours_over_trl"] = ours[best_ours]["step"]["median_s"] / trl[best_trl]["step"]["median_s"]
                cell["ratio_same_precision"] = {k.split("/")[1]: v["step"]["median_s"] / trl["trl/" + k.split("/")[1]]["step"]["median_s"]
                                                for k, v in ours.items() if "trl/" + k.split("/")[1] in trl}


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


def _params(s: Setting) -> int:
    from bench.work import base_model

    _, model = base_model(s)
    return sum(p.numel() for p in model.parameters())


def _version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
