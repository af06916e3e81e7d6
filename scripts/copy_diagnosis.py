"""Does the SFT warm start (common.warmstart.sft) teach the tiny model to copy? (issues #39, #41)

Each check trains a fresh tiny model with `sft` itself (its batching, right padding, loss mask and
OneCycle schedule) and reports a held-out copy accuracy; run each under the CPU lock.

    python scripts/copy_diagnosis.py synthetic fixed|variable [steps]   # x sep x, |x| = 12 or 4..12
    python scripts/copy_diagnosis.py iapo <D> [steps] [cpu|small]      # service_desk choice, packed rows
    python scripts/copy_diagnosis.py skillrise <demo_abstract> [steps] # copy layout, the copy probe

`iapo`'s model is IAPO's cpu scale's (`cpu`, replications/iapo/conf/scale/cpu.yaml: 128 wide, 3 layers,
4 heads) or the suite's 64-wide 2-layer one (`small`, the shape before #39's fix): at D = 8 and 400 steps
the first copies the method (P 0.999), the second stays at chance (0.332), as do 64 wide with 3 layers
and 128 wide with 2 layers (0.332 each).

`synthetic fixed` (every copy 13 tokens back) is solved by one fixed-offset positional head and says
nothing about content-based copying (induction); `variable` needs induction.
"""

from __future__ import annotations

import json
import random
import sys
import time

import torch

from common.models import build_tiny_model, train_tokenizer
from common.schema import ModelConfig, SFTConfig
from common.warmstart import demonstrations, sft

SMALL = {"hidden_size": 64, "intermediate_size": 192, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1,
         "head_dim": 32}


def synthetic(kind: str, steps: int = 250, vocab: int = 512, sep: int = 5) -> float:
    """x + sep -> x through `sft`; teacher-forced accuracy on 256 held-out sequences."""
    rng = random.Random(1)

    def seq() -> list[int]:
        return [rng.randrange(10, vocab) for _ in range(12 if kind == "fixed" else rng.randint(4, 12))]

    pairs = [(x + [sep], x) for x in (seq() for _ in range(10000))]
    model = build_tiny_model(ModelConfig(**SMALL, max_length=208), vocab, 0, 1)
    torch.manual_seed(0)
    sft(model, pairs, SFTConfig(steps=steps, lr=3e-3, batch_size=32), 0, 0)
    right = total = 0
    with torch.no_grad():
        for _ in range(256):
            x = seq()
            ids = torch.tensor([x + [sep] + x])
            right += int((model(input_ids=ids).logits[0, len(x):-1].argmax(-1) == ids[0, len(x) + 1:]).sum())
            total += len(x)
    return right / total


def iapo_shape() -> dict[str, int]:
    """The model shape of IAPO's cpu scale."""
    from pathlib import Path

    import yaml

    model = yaml.safe_load(Path("replications/iapo/conf/scale/cpu.yaml").read_text())["model"]
    return {k: model[k] for k in SMALL}


def iapo(delay: int, steps: int = 400, shape: str = "cpu") -> dict[str, float]:
    """IAPO cpu warm start (packed rows, lr 5e-3): P(right method) at the dev refunds, teacher-forced."""
    from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv

    kw = {"setting": "choice", "delays": [delay], "slack": 1, "human_rate": 0.0, "demo_trap": 0.0,
          "demo_repeat": 0.0, "train_size": 1000, "heldout_size": 64, "dev_size": 64, "demo_size": 2000}
    env = ServiceDeskEnv(ServiceDeskConfig(demo_right_tool=0.5, **kw))
    tok = train_tokenizer(list(env.corpus()), 512)
    pairs = demonstrations(env, tok, 2000, 0)
    dev_env = ServiceDeskEnv(ServiceDeskConfig(demo_right_tool=1.0, **kw))
    dev_env.task_set = lambda: {"demo": env.task_set()["dev"]}  # type: ignore[method-assign]
    dev = [(c, a) for c, a in demonstrations(dev_env, tok, 64, 1) if "refund" in tok.decode(a)]
    dims = iapo_shape() if shape == "cpu" else SMALL
    model = build_tiny_model(ModelConfig(**dims, vocab_size=512, max_length=208), len(tok),
                             tok.pad_token_id, tok.eos_token_id)
    torch.manual_seed(0)
    sft(model, pairs, SFTConfig(steps=steps, lr=5e-3, batch_size=32, pack=True), 0, tok.pad_token_id)
    argmax, prob = [], []
    with torch.no_grad():
        for ctx, act in dev:
            k = len(act) - 2  # the method token, then the stop string
            lp = model(input_ids=torch.tensor([ctx + act])).logits[0, len(ctx) + k - 1].log_softmax(-1)
            argmax.append(float(lp.argmax() == act[k]))
            prob.append(lp[act[k]].exp().item())
    return {"refunds": len(dev), "argmax": sum(argmax) / len(dev), "p": sum(prob) / len(dev)}


def skillrise(abstract: float, steps: int = 1000) -> dict[str, float]:
    """SkillRise's cpu warm start (copy layout, default model shape, lr 5e-3), then the copy probe's two
    hops (first step of the dev tasks of plans 3-4 with the right document)."""
    from envs.testbeds.skill_families import SkillFamiliesConfig, SkillFamiliesEnv

    env = SkillFamiliesEnv(SkillFamiliesConfig(layout="copy", demo_size=6000, demo_abstract=abstract,
                                               demo_concrete=min(0.3, 1 - abstract)))
    tok = train_tokenizer(list(env.corpus()), 384)
    pairs = demonstrations(env, tok, 6000, 0)
    model = build_tiny_model(ModelConfig(vocab_size=384, max_length=160), len(tok), tok.pad_token_id,
                             tok.eos_token_id)
    torch.manual_seed(0)
    sft(model, pairs, SFTConfig(steps=steps, lr=5e-3, batch_size=32), 0, tok.pad_token_id)
    probe_env = SkillFamiliesEnv(SkillFamiliesConfig(layout="copy", demo_slip=0.0))
    rng = random.Random(0)
    p_step, p_label = [], []
    for row in probe_env.task_set()["dev"]:
        task = json.loads(row["task"])
        if task["plan"] < 3:
            continue
        task["skill"] = " ".join(task["order"][: task["plan"] - 1])
        ep = probe_env.new_episode(task, rng)
        ids = tok.encode(ep.start().text, add_special_tokens=False)
        step, label = ep.oracle_action().split()  # type: ignore[attr-defined]
        word = tok.encode(" " + step, add_special_tokens=False)
        lab = tok.encode(" " + label, add_special_tokens=False)
        with torch.no_grad():
            lp = model(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
            lp2 = model(torch.tensor([ids + word + lab[:-1]])).logits[0, -1].log_softmax(-1)
        p_step.append(lp[word[0]].exp().item())
        p_label.append(lp2[lab[-1]].exp().item())
    return {"tasks": len(p_step), "p_step": sum(p_step) / len(p_step), "p_label": sum(p_label) / len(p_label)}


if __name__ == "__main__":
    torch.set_num_threads(2)
    what, arg, *rest = sys.argv[1:]
    t0 = time.time()
    if what == "synthetic":
        result: object = synthetic(arg, *map(int, rest))
    elif what == "iapo":
        result = iapo(int(arg), *map(int, rest[:1]), *rest[1:2])
    else:
        result = skillrise(float(arg), *map(int, rest))
    print(what, arg, *rest, result, f"{time.time() - t0:.0f}s")
