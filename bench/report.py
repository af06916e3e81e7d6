"""What a benchmark result shows: the numbers derived from it (ratios, overheads over the minimal
work, MFU) and its Markdown table (results/bench/bench.md)."""

from __future__ import annotations

from typing import Any

from bench.work import paired_ratio


def mfu(flops: float, seconds: float, rate: float) -> tuple[float | None, str | None]:
    """FLOPs over seconds against the matmul rate of the precision used; above 1 it cannot be right
    (the count or the rate is wrong), so it is reported as n/a with the reason, never clamped."""
    value = flops / seconds / rate
    if value > 1.0:
        return None, (f"n/a: the FLOP count over the time is {100 * value:.0f}% of the measured matmul "
                      f"rate; the count or the rate is wrong")
    return value, None


def derive(result: dict[str, Any]) -> None:
    """Ratios, overheads over the minimal work (same cell, same precision), and MFU (against the
    measured matmul rate of the precision each series ran at)."""
    for entry in result["models"].values():
        first_minimal: dict[str, Any] = {}  # a KL cell without its own minimal work uses the KL-off cell's
        first_cell = ""
        for label, cell in entry["cells"].items():
            series = {k: v for k, v in cell.items() if isinstance(v, dict) and "step" in v}
            if not first_minimal:
                first_minimal = {k: v for k, v in series.items() if k.startswith("minimal/")}
                first_cell = label
            ours = {k: v for k, v in series.items() if k.startswith("ours/")}
            trl = {k: v for k, v in series.items() if k.startswith("trl/")}
            for name, stats in series.items():
                p = name.split("/")[1]
                minimal = series.get(f"minimal/{p}")
                if minimal is None and f"minimal/{p}" in first_minimal:
                    minimal = first_minimal[f"minimal/{p}"]
                    stats["minimal_from"] = first_cell
                if minimal is None or name.startswith("minimal/"):
                    continue
                stats["overhead_over_minimal"] = stats["step"]["median_s"] / minimal["step"]["median_s"] - 1
                # our scorer runs a group's shared prompt once (common.batch.SharedLayout)
                if name.startswith("ours/"):
                    rate = result["matmul_flops"][p]
                    flops_train: float = minimal["flops_train"]
                    train = minimal.get("flops_train_shared_prompt", flops_train)
                    stats["flops_train"] = train
                    stats["mfu_train"], stats["mfu_train_note"] = mfu(train, stats["time_train_s"], rate)
                    stats["mfu_step"], stats["mfu_step_note"] = mfu(train + minimal["flops_generate"],
                                                                    stats["step"]["median_s"], rate)
            for p in {k.split("/")[1] for k in series}:
                m = series.get(f"minimal/{p}")
                if m is not None:
                    m["mfu_train"], m["mfu_train_note"] = mfu(m["flops_train"], m["time_train_s"],
                                                              result["matmul_flops"][p])
            if not ours:
                continue
            best_ours = min(ours, key=lambda k: ours[k]["step"]["median_s"])
            cell["best_ours"] = best_ours
            if trl:
                best_trl = min(trl, key=lambda k: trl[k]["step"]["median_s"])
                cell["best_trl"] = best_trl
                cell["ratio_ours_over_trl"] = (ours[best_ours]["step"]["median_s"]
                                               / trl[best_trl]["step"]["median_s"])
                cell["ratio_paired"] = paired_ratio(ours[best_ours]["step"].get("all_s", []),
                                                    trl[best_trl]["step"].get("all_s", []))
                cell["ratio_same_precision"] = {
                    k.split("/")[1]: v["step"]["median_s"] / trl["trl/" + k.split("/")[1]]["step"]["median_s"]
                    for k, v in ours.items() if "trl/" + k.split("/")[1] in trl}


def _ms(x: float) -> str:
    return f"{1000 * x:.0f}"


def markdown(r: dict[str, Any]) -> str:
    m, st = r["machine"], r["settings"]
    lines = [
        "# Benchmark: our GRPO step vs TRL's GRPOTrainer",
        "",
        f"{st['tasks_per_step']} prompts x {st['group_size']} completions of up to {st['max_new_tokens']} "
        f"tokens, temperature {st['temperature']}, lr {st['lr']}, LoRA on every linear layer; {st['steps']} "
        f"measured steps per series (per model) after {st['warmup']} warm-up step(s), series alternating "
        f"step by step. The minimal work (no reference pass) runs in a model's KL-off cell only, "
        f"{'half as many steps' if st.get('minimal_steps') == 'half' else 'as many steps'}; a KL cell's "
        f"overhead is against it. Our MFU counts the FLOPs our update runs: a group's shared prompt once "
        f"(common.batch.SharedLayout).",
        f"Machine: {m['cpus']} CPUs, {m['threads']} torch threads, flags {' '.join(m['cpu_flags'])}; "
        f"torch {m['torch']}, transformers {m['transformers']}, trl {m['trl']}; "
        f"OMP_WAIT_POLICY={m['omp_wait_policy']}; load average "
        f"{m['load_average_start'][0]:.2f} at start, {m['load_average_end'][0]:.2f} at end.",
        f"CPU: {m.get('cpu', {}).get('model', 'unknown')} "
        f"({m.get('cpu', {}).get('cores', '?')} usable cores; "
        f"flags {' '.join(m.get('cpu', {}).get('flags', []))}).",
        "Matmul rate (best of a 1024^3 mm and an autocast linear; MFU is against the rate of the series' "
        "precision): "
        + ", ".join(f"{p} {v / 1e9:.1f} GFLOP/s" for p, v in r["matmul_flops"].items()) + ".",
        "",
    ]
    for p, note in r.get("precisions_skipped", {}).items():
        lines += [f"Precision {p} {note}.", ""]
    for skip in r.get("skipped_for_time", []):
        lines += [f"Time cap: {skip['part']}: {skip['note']}.", ""]
    for model, entry in r["models"].items():
        if "one_precision" in entry:
            lines += [f"{model}: one precision only, {entry['one_precision']}.", ""]
        w = entry.get("workload")
        if w and (w["tasks_per_step"], w["group_size"], w["max_new_tokens"], w["lr"]) != (
                st["tasks_per_step"], st["group_size"], st["max_new_tokens"], st["lr"]):
            lines += [f"{model}: {w['tasks_per_step']} prompts x {w['group_size']} completions of up to "
                      f"{w['max_new_tokens']} tokens, lr {w['lr']} (bench.work.MODEL_WORKLOAD).", ""]
    if r.get("trl_skipped"):
        lines += [f"TRL not measured: {r['trl_skipped']}.", ""]
    lines += ["| model | KL | trainer | step median ms (min-max) | tokens/s | overhead vs minimal "
              "| MFU train | peak RSS MiB |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model, entry in r["models"].items():
        for kl, cell in entry["cells"].items():
            for name, s in cell.items():
                if not isinstance(s, dict) or "step" not in s:
                    continue
                mfu = (f"{100 * s['mfu_train']:.1f}%" if s.get("mfu_train") is not None
                       else "n/a" if s.get("mfu_train_note") else "")
                over = f"{100 * s['overhead_over_minimal']:+.0f}%" if "overhead_over_minimal" in s else (
                    "(the minimal work)" if name.startswith("minimal/") else "n/a")
                if "minimal_from" in s:
                    over += f" (vs {s['minimal_from']}'s)"
                lines.append(f"| {model} ({entry['params'] / 1e6:.2f}M) | {kl.split('=')[1]} | {name} | "
                             f"{_ms(s['step']['median_s'])} "
                             f"({_ms(s['step']['min_s'])}-{_ms(s['step']['max_s'])}) | "
                             f"{s['tokens_per_s']:.0f} | {over} | {mfu} | {s['peak_rss_mib']:.0f} |")
    lines += ["", "| model | KL | best ours | best TRL | ours / TRL | paired (median of per-round ratios) "
                  "| same precision (ours / TRL) |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for model, entry in r["models"].items():
        for kl, cell in entry["cells"].items():
            ratio = f"{cell['ratio_ours_over_trl']:.2f}" if "ratio_ours_over_trl" in cell else "n/a"
            paired = f"{cell['ratio_paired']:.2f}" if cell.get("ratio_paired") is not None else "n/a"
            same = ", ".join(f"{p}: {v:.2f}" for p, v in cell.get("ratio_same_precision", {}).items())
            lines.append(f"| {model} | {kl.split('=')[1]} | {cell.get('best_ours', 'n/a')} | "
                         f"{cell.get('best_trl', 'n/a')} | {ratio} | {paired} | {same} |")
    notes = {s["mfu_train_note"] for e in r["models"].values() for c in e["cells"].values()
             for s in c.values() if isinstance(s, dict) and s.get("mfu_train_note")}
    lines += [f"\nMFU {n}." for n in sorted(notes)]
    lines += _generation(r)
    for model, entry in r["models"].items():
        acc = entry.get("bf16_accuracy")
        if acc:
            lines.append(f"\nbf16 autocast accuracy ({model}, {acc['tokens']} sampled tokens scored both "
                         f"ways): |logp error| mean {acc['logprob_abs_err_mean']:.1e}, "
                         f"max {acc['logprob_abs_err_max']:.1e}; LoRA gradient cosine "
                         f"{acc['grad_cosine']:.4f}, relative error {acc['grad_rel_err']:.3f}.")
    if r.get("turns"):
        from bench.turns import markdown as turns_markdown

        lines += turns_markdown(r["turns"])
    mt = r.get("multiturn")
    if mt is None:
        return "\n".join([*lines, "", _wall(r), ""])
    lines += ["", f"Multi-turn, multi-role rollouts ({mt['env']}, roles {', '.join(mt['roles'])}, "
                  f"one adapter per role, {mt['episodes']} episodes per rollout):", "",
              "| engine | episodes/s | generated tokens/s | turns per episode | model calls |",
              "| --- | --- | --- | --- | --- |"]
    for name in ("batched", "one_at_a_time"):
        e = mt[name]
        lines.append(f"| {name} | {e['episodes_per_s']:.1f} | {e['tokens_per_s']:.0f} | "
                     f"{e['turns_per_episode']:.2f} | {e['model_calls']} |")
    lines += ["", f"Batching across live episodes and roles: {mt['speedup']:.1f}x the tokens/s "
              f"({mt['speedup_episodes']:.1f}x the episodes/s) of the one-at-a-time engine.", "",
              _wall(r), ""]
    eng = r.get("engines")
    if eng:
        lines.insert(-2, "Engine columns (bench/engines.py): "
                         f"{'see ' + eng['files'] if eng['ok'] else 'failed: ' + str(eng['error'])[-300:]}.")
        lines.insert(-2, "")
    return "\n".join(lines)


def _calls(reps: int) -> str:
    return "one timed call" if reps == 1 else f"median of {reps} calls"


def _wall(r: dict[str, Any]) -> str:
    """The benchmark's wall time and, where recorded, the seconds of each part."""
    parts = "; ".join(f"{p['part']} {p['s']:.0f}" for p in r.get("timeline", []))
    return f"Wall time of the benchmark: {r['wall_s']:.0f} s" + (f" ({parts})." if parts else ".")


def _generation(r: dict[str, Any]) -> list[str]:
    """The generation-alone table of each model that has one (bench/generation.py)."""
    lines: list[str] = []
    for model, entry in r["models"].items():
        g = entry.get("generation")
        if not g:
            continue
        lines += ["", f"Generation alone ({model}, {g['rows']} rows of up to {g['max_new_tokens']} new "
                      f"tokens, precision {g['precision']}, the same prompts and LoRA adapter; "
                      f"{_calls(g['reps'])} after a warm-up call"
                      f"{' of one row' if g.get('warmup_rows') == 1 else ''}):", "",
                  "| engine | start-up s | generate s | tokens/s | tokens per call |",
                  "| --- | --- | --- | --- | --- |"]
        for col in ("hf", "vllm", "vllm-merged", "vllm-bare", "vllm-bare-nolora"):
            c = g.get(col)
            if c is None:
                continue
            if "error" in c:
                lines.append(f"| {col} | {str(c['error']).splitlines()[0][:160]} | | | |")
            else:
                lines.append(f"| {col} | {c['startup_s']:.1f} | {c['generate_s']:.2f} | "
                             f"{c['tokens_per_s']:.0f} | {c['generated_tokens']:.0f} |")
        if "ratio_vllm_engine_over_bare" in g:
            lines.append("\nOur vLLM engine / bare vLLM generate time: "
                         f"{g['ratio_vllm_engine_over_bare']:.2f}.")
        if "ratio_merged_over_lora_engine" in g:
            lines.append("Our vLLM engine with the adapter merged (`engine.sync=merged`) / served as LoRA: "
                         f"{g['ratio_merged_over_lora_engine']:.2f}.")
        if "ratio_merged_engine_over_bare_nolora" in g:
            lines.append("Our vLLM engine merged / bare vLLM without LoRA: "
                         f"{g['ratio_merged_engine_over_bare_nolora']:.2f}.")
        if "ratio_hf_engine_over_bare_vllm" in g:
            lines.append("Our HF engine / bare vLLM generate time: "
                         f"{g['ratio_hf_engine_over_bare_vllm']:.2f}.")
    return lines
