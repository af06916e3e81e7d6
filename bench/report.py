"""The Markdown table of a benchmark result (results/bench/bench.md)."""

from __future__ import annotations

from typing import Any


def _ms(x: float) -> str:
    return f"{1000 * x:.0f}"


def markdown(r: dict[str, Any]) -> str:
    m, st = r["machine"], r["settings"]
    lines = [
        "# Benchmark: our GRPO step vs TRL's GRPOTrainer",
        "",
        f"{st['tasks_per_step']} prompts x {st['group_size']} completions of up to {st['max_new_tokens']} tokens, "
        f"temperature {st['temperature']}, lr {st['lr']}, LoRA on every linear layer; {st['steps']} measured steps per "
        f"series (per model) after {st['warmup']} warm-up step(s), series alternating step by step.",
        f"Machine: {m['cpus']} CPUs, {m['threads']} torch threads, flags {' '.join(m['cpu_flags'])}; torch {m['torch']}, "
        f"transformers {m['transformers']}, trl {m['trl']}; OMP_WAIT_POLICY={m['omp_wait_policy']}; load average "
        f"{m['load_average_start'][0]:.2f} at start, {m['load_average_end'][0]:.2f} at end.",
        f"Matmul rate (1024^3, best): fp32 {r['matmul_flops']['32'] / 1e9:.1f} GFLOP/s, bf16 {r['matmul_flops']['bf16'] / 1e9:.1f} GFLOP/s.",
        "",
    ]
    if r.get("trl_skipped"):
        lines += [f"TRL not measured: {r['trl_skipped']}.", ""]
    lines += ["| model | KL | trainer | step median ms (min-max) | tokens/s | overhead vs minimal | MFU train | peak RSS MiB |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, entry in r["models"].items():
        for kl, cell in entry["cells"].items():
            for name, s in cell.items():
                if not isinstance(s, dict) or "step" not in s:
                    continue
                mfu = f"{100 * s['mfu_train']:.1f}%" if "mfu_train" in s else ""
                over = f"{100 * s['overhead_over_minimal']:+.0f}%" if "overhead_over_minimal" in s else (
                    "(the minimal work)" if name.startswith("minimal/") else "n/a")
                lines.append(f"| {model} ({entry['params'] / 1e6:.2f}M) | {kl.split('=')[1]} | {name} | "
                             f"{_ms(s['step']['median_s'])} ({_ms(s['step']['min_s'])}-{_ms(s['step']['max_s'])}) | "
                             f"{s['tokens_per_s']:.0f} | {over} | {mfu} | {s['peak_rss_mib']:.0f} |")
    lines += ["", "| model | KL | best ours | best TRL | ours / TRL | same precision (ours / TRL) |",
              "| --- | --- | --- | --- | --- | --- |"]
    for model, entry in r["models"].items():
        for kl, cell in entry["cells"].items():
            ratio = f"{cell['ratio_ours_over_trl']:.2f}" if "ratio_ours_over_trl" in cell else "n/a"
            same = ", ".join(f"{p}: {v:.2f}" for p, v in cell.get("ratio_same_precision", {}).items())
            lines.append(f"| {model} | {kl.split('=')[1]} | {cell['best_ours']} | {cell.get('best_trl', 'n/a')} | {ratio} | {same} |")
    for model, entry in r["models"].items():
        acc = entry.get("bf16_accuracy")
        if acc:
            lines.append(f"\nbf16 autocast accuracy ({model}, {acc['tokens']} sampled tokens scored both ways): |logp error| "
                         f"mean {acc['logprob_abs_err_mean']:.1e}, max {acc['logprob_abs_err_max']:.1e}; LoRA gradient cosine "
                         f"{acc['grad_cosine']:.4f}, relative error {acc['grad_rel_err']:.3f}.")
    mt = r.get("multiturn")
    if mt is None:
        return "\n".join([*lines, "", f"Wall time of the benchmark: {r['wall_s']:.0f} s.", ""])
    lines += ["", f"Multi-turn, multi-role rollouts ({mt['env']}, roles {', '.join(mt['roles'])}, one adapter per role, "
              f"{mt['episodes']} episodes per rollout):", "",
              "| engine | episodes/s | generated tokens/s | turns per episode | model calls |", "| --- | --- | --- | --- | --- |"]
    for name in ("batched", "one_at_a_time"):
        e = mt[name]
        lines.append(f"| {name} | {e['episodes_per_s']:.1f} | {e['tokens_per_s']:.0f} | {e['turns_per_episode']:.2f} | {e['model_calls']} |")
    lines += ["", f"Batching across live episodes and roles: {mt['speedup']:.1f}x the tokens/s "
              f"({mt['speedup_episodes']:.1f}x the episodes/s) of the one-at-a-time engine.", "",
              f"Wall time of the benchmark: {r['wall_s']:.0f} s.", ""]
    eng = r.get("engines")
    if eng:
        lines.insert(-2, f"Engine columns (bench/engines.py): {'see ' + eng['files'] if eng['ok'] else 'failed: ' + str(eng['error'])[-300:]}.")
        lines.insert(-2, "")
    return "\n".join(lines)
