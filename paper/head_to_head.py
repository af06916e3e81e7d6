"""Head to head (#23): what `make compare` ran, as tables, a matrix figure and a section of REPORT.md.

Reads `<results>/compare/steps/<method>/<env>/<arm>/seed-<k>/` (equal RL steps: each method's compare
arm and GRPO on the environment's one budget, experiments/compare.py) and
`<results>/compare/tokens/<method>/grpo/<env>/grpo/seed-<k>/` (GRPO given that method's generated
tokens). The score is the final held-out `mean@k` of each run.

Per environment:
- **vs GRPO**, at equal steps and at equal generated tokens: the mean of the per-seed differences
  (paired by seed) with its Student-t interval, and the verdict under the suite's rule
  (paper/claims.py: holds / opposite / no effect / inconclusive, inconclusive whenever fewer seeds
  than the power calculation asks for) against `MARGIN`. At equal tokens, GRPO's equal-steps runs
  stand in when the method's tokens are within 10% of GRPO's; otherwise its token-matched runs, and
  until they exist the comparison says so;
- **between methods**, every pair at equal steps, the same way, with each method's generated tokens
  beside it (a pair whose tokens differ by more than 10% is flagged: its equal-tokens comparison is
  each method's against GRPO at its own tokens);
- **a ranking**: mean over seeds [t interval], the rank's 95% interval and the probability of
  ranking first, from resampling the seeds every method shares (a bootstrap over seeds, seed 0).

`MARGIN` (0.05 of mean@k, the difference between two methods that the suite calls one that matters)
was set before any head-to-head run, as a card's margin is. The matrix figure shows every method
(rows) against every environment of experiments/compare.yaml (columns), each cell coloured by its
verdict against GRPO (a category, with a legend) with the difference, its interval and the pairs
written in it; grey where the method does not apply, "missing" where it applies and has no run. The
design check (`<results>/compare/design-<scale>.json`, paper/compare_design.py) is shown beside each verdict;
a cell whose testbed cannot tell (void, design null) is greyed with its reason and not counted.

Which methods and environments, where each method applies and how many seeds each environment runs
are read from `<results>/compare/plan-<scale>.json`, the plan `make compare` leaves there as data
(experiments/compare.py: `write_plan`; the cpu scale's is committed; paper/compare_plan.py reads it):
this module imports neither the runner nor the methods. Without that file the section says so and draws
no matrix; a file that is not a plan is also a problem `--strict` fails on.
"""

from __future__ import annotations

import math
import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from common import stats
from paper.claims import INCONCLUSIVE, pair_verdict, seeds_for_margin, table_verdict, verdict_note
from paper.compare_design import (
    CANNOT_TELL,
    CompareDesign,
    cell_text,
    columns,
    design_path,
    figure_cell,
    read_design,
    summary,
)
from paper.compare_plan import BASELINE, ComparePlan, only, plan_path, read_plan
from paper.compare_plan import load_plan as load_plan  # re-exported: the plan's reader
from paper.load import Results, Run, load_results
from paper.tables import Table, fmt, fmt_ci

MARGIN = 0.05
METRIC = "mean@k"
TOKEN_TOLERANCE = 0.10
N_BOOT = 2000


@dataclass
class Versus:
    """a - b on one environment, paired by seed."""

    a: str
    b: str
    n: int
    diff: stats.Interval
    needed: int
    verdict: str
    note: str = ""


def versus(a: str, b: str, x: dict[int, float], y: dict[int, float]) -> Versus:
    """The verdict rule of paper/claims.py on the seeds both have, against MARGIN."""
    seeds = sorted(set(x) & set(y))
    d = np.array([x[s] - y[s] for s in seeds])
    sd = float(d.std(ddof=1)) if d.size >= 2 else float("nan")
    needed = seeds_for_margin(MARGIN, sd)
    diff = stats.t_interval(d) if d.size else (math.nan,) * 3
    verdict = table_verdict(diff, int(d.size), sd, MARGIN)
    note = verdict_note(int(d.size), needed, pair_verdict(diff, MARGIN)) if verdict == INCONCLUSIVE else ""
    return Versus(a, b, int(d.size), diff, needed, verdict, note)


def final_values(runs: list[Run]) -> dict[int, float]:
    return {r.seed: float(r.evals["final"][METRIC]) for r in runs}


def tokens_of(runs: list[Run]) -> float:
    t = [r.metrics[-1].get("generated_tokens_total", 0.0) for r in runs if r.metrics]
    return float(np.mean(t)) if t else math.nan


Rank = tuple[str, stats.Interval, tuple[float, float], float]  # method, mean, rank interval, P(first)


@dataclass
class EnvComparison:
    env: str
    scores: dict[str, dict[int, float]]  # method -> seed -> final mean@k (equal steps)
    tokens: dict[str, float]  # method -> mean generated tokens (training)
    vs_grpo_steps: dict[str, Versus]
    vs_grpo_tokens: dict[str, Versus | str]  # a comparison, or why there is none yet
    pairs: list[Versus]
    ranking: list[Rank]


def ranking(scores: dict[str, dict[int, float]], seed: int = 0) -> list[Rank]:
    """Methods by mean score; each rank's 95% interval and P(first) from resampling the shared seeds."""
    methods = sorted(scores, key=lambda m: -np.mean(list(scores[m].values())))
    shared = sorted(set.intersection(*(set(v) for v in scores.values()))) if scores else []
    ranks = {m: (math.nan, math.nan) for m in methods}
    first = dict.fromkeys(methods, math.nan)
    if len(shared) >= 2 and len(methods) >= 2:
        x_S_M = np.array([[scores[m][s] for m in methods] for s in shared])
        rng = np.random.default_rng(seed)
        idx_B_S = rng.integers(0, len(shared), size=(N_BOOT, len(shared)))
        means_B_M = x_S_M[idx_B_S].mean(axis=1)
        # rank 1 = best; ties share the mean rank
        order_B_M = (-means_B_M).argsort(axis=1).argsort(axis=1).astype(float) + 1
        for j, m in enumerate(methods):
            lo, hi = np.quantile(order_B_M[:, j], [0.025, 0.975])
            ranks[m] = (float(lo), float(hi))
            first[m] = float(np.mean(order_B_M[:, j] == 1))
    return [(m, stats.t_interval(list(scores[m].values())), ranks[m], first[m]) for m in methods]


def compare_env(env: str, steps: Results, tokens: dict[str, Results]) -> EnvComparison:
    runs = {m: [r for r in steps.runs if r.method == m and r.env == env] for m in steps.methods()}
    runs = {m: rs for m, rs in runs.items() if rs}
    scores = {m: final_values(rs) for m, rs in runs.items()}
    toks = {m: tokens_of(rs) for m, rs in runs.items()}
    vs_steps: dict[str, Versus] = {}
    vs_tokens: dict[str, Versus | str] = {}
    grpo = scores.get(BASELINE)
    for m in scores:
        if m == BASELINE or grpo is None:
            continue
        vs_steps[m] = versus(m, BASELINE, scores[m], grpo)
        ratio = toks[m] / toks[BASELINE] if toks[BASELINE] else math.nan
        matched = [r for r in tokens.get(m, Results()).runs if r.env == env and r.method == BASELINE]
        if matched:
            vs_tokens[m] = versus(m, f"{BASELINE} at {m}'s tokens", scores[m], final_values(matched))
        elif np.isfinite(ratio) and abs(ratio - 1) <= TOKEN_TOLERANCE:
            same = versus(m, BASELINE, scores[m], grpo)
            same.note = "; ".join(filter(None, [same.note, f"tokens within 10% ({ratio:.2f}x)"]))
            vs_tokens[m] = same
        else:
            vs_tokens[m] = f"GRPO at {ratio:.2f}x its steps not run yet (make compare runs it after these)"
    names = sorted(scores, key=lambda m: (m != BASELINE, m))
    pairs = [versus(a, b, scores[a], scores[b]) for i, a in enumerate(names) for b in names[i + 1:]]
    return EnvComparison(env, scores, toks, vs_steps, vs_tokens, pairs, ranking(scores))


def load_compare(root: Path) -> tuple[Results, dict[str, Results]]:
    steps = load_results(root / "compare" / "steps")
    tokens_root = root / "compare" / "tokens"
    tokens = ({p.name: load_results(p) for p in sorted(tokens_root.iterdir()) if p.is_dir()}
              if tokens_root.is_dir() else {})
    return steps, tokens


def _cell(v: Versus | str | None) -> str:
    if v is None:
        return "—"
    if isinstance(v, str):
        return v
    return f"{fmt_ci(v.diff, signed=True)} n={v.n}: {v.verdict}" + (f" ({v.note})" if v.note else "")


def tables(comparisons: list[EnvComparison], scale: str, design: CompareDesign | None = None) -> list[Table]:
    """The per-environment tables; with `design`, each row's design check (a pair: its greyed cells)."""
    out = []
    rows = []
    head, col, pair_col = columns(design)
    for c in comparisons:
        for m, v in c.vs_grpo_steps.items():
            rows.append([c.env, m, f"{fmt(c.tokens[m] / 1e3)}k vs {fmt(c.tokens[BASELINE] / 1e3)}k", _cell(v),
                         _cell(c.vs_grpo_tokens.get(m)), *col(m, c.env)])
    out.append(Table(f"compare-vs-grpo-{scale}",
                     f"Each method minus GRPO, final held-out {METRIC}, paired by seed "
                     f"(scale {scale}, margin {MARGIN})",
                     ["env", "method", "generated tokens (method vs GRPO)", "equal steps",
                      "equal generated tokens", *head], rows))
    rows = []
    for c in comparisons:
        for v in c.pairs:
            ratio = c.tokens[v.a] / c.tokens[v.b] if c.tokens[v.b] else math.nan
            flag = "" if np.isfinite(ratio) and abs(ratio - 1) <= TOKEN_TOLERANCE else f"tokens {ratio:.2f}x"
            rows.append([c.env, f"{v.a} − {v.b}", _cell(v), flag or "—", *pair_col(v.a, v.b, c.env)])
    out.append(Table(f"compare-pairs-{scale}", f"Every pair of methods at equal RL steps (scale {scale})",
                     ["env", "pair", "difference [95% CI], verdict", "tokens differ", *head], rows))
    rows = []
    for c in comparisons:
        for i, (m, mean, (lo, hi), p1) in enumerate(c.ranking, 1):
            rank = "—" if math.isnan(lo) else (f"{lo:.0f}" if lo == hi else f"{lo:.0f}–{hi:.0f}")
            rows.append([c.env, str(i), m, fmt_ci(mean), str(len(c.scores[m])), rank, fmt(p1),
                         *col(m, c.env)])
    out.append(Table(f"compare-ranking-{scale}",
                     f"Ranking per environment by final held-out {METRIC} (scale {scale})",
                     ["env", "rank", "method", f"{METRIC} [95% CI]", "seeds", "rank 95% interval",
                      "P(first)", *head], rows))
    return out


def matrix_table(comparisons: list[EnvComparison], scale: str, plan: ComparePlan,
                 design: CompareDesign | None = None) -> tuple[Table, list[str]]:
    """Methods x environments: the difference to GRPO at equal steps and its design check, n/a, or what is
    missing."""
    methods, envs, applies, seeds = plan.methods, plan.envs, plan.applies, plan.seeds
    by_env = {c.env: c for c in comparisons}
    rows, missing = [], []
    for m in methods:
        row = [m]
        for e in envs:
            c = by_env.get(e)
            have = len(c.scores.get(m, {})) if c else 0
            if not applies[m, e]:
                row.append("n/a")
            elif have == 0 and design is not None and (g := design.greyed(m, e)) is not None:
                row.append(f"not run (greyed: {g.gate} — {g.reason})")  # make compare does not run it
            elif have == 0:
                row.append("missing")
                missing.append(f"{m} on {e}")
            elif m == BASELINE and c:
                base = f"{fmt_ci(stats.t_interval(list(c.scores[m].values())))} (baseline)"
                row.append(cell_text(base, base, design, m, e))
            elif (v := c.vs_grpo_steps.get(m) if c else None) is not None:
                row.append(cell_text(_cell(v), f"{fmt_ci(v.diff, signed=True)} n={v.n}", design, m, e))
            else:
                row.append("no GRPO runs")
            if applies[m, e] and 0 < have < seeds[e]:
                row[-1] += f" [{have} of {seeds[e]} seeds]"
                missing.append(f"{m} on {e}: {have} of {seeds[e]} seeds")
        rows.append(row)
    return Table(f"compare-matrix-{scale}", f"Method minus GRPO at equal RL steps, final held-out {METRIC} "
                 f"(scale {scale}); n/a: the method does not apply", ["method", *envs], rows), missing


def matrix_cells(comparisons: list[EnvComparison], plan: ComparePlan, design: CompareDesign | None = None
                 ) -> tuple[list[str], list[list[str]], list[list[str]]]:
    """The figure's cells, methods (GRPO aside) x the plan's envs: each cell's category (its verdict
    against GRPO at equal steps, CANNOT_TELL where the design check greys it, "missing" or "n/a") and its
    text (the estimate [95% t interval], the pairs and the verdict or the gate; the gate beside a verdict)."""
    methods = [m for m in plan.methods if m != BASELINE]
    by_env = {c.env: c for c in comparisons}
    category = [["n/a" for _ in plan.envs] for _ in methods]
    text = [["n/a" for _ in plan.envs] for _ in methods]
    for i, m in enumerate(methods):
        for j, e in enumerate(plan.envs):
            v = by_env[e].vs_grpo_steps.get(m) if e in by_env else None
            if not plan.applies[m, e]:
                continue
            if v is None:
                grey = design.greyed(m, e) if design is not None else None
                category[i][j] = CANNOT_TELL if grey else "missing"
                text[i][j] = f"not run:\n{grey.gate}" if grey else "missing"
                continue
            ci = "" if math.isnan(v.diff[1]) else f"\n[{v.diff[1]:+.2f}, {v.diff[2]:+.2f}]"
            estimate = f"{v.diff[0]:+.3f}{ci}\nn={v.n}"
            category[i][j], text[i][j] = figure_cell(estimate, v.verdict, design, m, e)
    return methods, category, text


def matrix_plot(comparisons: list[EnvComparison], scale: str, plan: ComparePlan,
                design: CompareDesign | None = None) -> Figure:
    """`matrix_figure`'s figure: each cell coloured by its verdict (legend), estimate and interval in it;
    with `design`, its design gate beside the verdict, and a greyed cell its own category."""
    from paper.figures import category_grid, new_figure, wrap

    methods, category, text = matrix_cells(comparisons, plan, design)
    width = 2.0 + 1.5 * len(plan.envs)
    fig, axes = new_figure(1, 1, (width, 2.0 + (0.75 if design is None else 0.9) * len(methods)))
    category_grid(fig, axes[0, 0], methods, plan.envs, category, text,
                  f"verdict against GRPO (margin {MARGIN}, paired by seed)")
    checked = "" if design is None else "; design check: its gate (a greyed cell is not counted)"
    fig.suptitle(wrap(f"Head to head at equal RL steps (scale {scale}): method − GRPO, final held-out "
                      f"{METRIC}, estimate [95% t interval], n pairs: verdict{checked}", width))
    return fig


def matrix_figure(comparisons: list[EnvComparison], scale: str, out_dir: Path,
                  plan: ComparePlan, design: CompareDesign | None = None) -> list[Path]:
    """`matrix_plot`, written as `compare-matrix-<scale>.{png,pdf}`."""
    from paper.figures import save
    return save(matrix_plot(comparisons, scale, plan, design), out_dir, f"compare-matrix-{scale}")


def compare_section(root: Path, scale: str | None = None, out_dir: Path | None = None,
                    methods: Collection[str] | None = None, envs: Collection[str] | None = None) -> str:
    """The head-to-head section of REPORT.md from `root`/compare (every scale, or `scale`); with `out_dir`
    its tables and figure are written there and linked; only `methods`, `envs` (None: all; GRPO always)."""
    return build_compare(root, out_dir, scale, methods, envs)[0]


def _runs_of(results: Results, methods: Collection[str] | None, envs: Collection[str] | None) -> Results:
    runs = [r for r in results.runs if (methods is None or r.method in methods or r.method == BASELINE)
            and (envs is None or r.env in envs)]
    return Results(runs, results.problems, results.root)


def build_compare(root: Path, out_dir: Path | None, scale: str | None = None,
                  methods: Collection[str] | None = None,
                  envs: Collection[str] | None = None) -> tuple[str, list[str]]:
    """The section's text and the problems `--strict` fails on (invalid runs under compare/, a plan or a
    design check that is not one); only `methods` and `envs` (None: all; see `compare_section`)."""
    steps, tokens = load_compare(root)
    steps = _runs_of(steps, methods, envs)
    tokens = {m: _runs_of(r, None, envs) for m, r in tokens.items() if methods is None or m in methods}
    problems = [f"{p.path}: invalid run, not counted: {p.reason}" for r in (steps, *tokens.values())
                for p in r.problems if p.kind == "invalid"]
    scales = [scale] if scale else sorted({r.config.get("scale", "cpu") for r in steps.runs}) or ["cpu"]
    out = ["## Head to head (`make compare`)", "",
           "Every method on every environment where it applies (declared: `Method.needs`, "
           "`Environment.offers`), its compare arm and GRPO on one budget per environment and the same "
           f"seeds, read from `{root}/compare/`. Differences are paired by seed; verdicts follow the "
           f"suite's rule against a margin of {MARGIN} (paper/head_to_head.py).", ""]
    for sc in scales:
        at = steps.at_scale(sc)
        tok = {m: r.at_scale(sc) for m, r in tokens.items()}
        comparisons = [compare_env(e, at, tok) for e in sorted({r.env for r in at.runs})]
        out += [f"### Scale {sc}", ""]
        plan, why = read_plan(root, sc)
        plan = only(plan, methods, envs) if plan is not None else None
        matrix: Table | None = None
        missing: list[str] = []
        design, why_not = read_design(root, sc)
        for where, w in ((plan_path(root, sc), why), (design_path(root, sc), why_not)):
            problems += [f"{where}: {w}"] if w else []
        if plan is None:
            state = f"`{plan_path(root, sc)}` is {why}" if why else f"there is no `{plan_path(root, sc)}`"
            out += [f"No matrix at scale {sc}: {state}; `make compare SCALE={sc}` writes that plan (which "
                    "methods apply where, the seeds per environment).", ""]
        else:
            matrix, missing = matrix_table(comparisons, sc, plan, design)
            out += [matrix.markdown(), *summary(comparisons, plan, design, root, sc, why_not)]
        if not at.runs:
            out += [f"No head-to-head runs at scale {sc} under `{root}/compare/steps` yet: "
                    f"`make compare SCALE={sc}` fills the matrix.", ""]
        if missing:
            out += ["Missing cells: " + "; ".join(missing) + ".", ""]
        written = tables(comparisons, sc, design) if at.runs else []
        if out_dir is not None:
            for t in [*([matrix] if matrix is not None else []), *written]:
                t.write(out_dir / "tables")
            if at.runs and plan is not None:
                png = next((p for p in matrix_figure(comparisons, sc, out_dir / "figures", plan, design)
                            if p.suffix == ".png"), None)
                if png is not None:
                    out += [f"![head to head]({os.path.relpath(png, out_dir)})", ""]
        for t in written:
            out += [f"**{t.caption}**", "", t.markdown()]
    return "\n".join(out) + "\n", problems
