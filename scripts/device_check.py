"""The device check of issue #43: does the GPU path work on this machine? Decides in 5 minutes on one GPU.

    python scripts/device_check.py             # on a GPU node; JSON to results/device-check/<date>.json
    python scripts/device_check.py --only placement,bf16 --out /tmp/dc.json
    python scripts/device_check.py --list-wheels   # the wheels to bring to a node without network

Needs only PyTorch, Lightning, transformers and peft (no vLLM); the suite's other dependencies are needed by
the items that import the suite's pipeline, and a missing one is named with the wheel to bring
(`--list-wheels` prints `pip download` lines for them). One line per item, `[device-check] <item>:
pass|FAIL|skipped (...)`:

| item      | what                                                                                        |
| --------- | ------------------------------------------------------------------------------------------- |
| placement | a CUDA device; a model's forward and its inputs on it                                       |
| bf16      | a saved Llama loaded by the run's rule (`common.device`): bf16 base on CUDA, LoRA in fp32   |
| memory    | a random-initialised model of a paper shape (default Qwen3-8B, 1 row x 8192 tokens: SHARP's  |
|           | paper micro-batch): weights and one update's activation peak, with and without gradient     |
|           | checkpointing, against `experiments.plan_memory` (within 15%)                               |
| grpo      | 3 GRPO steps end to end (`experiments.run`, the tiny random Qwen3-style model, bf16, GPU)    |
| nccl      | Lightning's DDPStrategy with NCCL at world size 1 (the run's timeout), a gradient all-reduce |
| logprobs  | log-probabilities of sampled tokens (KV-cache decode) against a scoring forward, bf16        |

On a machine without CUDA the GPU items are `skipped: no CUDA` and the rest run on the CPU (gloo for nccl):
tests/gpu/test_device_check.py runs them in CI. Not yet run on a GPU: no GPU has been lent to this project.
Exit status: 0 when no item failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
ITEMS = ("placement", "bf16", "memory", "grpo", "nccl", "logprobs")
TOLERANCE = 0.15
# module -> (distribution, version this suite was tested with): the wheels a node without network needs
WHEELS = {
    "omegaconf": ("omegaconf", "2.3.1"),
    "hydra": ("hydra-core", "1.3.8"),
    "antlr4": ("antlr4-python3-runtime", "4.9.3"),
    "yaml": ("PyYAML", "6.0.4"),
    "filelock": ("filelock", "4.3.1"),
    "submitit": ("submitit", "1.5.4"),
    "cloudpickle": ("cloudpickle", "3.1.3"),
    "tqdm": ("tqdm", "4.70.1"),
    "datasets": ("datasets", "5.2.0"),
    "scipy": ("scipy", "1.17.1"),
    "pandas": ("pandas", "3.1.1"),
    "pyarrow": ("pyarrow", "?"),
    "matplotlib": ("matplotlib", "?"),
    "seaborn": ("seaborn", "?"),
}
Result = tuple[str, str]  # (pass | FAIL | skipped, detail)


def missing_package(error: ModuleNotFoundError) -> str:
    module = (error.name or "?").split(".")[0]
    dist, version = WHEELS.get(module, (module, "?"))
    pin = f"=={version}" if version != "?" else ""
    return (
        f"skipped: missing package {dist} (bring its wheel, {dist}{pin}: `pip download --no-deps "
        f"{dist}{pin} -d wheels/`, then `pip install --no-index --find-links wheels/ {dist}`)"
    )


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _tiny_llama(device: Any, dtype: Any, vocab: int = 256) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    model: Any = LlamaForCausalLM(config)
    return model.to(device=device, dtype=dtype).eval()


def _lora(model: Any) -> Any:
    from peft import LoraConfig, get_peft_model

    model.requires_grad_(False)
    return get_peft_model(
        model,
        LoraConfig(
            r=16,
            lora_alpha=32,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        ),
    )


# ---- the items -------------------------------------------------------------------------------------
def check_placement(budget: float) -> Result:
    import torch

    if not cuda():
        return "skipped", "no CUDA"
    model = _tiny_llama("cuda", torch.float32)
    ids = torch.randint(0, 256, (2, 16), device="cuda")
    out = model(input_ids=ids).logits
    devices = {str(p.device) for p in model.parameters()} | {str(out.device)}
    ok = devices == {"cuda:0"}
    return (
        "pass" if ok else "FAIL"
    ), f"{torch.cuda.get_device_name(0)}; parameters and logits on {sorted(devices)}"


def check_bf16(budget: float) -> Result:
    from types import SimpleNamespace

    import torch

    from common.device import base_dtype
    from common.models import load_pretrained, train_tokenizer

    accelerator = "gpu" if cuda() else "cpu"
    want = base_dtype(accelerator, "bf16")
    with tempfile.TemporaryDirectory() as tmp:
        _tiny_llama("cpu", torch.float32, vocab=300).save_pretrained(tmp)
        train_tokenizer(["1 + 2 = 3"] * 20, 280).save_pretrained(tmp)
        _, model = load_pretrained(SimpleNamespace(path=tmp, gguf_file=None, hf_id=None), want)  # type: ignore[arg-type]
    policy = _lora(model.to("cuda" if accelerator == "gpu" else "cpu"))
    base = {p.dtype for n, p in policy.named_parameters() if "lora_" not in n}
    lora = {p.dtype for n, p in policy.named_parameters() if "lora_" in n}
    ok = base == {want} and lora == {torch.float32}
    where = "CUDA: bf16 expected" if accelerator == "gpu" else "CPU: float32 expected (skipped bf16: no CUDA)"
    return (
        "pass" if ok else "FAIL"
    ), f"{where}; base {sorted(map(str, base))}, LoRA {sorted(map(str, lora))}"


def check_grpo(budget: float, steps: int = 3) -> Result:
    import experiments.run  # noqa: F401 - the suite's pipeline and its dependencies import
    import replications  # noqa: F401

    if not cuda():
        return "skipped", "no CUDA (the CPU runs GRPO in tests/e2e)"
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            sys.executable,
            "-m",
            "experiments.run",
            "method=grpo",
            "scale=smoke",
            f"trainer.steps={steps}",
            "trainer.accelerator=gpu",
            "trainer.devices=1",
            "trainer.precision=bf16",
            "eval.max_tasks=8",
            "progress=false",
            f"out_dir={tmp}/out",
            f"work_dir={tmp}/work",
        ]
        t0 = time.monotonic()
        proc = subprocess.run(
            cmd,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=max(30, budget - 5),
            env={**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"},
        )
        done = list(Path(tmp, "out").rglob("done"))
        metrics = [json.loads(line) for p in Path(tmp, "out").rglob("metrics.jsonl") for line in p.open()]
    seconds = time.monotonic() - t0
    if proc.returncode or not done or len(metrics) != steps:
        return "FAIL", f"rc {proc.returncode}, {len(metrics)}/{steps} steps; " + proc.stderr[-600:].replace(
            "\n", " | "
        )
    mean = sum(m["time_step_s"] for m in metrics[1:]) / max(1, len(metrics) - 1)
    return "pass", f"{steps} steps in {seconds:.0f} s (after the first {mean:.2f} s a step)"


def check_nccl(budget: float) -> Result:
    from datetime import timedelta

    import lightning as L
    import torch
    from lightning.pytorch.strategies import DDPStrategy

    on_gpu = cuda()
    grads: list[float] = []

    class One(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(4))

        def training_step(self, batch: Any, i: int) -> Any:
            loss = (self.w * batch.to(self.w.device)).sum()
            return loss

        def on_after_backward(self) -> None:
            import torch.distributed as dist

            grad: Any = self.w.grad
            y = grad.clone()
            dist.all_reduce(y)  # world size 1: the sum is the gradient itself
            grads.append(float((y - grad).abs().max()))

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(torch.ones(2, 4), batch_size=None)  # type: ignore[arg-type]

    import logging

    for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    backend = "nccl" if on_gpu else "gloo"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        os.environ["MASTER_PORT"] = str(sock.getsockname()[1])
    trainer = L.Trainer(
        accelerator="gpu" if on_gpu else "cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        strategy=DDPStrategy(process_group_backend=backend, timeout=timedelta(seconds=120)),
    )
    trainer.fit(One())
    import torch.distributed as dist

    used = dist.get_backend() if dist.is_initialized() else backend
    if dist.is_initialized():
        dist.destroy_process_group()
    ok = len(grads) == 2 and max(grads) == 0.0 and used == backend
    status = "pass" if ok else "FAIL"
    return status, f"DDPStrategy({used}) at world size 1, 2 steps, all-reduced gradients exact" + (
        "" if on_gpu else " (skipped NCCL: no CUDA; gloo on CPU)"
    )


def check_logprobs(budget: float) -> Result:
    import torch

    device = "cuda" if cuda() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = _lora(_tiny_llama(device, dtype))
    torch.manual_seed(1)
    prompt = torch.randint(3, 256, (4, 12), device=device)
    with torch.no_grad(), torch.autocast(device, dtype=torch.bfloat16, enabled=device == "cuda"):
        out = model.generate(
            input_ids=prompt,
            attention_mask=torch.ones_like(prompt),
            do_sample=True,
            max_new_tokens=24,
            min_new_tokens=24,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=0,
        )
        new = out.sequences[:, prompt.size(1) :]
        sampled = torch.stack(out.logits, 1).float().log_softmax(-1).gather(-1, new[..., None]).squeeze(-1)
        logits = model(input_ids=out.sequences).logits[:, prompt.size(1) - 1 : -1].float()
        scored = logits.log_softmax(-1).gather(-1, new[..., None]).squeeze(-1)
    diff = (sampled - scored).abs()
    limit = 0.02 if device == "cuda" else 1e-4
    ok = float(diff.mean()) <= limit
    return ("pass" if ok else "FAIL"), (
        f"{device} {str(dtype).split('.')[-1]}: |generation - scoring| mean "
        f"{float(diff.mean()):.2e}, max {float(diff.max()):.2e} (limit mean {limit})"
    )


def check_memory(budget: float) -> Result:
    from experiments.memory_probe import check_memory as probe

    return probe(budget, TOLERANCE) if cuda() else ("skipped", "no CUDA")


CHECKS: dict[str, Callable[[float], Result]] = {
    "placement": check_placement,
    "bf16": check_bf16,
    "memory": check_memory,
    "grpo": check_grpo,
    "nccl": check_nccl,
    "logprobs": check_logprobs,
}


def run(items: tuple[str, ...] = ITEMS, budget_s: float = 280.0) -> dict[str, dict[str, Any]]:
    """Every item in order, each within what is left of `budget_s`; a missing package skips its item."""
    deadline = time.monotonic() + budget_s
    results: dict[str, dict[str, Any]] = {}
    for item in items:
        left = deadline - time.monotonic()
        t0 = time.monotonic()
        if left < 10:
            status, detail = "skipped", "out of time"
        else:
            try:
                status, detail = CHECKS[item](left)
            except ModuleNotFoundError as error:
                status, detail = "skipped", missing_package(error)
            except Exception as error:  # noqa: BLE001 - an item's failure is its verdict, the others still run
                status, detail = "FAIL", f"{type(error).__name__}: {str(error)[:400]}"
        results[item] = {"status": status, "detail": detail, "seconds": round(time.monotonic() - t0, 1)}
        print(f"[device-check] {item}: {status} ({detail})", flush=True)
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default=",".join(ITEMS), help=f"comma-separated items of {', '.join(ITEMS)}")
    p.add_argument(
        "--budget-s", type=float, default=280.0, help="stop starting items after this many seconds"
    )
    p.add_argument("--out", default=None, help="the JSON (default results/device-check/<date>.json on CUDA)")
    p.add_argument("--list-wheels", action="store_true", help="print the pip download lines of WHEELS")
    args = p.parse_args(argv)
    if args.list_wheels:
        for dist, version in sorted(set(WHEELS.values())):
            print(f"pip download --no-deps {dist}{'==' + version if version != '?' else ''} -d wheels/")
        return 0
    items = tuple(i for i in args.only.split(",") if i)
    unknown = sorted(set(items) - set(ITEMS))
    if unknown:
        p.error(f"unknown item(s) {unknown}; items are {', '.join(ITEMS)}")
    results = run(items, args.budget_s)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H%M%SZ")
    out = Path(args.out or ROOT / ("results" if cuda() else "runs") / "device-check" / f"{stamp}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"when": stamp, "cuda": cuda(), "items": results}, indent=2) + "\n")
    failed = [i for i, r in results.items() if r["status"] == "FAIL"]
    print(f"[device-check] {'FAILED: ' + ', '.join(failed) if failed else 'no item failed'}; {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
