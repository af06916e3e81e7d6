"""Regenerate every table, figure and REPORT.md from the run directories under results/.

    python -m paper.build [--results results] [--out paper] [--cards replications] [--strict]

Reads only `results/<method>/<env>/<arm>/seed-<k>/` (finished runs: those with a `done` marker),
the YAML front matter of `replications/<method>/CARD.md` and the extra tables a method declares
in `tables.py` beside its card, `replications/<method>/tables.py` (paper/extras.py, loaded from its
path). Writes `<out>/tables/*.{md,tex}`, `<out>/figures/*.{png,pdf}`, `<out>/REPORT.md` (a first page
of one line per method and its claims in short, then the details), `<out>/methods/<method>.md` (each
method's full section) and
`<out>/claims.json` (every claim's verdict, seeds, estimate, interval, margin, seeds needed, controls
and confounds: paper/claims.py); tables and figures left from an earlier build are removed first,
so the outputs always match the results. Invalid runs (listed in the report, never counted), cards
that do not parse and claims or tables that cannot be evaluated are warnings on stderr; `--strict`
makes them exit 1.

`results/compare/` (`make compare`'s runs, its plan, `plan-<scale>.json`, and `make compare-design`'s
design check, `design-<scale>.json`) is read by paper/head_to_head.py: the head-to-head section.

`method_tables(method, results)` is one method's section alone, as `make replicate-<method>`
prints it after its runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from paper import figures, readme
from paper.cards import Card, load_cards
from paper.claims import INVALID, RULE, claim_json, evaluate_card
from paper.extras import ExtraTable, build_extra, load_tables, tables_file
from paper.head_to_head import build_compare
from paper.load import Results, load_results
from paper.registration import margin_commits
from paper.report import MethodSection, first_page, method_section, runs_table, summary
from paper.tables import claims_table, eval_k, final_table, matrix_table, reported_table, tiers_table

GENERATED_SUFFIXES = {".md", ".tex", ".png", ".pdf"}
REPO = Path(__file__).resolve().parents[1]


def read_design(path: Path | None) -> dict[str, Any] | None:
    """A method's design check (`make design-<method>`), or None where it has not run."""
    if path is None or not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def method_order(name: str) -> tuple[bool, str]:
    """The GRPO baseline first, then the methods alphabetically."""
    return (name != "grpo", name)


def clean(out_dir: Path) -> None:
    for sub in ("tables", "figures", "methods"):
        for p in sorted((out_dir / sub).glob("*")):
            if p.is_file() and p.suffix in GENERATED_SUFFIXES:
                p.unlink()


def section(method: str, results: Results, card: Card | None, card_error: str | None,
            card_dirs: list[Path]) -> MethodSection:
    """Every table of one method's section (its figures are drawn by `build`); nothing is written. The
    method's own tables are those of the `tables.py` beside its card in `card_dirs` (paper/extras.py)."""
    s = MethodSection(method, card, card_error)
    runs = results.of(method)
    if card:
        design = results.root / method / "design.json" if results.root is not None else None
        s.claim_results = evaluate_card(card, results, read_design(design),
                                        margin_commits(card.path) if card.path is not None else {})
        s.tables["claims"] = claims_table(card, s.claim_results, eval_k(runs))
        if card.reported:
            s.tables["reported"] = reported_table(card)
    if not runs:
        return s
    title = card.title if card else method
    s.tables["runs"] = runs_table(method, results, card)
    try:
        s.tables["final"] = final_table(method, title, results, card)
        tiers = tiers_table(method, title, results, card)
        if tiers is not None:
            s.tables["tiers"] = tiers
    except (KeyError, ValueError, TypeError) as e:  # a result file that parses but lacks what a table needs
        s.build_error = f"{type(e).__name__}: {e}"
        s.tables.pop("final", None)
    path = tables_file(method, card_dirs)
    declared: dict[str, ExtraTable] = {}
    try:
        declared = load_tables(method, path) if path is not None else {}
    except Exception as e:  # noqa: BLE001 - a broken tables.py is one method's error, not the whole report's
        s.extra_errors[_shown(path)] = f"does not import: {type(e).__name__}: {e}"
    for name, table_fn in declared.items():
        try:
            s.extras[name] = build_extra(method, name, table_fn, runs)
        except Exception as e:  # noqa: BLE001 - runs that lack what the method's table reads
            s.extra_errors[name] = f"{type(e).__name__}: {e}"
    return s


def _shown(path: Path | None) -> str:
    """`path` as the report names it: relative to the working folder when under it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix() if path else str(path)
    except ValueError:
        return str(path)


def draw_figures(s: MethodSection, results: Results, figures_dir: Path) -> None:
    """Curves per env and the final scores of one method; a figure that cannot be drawn is a build error."""
    runs = results.of(s.method)
    if not runs or s.build_error:
        return
    try:
        for env in sorted({r.env for r in runs}):
            s.figures += figures.curves_figure(s.method, env, results, s.card, figures_dir)
        s.figures += figures.final_figure(s.method, results, s.card, figures_dir)
    except (KeyError, ValueError, TypeError) as e:
        s.build_error = f"{type(e).__name__}: {e}"
        s.tables.pop("final", None)
        s.tables.pop("tiers", None)
    s.figures = [p for p in s.figures if p.suffix == ".png"]


def problems(results: Results, sections: list[MethodSection], card_errors: dict[str, str]) -> list[str]:
    """Everything `--strict` fails on: invalid runs, cards, tables and claims that cannot be evaluated."""
    errors = [f"{p.path}: invalid run, not counted: {p.reason}"
              for p in results.problems if p.kind == "invalid"]
    errors += list(card_errors.values()) + [f"{s.method}: {s.build_error}" for s in sections if s.build_error]
    errors += [f"{s.method}: extra table {name}: {e}" for s in sections for name, e in s.extra_errors.items()]
    errors += [f"{cr.claim.id}: {cr.note}"
               for s in sections for cr in s.claim_results if cr.verdict == INVALID]
    return errors


def build(results_root: Path, out_dir: Path, card_dirs: list[Path]) -> tuple[Path, list[str]]:
    """Build everything; returns the report's path and the problems (empty when every run, card,
    table and claim is valid)."""
    results = load_results(results_root)
    cards, card_errors = load_cards(card_dirs)
    tables_dir, figures_dir = out_dir / "tables", out_dir / "figures"
    clean(out_dir)
    figures.setup()
    methods = sorted(set(results.methods()) | set(cards) | set(card_errors), key=method_order)
    sections = []
    for method in methods:
        s = section(method, results, cards.get(method), card_errors.get(method), card_dirs)
        draw_figures(s, results, figures_dir)
        for table in [*s.tables.values(), *s.extras.values()]:
            table.write(tables_dir)
        sections.append(s)
    with_runs = [m for m in methods if results.of(m)]
    matrix, matrix_png = None, None
    if len(with_runs) >= 2:
        matrix = matrix_table(with_runs, results, cards)
        matrix.write(tables_dir)
        matrix_png = next((p for p in figures.matrix_figure(with_runs, results, cards, figures_dir)
                           if p.suffix == ".png"), None)
    pages_dir = out_dir / "methods"
    pages_dir.mkdir(parents=True, exist_ok=True)
    pages = {s.method: f"methods/{s.method}.md" for s in sections}
    for s in sections:  # each method's full section is a page of its own, linked from the first page
        (out_dir / pages[s.method]).write_text(
            "[Back to the report](../REPORT.md)\n\n" + method_section(s, results, pages_dir))
    text = first_page(sections, results, results_root, pages)
    text += "\n" + summary(sections, results, results_root, matrix, matrix_png, out_dir)
    compare_text, compare_problems = build_compare(results_root, out_dir)
    text += "\n" + compare_text
    report = out_dir / "REPORT.md"
    report.write_text(text)
    write_claims_json(sections, out_dir / "claims.json")
    if out_dir.resolve() == (REPO / "paper").resolve():  # the committed report: README's table follows it
        readme.update(REPO / "README.md", sections)
    return report, problems(results, sections, card_errors) + compare_problems


def write_claims_json(sections: list[MethodSection], path: Path) -> None:
    """Every claim of every card, as REPORT.md decides it (deterministic: no dates, sorted keys)."""
    claims = [claim_json(s.method, cr, s.card) for s in sections if s.card for cr in s.claim_results]
    text = json.dumps({"rule": RULE, "claims": claims}, indent=1, sort_keys=True, ensure_ascii=False)
    path.write_text(text + "\n")


def method_tables(method: str, results_root: Path, scale: str | None = None,
                  card_dirs: list[Path] | None = None) -> str:
    """One method's section of REPORT.md, built as `make paper` builds it (its reported numbers,
    runs, claims, held-out scores, the method's own tables and what reproduced) but without
    figures, from the runs under `results_root` (only those at `scale`, when given); writes nothing.
    `make replicate-<method>` prints it after its runs."""
    results = load_results(results_root)
    if scale is not None:
        results = results.at_scale(scale)
    card_dirs = card_dirs if card_dirs is not None else [REPO / "replications"]
    cards, card_errors = load_cards(card_dirs)
    s = section(method, results, cards.get(method), card_errors.get(method), card_dirs)
    return method_section(s, results, Path.cwd())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper.build", description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="root of the run directories (default: results)")
    parser.add_argument("--out", default="paper",
                        help="output folder for tables/, figures/, REPORT.md (default: paper)")
    parser.add_argument("--cards", action="append", default=None,
                        help="folder holding <method>/CARD.md; repeat for several (default: replications)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 if a finished run is invalid, or a card, a table or a claim cannot be "
                             "evaluated")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    card_dirs = [Path(c) for c in args.cards or ["replications"]]
    report, errors = build(Path(args.results), Path(args.out), card_dirs)
    for e in errors:
        print(f"warning: {e}", file=sys.stderr)
    print(f"wrote {report} and its tables and figures in {time.perf_counter() - start:.1f} s")
    return 1 if errors and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
