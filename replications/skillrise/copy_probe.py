"""Does a warm start copy? (issue #41) Teacher-forced on the dev tasks of plans 3-4 with the right document,
first step: the probability of the right step word (the document's first word), and of the right number
given that word (the token after it in the tools line), against a uniform guess among the task's tools.

    python -m replications.skillrise.copy_probe .cache/warmstart/<key> [layout]   # induction (default) | copy
"""

from __future__ import annotations

import json
import random
import sys

import numpy as np


def probe(warm_start: str, layout: str = "induction") -> dict[str, float | str]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envs.testbeds.skill_families import SkillFamiliesConfig, SkillFamiliesEnv

    tok = AutoTokenizer.from_pretrained(warm_start)
    model = AutoModelForCausalLM.from_pretrained(warm_start).eval()
    env = SkillFamiliesEnv(SkillFamiliesConfig(layout=layout, demo_slip=0.0))
    rng = random.Random(0)
    out: dict[str, list[float]] = {"p_word": [], "argmax_word": [], "p_number": [], "argmax_number": [],
                                   "uniform": []}
    for row in env.task_set()["dev"]:
        task = json.loads(row["task"])
        if task["plan"] < 3:
            continue
        task["skill"] = " ".join(task["order"][: task["plan"] - 1])
        ep = env.new_episode(task, rng)
        ids = tok.encode(ep.start().text, add_special_tokens=False)
        step, number = ep.oracle_action().split()  # type: ignore[attr-defined]
        word = tok.encode(" " + step, add_special_tokens=False)
        num = tok.encode(" " + number, add_special_tokens=False)  # ' ', digit (copy layout: one token)
        with torch.no_grad():
            lp = model(torch.tensor([ids])).logits[0, -1].log_softmax(-1)
            lp2 = model(torch.tensor([ids + word + num[:-1]])).logits[0, -1].log_softmax(-1)
        out["p_word"].append(lp[word[0]].exp().item())
        out["argmax_word"].append(float(lp.argmax() == word[0]))
        out["p_number"].append(lp2[num[-1]].exp().item())
        out["argmax_number"].append(float(lp2.argmax() == num[-1]))
        out["uniform"].append(1 / len(task["tools"]))
    return {"layout": layout, "tasks": len(out["uniform"]), **{k: float(np.mean(v)) for k, v in out.items()}}


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:3]), indent=1))
