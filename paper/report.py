"""REPORT.md: a summary, then one section per method in the same shape.

Each section: what the paper claims, what we ran (runs, configs, code versions, runs not
counted), the claims table, held-out scores, the figures, and what did and did not reproduce.
The text depends only on the results and the cards (no dates), so a rebuild is a no-op diff.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paper.cards import Card
from paper.claims import (
    ALPHA,
    DESIGN_NULL,
    HOLDS,
    INCONCLUSIVE,
    INVALID,
    NO_EFFECT,
    OPPOSITE,
    POWER,
    SEEDS_FLOOR,
    VERDICTS,
    VOID,
    ClaimResult,
)
from paper.load import Problem, Results, Run, flatten
from paper.staleness import repository_root, stale_lines
from paper.tables import Table, arms_of, claim_text, context_text, design_text, envs_of, fmt_ci

# config keys that legitimately differ between the seeds of one arm
SEED_KEYS = {"seed", "sft.seed", "out_dir", "work_dir", "force", "progress", "loggers"}
VERDICT_RULE = (
    "Verdicts (rule v3, paper/verdicts.py `table_verdict`): the runs of two arms are **paired by seed** "
    "(a seed "
    "shares the warm start and the task order across arms) and a claim's effect is the mean per-seed "
    "difference with a 95% Student-t interval. Every claim declares a **margin**, the smallest difference "
    f"that matters. With fewer than {SEEDS_FLOOR} pairs a claim is **inconclusive**. Otherwise equivalence "
    "comes first: an interval inside ±margin is **no effect**, whatever its sign; then **holds** (above 0) "
    "or "
    "**opposite** (below 0); else **inconclusive** (an ordering: opposite or no effect if any adjacent pair "
    f"is, holds if all hold). A power calculation (two-sided paired t-test at alpha {ALPHA:g}, {POWER:.0%} "
    "power at the margin, given the SD of the per-seed differences here) only plans seeds: it never "
    "overrides an interval. Beside each primary claim: its p value and Holm's adjustment over the method's "
    "primary claims. Before any run, the design check (`make design-<method>`, "
    "`results/<method>/design.json`) "
    "asks whether the testbed can tell: a claim whose control does not learn on dev, or whose oracle arm "
    "does not beat it, is **void**; one whose arms' credit or updates do not differ on the same episodes is "
    "a **design null**; neither is counted as evidence (the summary counts tested claims only). "
    "Pre-registration is per claim: the commit that first wrote its margin against its runs' start. "
    "Controls and confounds a card names are printed beside the verdict and do not change it."
)


@dataclass
class MethodSection:
    method: str
    card: Card | None
    card_error: str | None
    claim_results: list[ClaimResult] = field(default_factory=list)
    tables: dict[str, Table] = field(default_factory=dict)  # role -> table
    extras: dict[str, Table] = field(default_factory=dict)  # the method's own (paper/extras.py), by name
    extra_errors: dict[str, str] = field(default_factory=dict)  # name -> why it could not be built
    figures: list[Path] = field(default_factory=list)  # PNGs
    build_error: str | None = None  # tables/figures that could not be built from these results


def runs_n(n: int) -> str:
    return f"{n} run" + ("" if n == 1 else "s")


def short_sha(sha: str) -> str:
    return sha[:10]


def run_name(run: Run | Problem) -> str:
    """The run directory as reached from the --results argument (e.g. results/grpo/arith/grpo/seed-0)."""
    return run.path.as_posix()


def code_flags(runs: list[Run]) -> list[str]:
    """Runs from more than one commit, or from a dirty tree, are flagged."""
    flags = []
    shas = Counter(r.git_sha for r in runs)
    if len(shas) > 1:
        parts = []
        for sha, n in sorted(shas.items(), key=lambda kv: (-kv[1], kv[0])):
            names = ", ".join(f"`{run_name(r)}`" for r in runs if r.git_sha == sha)
            parts.append(f"`{short_sha(sha)}` ({runs_n(n)}: {names})")
        flags.append(f"runs come from {len(shas)} different code versions: " + "; ".join(parts))
    dirty = [r for r in runs if r.git_dirty]
    if dirty:
        flags.append("runs from a working tree with uncommitted changes (git_dirty): "
                     + ", ".join(f"`{run_name(r)}`" for r in dirty))
    return flags


def config_flags(method: str, results: Results) -> list[str]:
    """Seeds of one arm should differ only in the seed."""
    flags = []
    for env in sorted({r.env for r in results.of(method)}):
        for arm in sorted({r.arm for r in results.of(method, env)}):
            flat = [flatten(r.config) for r in results.of(method, env, arm)]
            keys = sorted(set().union(*flat) - SEED_KEYS)
            differ = {k: sorted({repr(f.get(k)) for f in flat}) for k in keys
                      if len({repr(f.get(k)) for f in flat}) > 1}
            if differ:
                what = "; ".join(f"`{k}` ({', '.join(v)})" for k, v in differ.items())
                flags.append(f"configs differ between the seeds of arm `{arm}` on `{env}`: {what}")
    return flags


def _get(config: dict[str, Any], key: str) -> Any:
    return flatten(config).get(key)


def runs_table(method: str, results: Results, card: Card | None) -> Table:
    rows = []
    for env in envs_of(method, results, card):
        for arm in arms_of(method, results, card):
            runs = results.of(method, env, arm)
            if not runs:
                continue
            c = runs[0].config
            kl = _get(c, "trainer.kl.coef")
            kl_text = ("off" if not kl else
                       f"{kl} ({_get(c, 'trainer.kl.placement')}, {_get(c, 'trainer.kl.estimator')})")
            model = _get(c, "model.kind")
            if model == "tiny":
                model = f"tiny ({_get(c, 'model.num_layers')}L, d={_get(c, 'model.hidden_size')})"
            elif _get(c, "model.path"):
                model = str(_get(c, "model.hf_id") or _get(c, "model.path"))
            sft = f"{_get(c, 'sft.steps')} steps" if _get(c, "sft.enabled") else "none"
            rows.append([env, card.label(arm) if card else arm, str(len(runs)),
                         ", ".join(str(r.seed) for r in runs), str(_get(c, "scale")), str(model), sft,
                         str(_get(c, "trainer.steps")),
                         f"{_get(c, 'trainer.tasks_per_step')} × {_get(c, 'trainer.group_size')}",
                         str(_get(c, "trainer.lr")), kl_text, str(_get(c, "eval.k"))])
    headers = ["env", "arm", "finished", "seeds", "scale", "model", "SFT warm start", "RL steps", "tasks × G",
               "lr", "KL", "eval k"]
    return Table(f"{method}-runs", f"{method}: finished runs and their configuration (from config.yaml)",
                 headers, rows)


def verdict_counts(claim_results: list[ClaimResult]) -> Counter[str]:
    return Counter(cr.verdict for cr in claim_results)


def _reproduced(section: MethodSection) -> list[str]:
    lines = []
    for verdict, lead in ((HOLDS, "Holds"), (OPPOSITE, "Opposite"), (NO_EFFECT, "No effect (inside ±margin)"),
                          (INCONCLUSIVE, "Inconclusive"),
                          (VOID, "Void (the testbed cannot tell; not evidence)"),
                          (DESIGN_NULL, "Design null (a prediction of the design; not evidence)"),
                          (INVALID, "Could not evaluate")):
        for cr in section.claim_results:
            if cr.verdict != verdict:
                continue
            detail = "; ".join(f"{p.better.label()} − {p.worse.label()} = {fmt_ci(p.diff, signed=True)}"
                               for p in cr.pairs)
            detail += ("; " if detail and cr.note else "") + cr.note
            if cr.needed is not None:
                detail += f" (margin ±{cr.claim.margin:g}, seeds needed / run: {cr.needed} / {cr.n})"
            if verdict in (VOID, DESIGN_NULL) or cr.design:
                detail += f"; can this testbed tell? {design_text(cr)}"
            context = context_text(cr)
            lines.append(f"- **{lead}:** {claim_text(cr.claim)} (`{cr.claim.id}`)"
                         f"{': ' + detail if detail else ''}."
                         + ("" if context == "—" else f" *Beside it:* {context}."))
    return lines or ["- The card lists no claims."]


def method_section(section: MethodSection, results: Results, out_dir: Path) -> str:
    card, method = section.card, section.method
    runs = results.of(method)
    title = card.title if card else method
    out = [f"## {title}", ""]
    if card:
        card_link = os.path.relpath(card.path, out_dir) if card.path else f"replications/{method}/CARD.md"
        out += [f"Method `{method}`. Paper: {card.paper}. Card: [{card_link}]({card_link}).", ""]
    out += ["### What the paper claims", ""]
    if section.card_error and "card not written" in section.card_error:
        out += [f"Card not written yet: {section.card_error}", ""]
    elif section.card_error:
        out += [f"The card could not be read: {section.card_error}", ""]
    elif card is None:
        out += [f"No `replications/{method}/CARD.md` yet: no paper numbers or claims to check.", ""]
    else:
        out += ([card.summary, ""] if card.summary else [])
        if "reported" in section.tables:
            out += [section.tables["reported"].markdown()]
    out += ["### What we ran", ""]
    if runs:
        out += [section.tables["runs"].markdown()]
        shas = Counter(r.git_sha for r in runs)
        out += ["Code version(s) of the runs: "
                + ", ".join(f"`{short_sha(s)}` ({runs_n(n)})" for s, n in sorted(shas.items())) + ".", ""]
    else:
        out += ["No finished runs yet.", ""]
    flags = code_flags(runs) + config_flags(method, results)
    if flags:
        out += ["**Flags:**", ""] + [f"- {f}" for f in flags] + [""]
    problems = results.problems_of(method)
    if problems:
        out += ["**Not counted** (never aggregated):", ""]
        out += [f"- `{run_name(p)}`: {p.kind}, {p.reason}" for p in problems] + [""]
    if card and not section.card_error:
        out += ["### Claims", ""]
        if card.claims:
            out += ["Margins were set before the runs (pre-registered)." if card.margins_preregistered else
                    "Margins were set after these runs existed: not pre-registered (the card says why each "
                    "one).", ""]
        out += [section.tables["claims"].markdown()] if card.claims else ["The card lists no claims.", ""]
    if section.build_error:
        out += ["### Held-out scores", "",
                f"Could not build the tables and figures: {section.build_error}", ""]
    elif runs:
        out += ["### Held-out scores", "", section.tables["final"].markdown()]
        if "tiers" in section.tables:
            out += [section.tables["tiers"].markdown()]
    if section.extras or section.extra_errors:
        out += ["### Method-specific tables", "",
                f"Declared by the method in `replications/{method}/tables.py`.", ""]
        for table in section.extras.values():
            out += [f"**{table.caption}.**", "", table.markdown()]
        out += [f"Could not build `{name}`: {error}" + "\n" for name, error in section.extra_errors.items()]
    if section.figures:
        out += ["### Figures", ""]
        out += [f"![{p.stem}]({os.path.relpath(p, out_dir)})\n" for p in section.figures]
    out += ["### What did and did not reproduce", ""]
    out += _reproduced(section) if card and not section.card_error else ["- No claims to check."]
    return "\n".join(out) + "\n"


def summary(sections: list[MethodSection], results: Results, root: Path, matrix: Table | None,
            matrix_figure: Path | None, out_dir: Path) -> str:
    out = ["## Summary", "",
           "Only runs with a `done` marker count; every other run directory is listed on its method's page "
           "as not counted.", ""]
    if not results.runs:
        out += [f"No finished runs under `{root}` yet: the tables below list what each card will check.", ""]
    headers = ["method", "envs", "arms", "finished runs", "not counted", "claims tested", *VERDICTS,
               "not tested: void", "not tested: design null", INVALID, "flags"]
    rows = []
    for s in sections:
        runs = results.of(s.method)
        counts = verdict_counts(s.claim_results)
        n_flags = len(code_flags(runs)) + len(config_flags(s.method, results))
        envs = envs_of(s.method, results, s.card) or (s.card.envs if s.card and s.card.envs else [])
        arms = arms_of(s.method, results, s.card) or (list(s.card.arms) if s.card else [])
        rows.append([s.method, ", ".join(envs) or "—", ", ".join(arms) or "—", str(len(runs)),
                     str(len(results.problems_of(s.method))), str(sum(counts.get(v, 0) for v in VERDICTS)),
                     *[str(counts.get(v, 0)) for v in (*VERDICTS, VOID, DESIGN_NULL, INVALID)],
                     "; ".join(f for f, on in (("card error", s.card_error), ("build error", s.build_error),
                                               ("extra table error", s.extra_errors),
                                               (f"{n_flags} flag(s)", n_flags))
                               if on) or "—"])
    if rows:
        out += [Table("summary", "Summary", headers, rows).markdown()]
    else:
        out += ["No method has finished runs or a card yet.", ""]
    out += [VERDICT_RULE, ""]
    out += stale_lines(results.runs, repository_root(root))
    if matrix is not None:
        out += ["### Across methods", "", matrix.markdown()]
        if matrix_figure is not None:
            out += [f"![matrix]({os.path.relpath(matrix_figure, out_dir)})", ""]
    else:
        out += ["The cross-method matrix appears once two or more methods have finished runs.", ""]
    return "\n".join(out) + "\n"


# ---- the first page: what a reader takes in in a minute ---------------------------------------------
GLANCE_WIDTH = 300  # no line of the first page is longer


def shorten(text: str, width: int) -> str:
    """`text` cut at a word to at most `width` characters, "…" marking a cut."""
    return text if len(text) <= width else text[:width - 1].rsplit(" ", 1)[0].rstrip(" ,;:") + "…"


def headline(claim_results: list[ClaimResult]) -> ClaimResult | None:
    """A method's headline claim: its card's first primary (replication) claim whose testbed can tell (not
    void, not a design null), else its first primary claim, else its first claim."""
    primary = [cr for cr in claim_results if cr.claim.kind == "replication"] or claim_results
    told = [cr for cr in primary if cr.verdict not in (VOID, DESIGN_NULL)]
    return (told or primary)[0] if primary else None


def estimate_text(cr: ClaimResult) -> str:
    """The claim's difference with its interval and pairs (an ordering: each pair's estimate)."""
    if not cr.pairs or cr.n == 0:
        return "no pairs yet"
    if len(cr.pairs) == 1:
        return f"{fmt_ci(cr.pairs[0].diff, signed=True)}, n={cr.n}"
    return "; ".join(f"{fmt_ci(p.diff, signed=True).split(' ')[0]}" for p in cr.pairs) + f" (pairs), n={cr.n}"


def design_short(cr: ClaimResult) -> str:
    """What the design check (results/<method>/design.json) says the testbed can tell, in a few words."""
    if not cr.design:
        return "not checked"
    if cr.verdict == VOID:
        return "cannot tell (void)"
    if cr.verdict == DESIGN_NULL:
        return "no difference by design (design null)"
    if cr.design.get("gate") == "partial":
        return "separation only (pilots not run)"
    if "why" in (cr.design.get("learnable") or {}):
        return "training-free: no gate applies"
    return "can tell (its gates pass)"


def glance_line(section: MethodSection, results: Results, page: str) -> str:
    """One line: the method, its headline claim, verdict, estimate, seeds and design check; a link."""
    card = section.card
    name = (card.title.split(":")[0] if card else section.method)
    link = f"[details]({page})"
    if section.card_error:
        what = "card not written" if "card not written" in section.card_error else "card unreadable"
        return f"- **{name}**: {what}; {runs_n(len(results.of(section.method)))}. {link}"
    cr = headline(section.claim_results)
    if cr is None:
        return f"- **{name}**: no claim yet; {runs_n(len(results.of(section.method)))}. {link}"
    tail = (f": **{cr.verdict}**, {estimate_text(cr)}, seeds needed {cr.needed}; "
            f"design check: {design_short(cr)}. {link}")
    room = GLANCE_WIDTH - len(f"- **{name}**: ") - len(tail)
    return f"- **{name}**: {shorten(cr.claim.text, max(room, 20))}{tail}"


def compact_table(section: MethodSection) -> Table:
    """Every claim of one method in one short row: id, kind, verdict, estimate, seeds, design check."""
    rows = [[f"`{cr.claim.id}`", cr.claim.kind, cr.verdict, estimate_text(cr),
             f"{cr.needed if cr.needed is not None else '—'} / {cr.n}", design_short(cr)]
            for cr in section.claim_results]
    return Table(f"{section.method}-glance", f"{section.method}: claims at a glance",
                 ["claim", "kind", "verdict", "difference [95% t CI], pairs", "seeds needed / run",
                  "design check"], rows)


def first_page(sections: list[MethodSection], results: Results, root: Path,
               pages: dict[str, str]) -> str:
    """The report's first page: one line per method, then a compact table of each method's claims; the
    details (summary, verdict rule, head to head) follow, and each method's full section is its page
    (`pages`: method -> link)."""
    out = ["# Replication report", "",
           f"Generated by `make paper` from `{root}` and the method cards; do not edit by hand.", "",
           "## At a glance", "",
           "Per method, its headline claim (the card's first primary claim the testbed can tell): verdict "
           "(rule v3, below), "
           "difference paired by seed [95% t CI], pairs, seeds needed, and whether the design check says "
           "the testbed can tell.", ""]
    out += [glance_line(s, results, pages[s.method]) for s in sections] or ["No method has a card yet."]
    out += ["", "## Claims per method", ""]
    for s in sections:
        card = s.card
        title = shorten(card.title if card else s.method, 120)
        out += [f"### {title}", "", f"[Full section: runs, scores, tables, figures]({pages[s.method]})", ""]
        if s.card_error:
            out += ["Card not written yet." if "card not written" in s.card_error
                    else "The card could not be read (see its page).", ""]
        elif s.claim_results:
            out += [compact_table(s).markdown()]
        else:
            out += ["No claims.", ""]
    return "\n".join(out) + "\n"
