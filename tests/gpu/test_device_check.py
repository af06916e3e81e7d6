"""scripts/device_check.py's CPU-runnable parts: without CUDA the GPU items say `skipped: no CUDA`,
bf16 (float32 expected on CPU), nccl (Lightning's DDPStrategy on gloo at world size 1) and logprobs pass, a
missing package is named with its wheel, and the JSON holds one verdict per item."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("device_check", ROOT / "scripts" / "device_check.py")
assert spec is not None and spec.loader is not None
device_check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(device_check)


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU verdicts")
def test_cpu_verdicts(tmp_path, capsys):
    rc = device_check.main(["--out", str(tmp_path / "dc.json")])
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("[device-check] ")]
    items = json.loads((tmp_path / "dc.json").read_text())["items"]
    assert rc == 0 and list(items) == list(device_check.ITEMS) and len(lines) == len(items) + 1
    for gpu_only in ("placement", "memory", "grpo"):
        assert items[gpu_only]["status"] == "skipped" and "no CUDA" in items[gpu_only]["detail"]
    for item in ("bf16", "nccl", "logprobs"):
        assert items[item]["status"] == "pass", items[item]
    assert "gloo" in items["nccl"]["detail"] and "float32 expected" in items["bf16"]["detail"]


def test_a_missing_package_is_named_with_its_wheel(monkeypatch, capsys):
    def needs_hydra(budget):
        raise ModuleNotFoundError("No module named 'hydra'", name="hydra")

    monkeypatch.setitem(device_check.CHECKS, "grpo", needs_hydra)
    results = device_check.run(("grpo",))
    assert results["grpo"]["status"] == "skipped"
    assert "hydra-core==1.3.8" in results["grpo"]["detail"] and "pip download" in results["grpo"]["detail"]


def test_a_failing_item_does_not_stop_the_others(monkeypatch):
    monkeypatch.setitem(device_check.CHECKS, "placement", lambda budget: 1 / 0)
    results = device_check.run(("placement", "logprobs"))
    assert results["placement"]["status"] == "FAIL" and "ZeroDivisionError" in results["placement"]["detail"]
    assert results["logprobs"]["status"] == "pass"


def test_out_of_time_items_are_skipped():
    assert device_check.run(("logprobs",), budget_s=1)["logprobs"]["status"] == "skipped"


def test_list_wheels(capsys):
    assert device_check.main(["--list-wheels"]) == 0
    assert "pip download --no-deps omegaconf==2.3.1 -d wheels/" in capsys.readouterr().out
