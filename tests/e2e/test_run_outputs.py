"""End to end (#44): a GRPO smoke run writes its sample log and exports its final adapter, and
`python -m experiments.evaluate` (`make evaluate`) evaluates that adapter again to exactly the run's
final evaluation, from the run folder (RUN=) and from the adapter folder with the run's settings
(ADAPTER=)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
ROOT = Path(__file__).resolve().parents[2]
COUNTERS = ("generated_tokens_total", "model_calls_total")


def settings(out, work):
    return [f"out_dir={out}", f"work_dir={work}", "scale=smoke", "progress=false", "trainer.threads=1",
            "eval.max_tasks=16", "log.samples_every=2", "log.samples_groups=3"]  # smoke warm start: it learns


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out, work = tmp_path_factory.mktemp("out"), tmp_path_factory.mktemp("work")
    subprocess.run([sys.executable, "-m", "experiments.run", "method=grpo", *settings(out, work)], cwd=ROOT,
                   check=True, capture_output=True, timeout=600)
    return out / "grpo" / "arith" / "default" / "seed-0", out, work


def test_the_sample_log_holds_the_first_groups_of_every_second_step_and_the_last(run):
    folder, _, _ = run
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    assert [(r["step"], r["group"]) for r in rows] == [(s, g) for s in (0, 2, 3) for g in range(3)]
    for r in rows:
        assert r["prompt"] and len(r["completions"]) == 4  # smoke: group_size 4
        for c in r["completions"]:
            assert isinstance(c["text"], str) and c["reward"] in (0.0, 1.0)
            assert c["advantage"] is None or isinstance(c["advantage"], float)
    # GRPO: the advantages of a group with mixed rewards sum to about zero and follow the rewards
    mixed = [r for r in rows if len({c["reward"] for c in r["completions"]}) > 1]
    for r in mixed:
        best = max(r["completions"], key=lambda c: c["reward"])
        worst = min(r["completions"], key=lambda c: c["reward"])
        assert best["advantage"] > 0 > worst["advantage"]


def test_the_adapter_is_exported_and_recorded(run):
    folder, _, _ = run
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["adapters"] == {"policy": "adapters/policy"}
    assert manifest["role_adapters"] == {"solver": "policy"}
    assert {p.name for p in (folder / "adapters" / "policy").iterdir()} >= {"adapter_config.json",
                                                                              "adapter_model.safetensors"}
    from safetensors.torch import load_file

    weights = load_file(folder / "adapters" / "policy" / "adapter_model.safetensors")
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in weights.items())  # trained (B starts at 0)


def evaluate(*args):
    return subprocess.run([sys.executable, "-m", "experiments.evaluate", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def _final(folder):
    final = json.loads((folder / "eval.json").read_text())["final"]
    return {k: v for k, v in final.items() if k.split("/")[0] not in COUNTERS}  # the run's, per tag too


def test_evaluate_run_reproduces_the_final_evaluation_exactly(run, tmp_path):
    folder, _, work = run
    out = tmp_path / "re.json"
    done = evaluate("--run", folder, "--out", out, "--work-dir", work)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(out.read_text())
    assert record["evaluated"]["split"] == "heldout"
    assert record["final"] == _final(folder)
    assert not (folder / "re.json").exists() and "mean@k" in done.stdout


def test_evaluate_adapter_with_the_runs_settings_reproduces_it_too(run, tmp_path):
    folder, out_dir, work = run
    out = tmp_path / "re.json"
    done = evaluate("--adapter", folder / "adapters", "--out", out, "method=grpo", *settings(out_dir, work))
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text())["final"] == _final(folder)


def test_evaluate_the_base_gives_the_runs_initial_evaluation(run, tmp_path):
    """ADAPTER=none: the warm start with untrained adapters (LoRA starts as the identity), as at step 0."""
    folder, out_dir, work = run
    out = tmp_path / "base.json"
    done = evaluate("--adapter", "none", "--out", out, "method=grpo", *settings(out_dir, work))
    assert done.returncode == 0, done.stderr[-2000:]
    initial = json.loads((folder / "eval.json").read_text())["initial"]
    base = json.loads(out.read_text())["final"]
    assert base["step"] == 4 and initial["step"] == 0  # evaluated as the run's last step; the same seeds
    assert {k: v for k, v in base.items() if k != "step"} == {
        k: v for k, v in initial.items() if k != "step" and k.split("/")[0] not in COUNTERS}
    # the trained adapter plays otherwise than the base: the exact reproductions above tell the two apart
    assert {k: v for k, v in base.items() if k != "step"} != {k: v for k, v in _final(folder).items()
                                                             if k != "step"}
