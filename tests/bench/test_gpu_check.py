"""scripts/gpu-check.sh and its driver (bench/gpu_check.py) on CPU: the script starts, plans every
check, runs its CPU-safe part for real, and reports failures, timeouts and a missing GPU in its JSON."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench import gpu_check

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--set", "sft.enabled=false", "--set", "env.train_size=32", "--set", "env.heldout_size=8",
        "--set", "eval.k=1"]


def report(folder: Path) -> dict:
    (path,) = folder.glob("*.json")
    return json.loads(path.read_text())


def test_the_script_starts_and_plans_every_check(tmp_path):
    proc = subprocess.run(["bash", "scripts/gpu-check.sh", "--dry-run", "--out", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    r = report(tmp_path)
    assert r["mode"] == "dry-run"
    assert [c["name"] for c in r["checks"]] == ["hf", "vllm", "smollm2", "ddp", "ddp-vllm"]
    assert all(c["status"] in ("planned", "skipped") and c["rc"] is None for c in r["checks"])
    hf = r["checks"][0]
    assert "engine=hf" in hf["overrides"] and "trainer.precision=bf16" in hf["overrides"]
    assert "engine=vllm" in r["checks"][1]["overrides"] and "model=smollm2" in r["checks"][2]["overrides"]
    assert "trainer.devices=2" in r["checks"][3]["overrides"]
    assert {"trainer.devices=2", "engine=vllm"} <= set(r["checks"][4]["overrides"])
    # what every manifest carries
    assert r["provenance"]["git_sha"] and "torch" in r["provenance"]["packages"]


def test_without_a_gpu_the_gpu_mode_says_so(tmp_path, capsys):
    if gpu_check.gpu_facts()["cuda_devices"]:
        pytest.skip("this machine has a GPU")
    assert gpu_check.main(["--out", str(tmp_path)]) == 2
    assert "no GPU visible" in capsys.readouterr().err
    r = report(tmp_path)
    assert r["passed"] is False and all(c["status"] == "skipped" for c in r["checks"])


def test_the_cpu_safe_check_runs_for_real(tmp_path):
    """The hf check on CPU: a real GRPO run, read back from its records (steps, seconds per step,
    manifest)."""
    assert gpu_check.main(["--cpu", "--only", "hf", "--steps", "2", "--out", str(tmp_path), *FAST]) == 0
    r = report(tmp_path)
    hf, *others = r["checks"]
    assert r["passed"] is True and r["mode"] == "cpu" and all(c["status"] == "skipped" for c in others)
    assert (hf["status"], hf["rc"], hf["steps"], hf["world_size"], hf["precision"]) == ("pass", 0, 2, 1, "32")
    assert len(hf["step_s"]) == 2 and hf["s_per_step"] == hf["step_s"][1] > 0
    assert hf["final_mean_at_k"] is not None and hf["wall_s"] > 0 and hf["log_tail"] == ""
    assert hf["manifest"]["method"] == "grpo" and hf["manifest"]["git_sha"]  # the run's own provenance


def test_a_failed_run_is_reported_with_its_log(tmp_path):
    assert gpu_check.main(["--cpu", "--only", "hf", "--out", str(tmp_path), "--set", "trainer.lr=-1"]) == 1
    (hf, *_) = report(tmp_path)["checks"]
    assert hf["status"] == "fail" and hf["reason"].startswith("exit status 2")
    assert "trainer.lr must be > 0" in hf["log_tail"]


def test_a_run_past_its_limit_is_killed_and_reported(tmp_path, monkeypatch):
    plan = gpu_check.plan

    def slow_plan(cpu, steps):
        checks = plan(cpu, steps)
        checks[0].timeout_s = 1
        return checks

    monkeypatch.setattr(gpu_check, "plan", slow_plan)
    assert gpu_check.main(["--cpu", "--only", "hf", "--out", str(tmp_path)]) == 1
    (hf, *_) = report(tmp_path)["checks"]
    assert hf["status"] == "timeout" and hf["reason"] == "still running after 1 s" and hf["wall_s"] < 30
