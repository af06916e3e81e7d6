"""Trainer workers: our Lightning trainer and TRL's GRPOTrainer, each in its own process, each
stepping only when the benchmark tells it to.

Each worker runs its trainer's own loop unchanged (`Trainer.fit`, `GRPOTrainer.train`); a callback
at the start of every step reports the previous step (wall time from the go signal to the start of
the next step, so every cost of a step is counted, the loop's own included) and blocks until the
next go. Only one worker computes at a time, so the trainers alternate step by step on the same
machine without sharing it. Separate processes give each trainer its own peak memory.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import torch

from bench.work import Setting, answer, peak_rss_mib, prompt_text, rss_mib, step_prompts


class Gate:
    """Blocks at each step start until the parent says go; reports the step that just ended."""

    def __init__(self, conn: Any, info: Any):
        self.conn, self.info = conn, info
        self.started: float | None = None
        self.rss_first: float | None = None

    def arrive(self) -> None:
        record = None
        if self.started is not None:
            record = {"time_s": time.perf_counter() - self.started, **self.info()}
        else:
            self.rss_first = rss_mib()
        self.conn.send(("ready", record))
        if self.conn.recv() == "stop":
            self.conn.send(("stats", {"peak_rss_mib": peak_rss_mib(),
                                      "rss_at_first_step_mib": self.rss_first}))
            self.conn.close()
            os._exit(0)  # the measurement is over; nothing of the trainer's is worth finishing
        self.started = time.perf_counter()


def main(kind: str, setting: dict[str, Any], steps: int, conn: Any) -> None:
    """Process entry point: build the trainer of `kind` (ours | trl) and run `steps` gated steps."""
    from common.fit import quiet

    quiet()
    s = Setting(**setting)
    torch.set_num_threads(s.threads or os.cpu_count() or 1)
    try:
        {"ours": run_ours, "trl": run_trl, "minimal": run_minimal}[kind](s, steps, conn)
    except BaseException as e:  # report, so the parent does not wait forever
        import traceback

        conn.send(("error", f"{kind}: {e!r}\n{traceback.format_exc()}"))
        raise


# ---- the minimal work -------------------------------------------------------------------------------
def run_minimal(s: Setting, steps: int, conn: Any) -> None:
    from bench.minimal import MinimalStep

    work = MinimalStep(s, steps)
    last: dict[str, Any] = {}
    gate = Gate(conn, lambda: last)
    for k in range(steps):
        gate.arrive()
        last = work.run(k)
    gate.arrive()


# ---- ours ------------------------------------------------------------------------------------------
def build_ours(s: Setting, steps: int, callbacks: list[Any]) -> tuple[Any, Any, Any]:
    """Our RLModule and a Lightning Trainer for `steps` GRPO steps of setting `s` (no eval, no
    checkpoints)."""
    import lightning as L

    from bench.work import bench_env, model_config
    from common.config import EngineConfig, EvalConfig, KLConfig, RunConfig, SFTConfig, TrainerConfig
    from common.engines import make_engine
    from common.fit import quiet
    from common.method import Method, MethodConfig, RunView
    from common.policy import Policy
    from common.records import RunDir
    from common.trainer import RLModule
    from common.warmstart import warm_started_base

    quiet()
    kl = KLConfig(coef=s.kl_coef, placement="loss" if s.kl_coef else "none", estimator="k3")
    trainer_cfg = TrainerConfig(steps=steps, tasks_per_step=s.tasks_per_step, group_size=s.group_size,
                                lr=s.lr, max_new_tokens=s.max_new_tokens, temperature=s.temperature, kl=kl,
                                checkpoint_every=0, threads=s.threads, precision=s.precision,
                                accelerator="gpu" if s.device == "cuda" else "cpu")
    engine = EngineConfig(name=s.engine, gpu_memory_utilization=0.3) if s.engine == "vllm" else EngineConfig()
    out = tempfile.mkdtemp(prefix="bench-ours-")
    cfg = RunConfig(model=model_config(s.model, s.work_dir), sft=SFTConfig(enabled=False),
                    trainer=trainer_cfg, engine=engine, eval=EvalConfig(at_start=False, every=0), seed=s.seed,
                    out_dir=out, work_dir=s.work_dir, loggers=[], progress=False, force=True)
    env = bench_env()
    method = Method(MethodConfig(), RunView.of(cfg, env))
    run_dir = RunDir.for_run(out, out, "grpo", "bench", "bench", s.seed)
    run_dir.prepare(force=True)
    torch.manual_seed(s.seed)
    tok, base, _ = warm_started_base(cfg.model, cfg.sft, env, s.seed, s.work_dir)
    policy = Policy(base, tok, cfg.model, env.roles)
    module = RLModule(cfg, method, env, policy, make_engine(cfg, policy), run_dir)
    trainer = L.Trainer(max_epochs=1, accelerator=trainer_cfg.accelerator, devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, callbacks=callbacks)
    return module, trainer, run_dir


def run_ours(s: Setting, steps: int, conn: Any) -> None:
    import lightning as L

    class GateCallback(L.Callback):
        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            gate.arrive()

    module, trainer, run_dir = build_ours(s, steps, [GateCallback()])

    def info() -> dict[str, Any]:
        last = run_dir.read_metrics()[-1]
        return {"generated_tokens": last["generated_tokens"], "time_rollout_s": last["time_rollout_s"],
                "time_reference_s": last["time_reference_s"], "time_train_s": last["time_train_s"]}

    gate = Gate(conn, info)
    trainer.fit(module)
    gate.arrive()


# ---- TRL ---------------------------------------------------------------------------------------------
def run_trl(s: Setting, steps: int, conn: Any) -> None:
    import logging
    import re
    import warnings

    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from bench.work import chat_format, model_config, model_folder

    warnings.filterwarnings("ignore")
    logging.getLogger("transformers").setLevel(logging.ERROR)
    cfg = model_config(s.model, s.work_dir)
    folder = model_folder(s)
    tok, model = (AutoTokenizer.from_pretrained(folder),
                  AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32))
    if tok.pad_token is None:  # as common.models.load_pretrained does
        tok.pad_token = tok.eos_token
    tasks = [t for step in step_prompts(s, steps + 1) for t in step]
    # an instruct model's prompts go in already wrapped in the chat template, exactly as our rollout
    # wraps them (TRL tokenizes a plain prompt as is), so both trainers see the same prompt tokens
    prompts = [prompt_text(t, chat_format(s, tok)) for t in tasks]
    ours = tok.encode(prompts[0], add_special_tokens=False)
    if tok(text=prompts[:1])["input_ids"][0] != ours:
        raise RuntimeError(f"TRL would tokenize the prompt differently from our rollout ({ours[:8]}...)")
    data = Dataset.from_dict({"prompt": prompts, "answer": [answer(t) for t in tasks]})
    counted = {"tokens": 0}
    final = re.compile(r"#\s*(-?\d+)\s*$")

    def reward(completions: list[str], answer: list[int], completion_ids: list[list[int]],
               **_: Any) -> list[float]:
        counted["tokens"] += sum(len(c) for c in completion_ids)
        out = []
        for text, a in zip(completions, answer, strict=True):
            m = final.search(text.strip())
            out.append(float(m is not None and int(m.group(1)) == a))
        return out

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="bench-trl-"),
        per_device_train_batch_size=s.tasks_per_step * s.group_size,
        num_generations=s.group_size, max_completion_length=s.max_new_tokens, temperature=s.temperature,
        top_p=1.0, learning_rate=s.lr, beta=s.kl_coef, max_steps=steps, shuffle_dataset=False,
        gradient_checkpointing=False, bf16=s.precision == "bf16", use_cpu=s.device == "cpu",
        use_vllm=s.engine == "vllm", vllm_mode="colocate", vllm_gpu_memory_utilization=0.3,
        report_to="none", save_strategy="no", disable_tqdm=True, seed=s.seed, dataloader_num_workers=0,
        max_grad_norm=1.0, weight_decay=0.0, lr_scheduler_type="constant",
    )
    peft = LoraConfig(r=cfg.lora_rank, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                      target_modules=list(cfg.lora_targets), bias="none", task_type="CAUSAL_LM")
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=data,
                          processing_class=tok, peft_config=peft)
    last = {"tokens": 0}

    def step_info() -> dict[str, Any]:
        n = counted["tokens"] - last["tokens"]
        last["tokens"] = counted["tokens"]
        return {"generated_tokens": n}

    gate = Gate(conn, step_info)

    class GateCallback(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            gate.arrive()

    trainer.add_callback(GateCallback())
    trainer.train()
    gate.arrive()
