"""How a multi-turn episode's cost grows with its turns: our HF engine with key/value reuse across
turns (`engine.kv_reuse`, common/engines/kv_reuse.py) against the same engine re-encoding every
context whole, on a real environment and a real model.

The environment is TextWorld (envs/benchmarks/textworld/, its games made offline by TextWorld's own
generator) with `max_steps` = the number of turns: the untrained model rarely wins a game, so an
episode runs its full number of turns (the turns actually played are recorded). The model is
SmolLM2-135M-Instruct (LoRA rank 16, its chat template). Both engines play the same episodes (the
same environment seeds and sampling uniforms); `same_actions` says for how many turns the two
sampled the same tokens (they differ only by float rounding of the prefill) and
`logprob_abs_diff_max` how far apart their log-probabilities were on those turns.

With `vllm=True` (`--vllm`) a third series plays the same episodes through our vLLM engine
(`engine=vllm`: the policy's one adapter merged into the base, vLLM's prefix cache on, so a turn's
context already computed is reused from the cache; its prefix cache is emptied before each row, and
one unmeasured call of two tokens pays its one-time costs first). Its sampling is vLLM's own, so its
actions are not compared with the HF engine's, only its cost.

    python -m bench.turns --turns 2,4,8,16 --out /tmp/b          # one table; bench.cli --turns runs it too
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from omegaconf import OmegaConf

from bench.work import CONF, model_config


def textworld(turns: int, tasks: int) -> Any:
    from envs.benchmarks.textworld.games import TextWorldConfig
    from envs.registry import ENVS

    data: dict[str, Any] = OmegaConf.to_container(OmegaConf.load(CONF / "env" / "textworld.yaml"))  # type: ignore[assignment]
    data.pop("tag", None)
    data.update(max_steps=turns, train_size=tasks, heldout_size=2, dev_size=2)
    return ENVS["textworld"](TextWorldConfig(**data))


def _autocast(precision: str) -> torch.autocast:
    return torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16")


def _vllm_engine(policy: Any, mcfg: Any, precision: str, seed: int) -> Any:
    """Our vLLM engine as `engine=vllm` builds it for this policy, its one-time costs paid."""
    from common.config import EngineConfig, RunConfig, SFTConfig, TrainerConfig
    from common.engines.base import Request, SamplingParams
    from common.engines.vllm import VLLMEngine

    cfg = RunConfig(model=mcfg, sft=SFTConfig(enabled=False), trainer=TrainerConfig(precision=precision),
                    engine=EngineConfig(name="vllm", kv_cache_memory_bytes=1 << 30), seed=seed)
    engine = VLLMEngine(policy, cfg)
    engine.generate([Request(policy.tokenizer.encode("Hello", add_special_tokens=False), policy.adapters[0])],
                    SamplingParams(max_new_tokens=2), seed=seed)
    return engine


def measure_turns(model: str = "smollm2", turns: tuple[int, ...] = (2, 4, 8, 16), tasks: int = 4,
                  group: int = 2, max_new_tokens: int = 16, precision: str = "bf16", seed: int = 0,
                  work_dir: str = ".cache/bench", vllm: bool = False) -> dict[str, Any]:
    """For each number of turns: `tasks` x `group` episodes played with reuse and without; seconds
    per episode and per round (a turn of every live episode: `s_per_turn`), generated tokens per
    second, the context at the last turn."""
    from common.chat import ChatFormat
    from common.config import SFTConfig
    from common.engines.hf import HFEngine
    from common.policy import Policy
    from common.rollout import Rollout
    from common.warmstart import warm_started_base

    mcfg = model_config(model, work_dir)
    out: dict[str, Any] = {"model": model, "env": "textworld", "episodes": tasks * group,
                           "max_new_tokens": max_new_tokens, "precision": precision,
                           "threads": torch.get_num_threads(), "rows": []}
    tok = policy = vllm_engine = None
    series: tuple[str, ...] = ("reuse", "reencode", *(("vllm",) if vllm else ()))
    for n in turns:
        env = textworld(n, tasks)
        if policy is None:
            with torch.random.fork_rng():
                tok, base, _ = warm_started_base(mcfg, SFTConfig(enabled=False), env, seed, work_dir)
            policy = Policy(base, tok, mcfg, env.roles)
        chat = ChatFormat.from_tokenizer(tok) if mcfg.chat_template else None
        params_ = dict(temperature=1.0, top_p=1.0, max_new_tokens=max_new_tokens, stop=tuple(env.stop))
        from common.engines.base import SamplingParams

        params = SamplingParams(**params_)  # type: ignore[arg-type]
        pool = env.task_set()["train"]
        chosen = [pool[i % len(pool)] for i in range(tasks)]
        if n == turns[0]:  # one unmeasured episode first: the first call's one-time costs
            warm = HFEngine(policy, bf16=precision == "bf16")
            with _autocast(precision):
                Rollout(env, warm, tok, policy.role_adapter, [], params, 4096, seed, chat).play_groups(
                    chosen[:1], [1], step=1)
        played: dict[str, Any] = {}
        row: dict[str, Any] = {"turns": n}
        for name in series:
            if name == "vllm":
                if vllm_engine is None:
                    vllm_engine = _vllm_engine(policy, mcfg, precision, seed)
                vllm_engine.llm.reset_prefix_cache()  # nothing reused from the previous row's episodes
                engine: Any = vllm_engine
            else:
                engine = HFEngine(policy, bf16=precision == "bf16", kv_reuse=name == "reuse")
            rollout = Rollout(env, engine, tok, policy.role_adapter, [], params,
                              getattr(policy.model.config, "max_position_embeddings", 4096), seed, chat)
            t0 = time.perf_counter()
            with _autocast(precision):
                groups = rollout.play_groups(chosen, [group] * tasks, step=0)
            episodes = [e for g in groups for e in g.episodes]
            wall = time.perf_counter() - t0
            played[name] = episodes
            n_turns = sum(len(e.turns) for e in episodes)
            generated = rollout.counters()["generated_tokens_total"]
            row[name] = {"time_s": wall, "s_per_episode": wall / len(episodes),
                         "s_per_turn": wall / max(n_turns, 1) * len(episodes),
                         "tokens_per_s": generated / wall, "generated_tokens": generated,
                         "turns_per_episode": n_turns / len(episodes),
                         "context_tokens_last_turn": sum(len(e.turns[-1].prompt_ids) for e in episodes)
                         / len(episodes)}
            if getattr(engine, "store", None) is not None:
                row[name].update(cache_hits=engine.store.hits, cache_misses=engine.store.misses,
                                 reused_tokens=engine.store.reused_tokens)
            print(f"[turns] {n} turns, {name}: {wall:.1f} s", flush=True)
        pairs = [(a, b) for ea, eb in zip(played["reuse"], played["reencode"], strict=True)
                 for a, b in zip(ea.turns, eb.turns, strict=False)]
        same = [(a, b) for a, b in pairs if a.action_ids == b.action_ids]
        row["same_actions"] = len(same) / max(len(pairs), 1)
        row["logprob_abs_diff_max"] = max((abs(x - y) for a, b in same
                                           for x, y in zip(a.logprobs, b.logprobs, strict=True)), default=0.0)
        row["speedup"] = row["reencode"]["time_s"] / row["reuse"]["time_s"]
        out["rows"].append(row)
    if vllm_engine is not None:
        out["vllm_sync"] = vllm_engine.sync_mode
        vllm_engine.close()
    for name in series:
        per_turn = [r[name]["s_per_turn"] for r in out["rows"]]
        out[f"{name}_per_turn_growth"] = max(per_turn) / min(per_turn)
    return out


def markdown(r: dict[str, Any]) -> list[str]:
    lines = ["", f"Multi-turn episodes and their turns ({r['model']}, {r['env']}, {r['episodes']} episodes "
                 f"played together, up to {r['max_new_tokens']} new tokens a turn, precision "
                 f"{r['precision']}; our HF engine with key/value reuse across turns and re-encoding every "
                 "context):", "",
             "| turns | context at the last turn | reuse s/episode | re-encode s/episode | speed-up | "
             "reuse s/round | re-encode s/round | reuse tokens/s | re-encode tokens/s | same actions | "
             "max abs logp diff |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for row in r["rows"]:
        a, b = row["reuse"], row["reencode"]
        lines.append(f"| {row['turns']} ({a['turns_per_episode']:.1f} played) | "
                     f"{a['context_tokens_last_turn']:.0f} | {a['s_per_episode']:.2f} | "
                     f"{b['s_per_episode']:.2f} | {row['speedup']:.1f}x | "
                     f"{a['s_per_turn']:.3f} | {b['s_per_turn']:.3f} | {a['tokens_per_s']:.0f} | "
                     f"{b['tokens_per_s']:.0f} | {row['same_actions']:.0%} | "
                     f"{row['logprob_abs_diff_max']:.1e} |")
    lines += ["", "A round is one turn of every live episode (one engine call). Seconds per round, largest "
                  "over smallest across the rows: reuse "
                  f"{r['reuse_per_turn_growth']:.2f}x, re-encoding {r['reencode_per_turn_growth']:.2f}x."]
    if "vllm_per_turn_growth" in r:
        lines += ["", f"The same episodes through our vLLM engine (engine.sync={r.get('vllm_sync')}, prefix "
                      "cache on; its own sampling):", "",
                  "| turns | vLLM s/episode | vLLM s/round | vLLM tokens/s | HF reuse s/episode |",
                  "| --- | --- | --- | --- | --- |"]
        for row in r["rows"]:
            v, hf = row["vllm"], row["reuse"]
            lines.append(f"| {row['turns']} ({v['turns_per_episode']:.1f} played) | "
                         f"{v['s_per_episode']:.2f} | {v['s_per_turn']:.3f} | {v['tokens_per_s']:.0f} | "
                         f"{hf['s_per_episode']:.2f} |")
        lines += ["", f"vLLM seconds per round, largest over smallest: {r['vllm_per_turn_growth']:.2f}x."]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="smollm2")
    ap.add_argument("--turns", default="2,4,8,16")
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=2)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--precision", default="bf16", choices=("32", "bf16"))
    ap.add_argument("--work-dir", default=".cache/bench")
    ap.add_argument("--out", default="results/bench")
    ap.add_argument("--vllm", action="store_true",
                    help="a third series through our vLLM engine (engine=vllm)")
    a = ap.parse_args()
    r = measure_turns(a.model, tuple(int(t) for t in a.turns.split(",")), a.tasks, a.group, a.new_tokens,
                      a.precision, work_dir=a.work_dir, vllm=a.vllm)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "turns.json").write_text(json.dumps(r, indent=2, sort_keys=True) + "\n")
    table = "\n".join(markdown(r)).strip() + "\n"
    (out / "turns.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
