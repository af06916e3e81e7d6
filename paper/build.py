"""Regenerate every table, figure and REPORT.md from the run directories under results/.

    python -m paper.build [--results results] [--out paper] [--cards replications] [--strict]

Reads only `results/<method>/<env>/<arm>/seed-<k>/` (finished runs: those with a `done` marker)
and the YAML front matter of `replications/<method>/CARD.md`. Writes
`<out>/tables/*.{md,tex}`, `<out>/figures/*.{png,pdf}` and `<out>/REPORT.md`; tables and figures
left from an earlier build are removed first, so the outputs always match the results.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from paper import figures
from paper.cards import load_cards
from paper.claims import INVALID, evaluate_card
from paper.load import load_results
from paper.report import MethodSection, method_section, runs_table, summary
from paper.tables import claims_table, eval_k, final_table, matrix_table, reported_table, tiers_table

GENERATED_SUFFIXES = {".md", ".tex", ".png", ".pdf"}


def method_order(name: str) -> tuple[bool, str]:
    """The GRPO baseline first, then the methods alphabetically."""
    return (name != "grpo", name)


def clean(out_dir: Path) -> None:
    for sub in ("tables", "figures"):
        for p in sorted((out_dir / sub).glob("*")):
            if p.is_file() and p.suffix in GENERATED_SUFFIXES:
                p.unlink()


def build(results_root: Path, out_dir: Path, card_dirs: list[Path]) -> tuple[Path, list[str]]:
    """Build everything; returns the report's path and the card errors (empty when all cards parse)."""
    results = load_results(results_root)
    cards, card_errors = load_cards(card_dirs)
    tables_dir, figures_dir = out_dir / "tables", out_dir / "figures"
    clean(out_dir)
    figures.setup()
    methods = sorted(set(results.methods()) | set(cards) | set(card_errors), key=method_order)
    sections = []
    for method in methods:
        card = cards.get(method)
        s = MethodSection(method, card, card_errors.get(method))
        runs = results.of(method)
        k = eval_k(runs)
        title = card.title if card else method
        if card:
            s.claim_results = evaluate_card(card, results)
            s.tables["claims"] = claims_table(card, s.claim_results, k)
            if card.reported:
                s.tables["reported"] = reported_table(card)
        if runs:
            s.tables["runs"] = runs_table(method, results, card)
            try:
                s.tables["final"] = final_table(method, title, results, card)
                tiers = tiers_table(method, title, results, card)
                if tiers is not None:
                    s.tables["tiers"] = tiers
                for env in sorted({r.env for r in runs}):
                    s.figures += figures.curves_figure(method, env, results, card, figures_dir)
                s.figures += figures.final_figure(method, results, card, figures_dir)
            except (KeyError, ValueError, TypeError) as e:  # a result file that parses but lacks what a table needs
                s.build_error = f"{type(e).__name__}: {e}"
                s.tables.pop("final", None)
                s.tables.pop("tiers", None)
            s.figures = [p for p in s.figures if p.suffix == ".png"]
        for table in s.tables.values():
            table.write(tables_dir)
        sections.append(s)
    with_runs = [m for m in methods if results.of(m)]
    matrix, matrix_png = None, None
    if len(with_runs) >= 2:
        matrix = matrix_table(with_runs, results, cards)
        matrix.write(tables_dir)
        matrix_png = next((p for p in figures.matrix_figure(with_runs, results, cards, figures_dir)
                           if p.suffix == ".png"), None)
    text = summary(sections, results, results_root, matrix, matrix_png, out_dir)
    text += "".join("\n" + method_section(s, results, out_dir) for s in sections)
    out_dir.mkdir(parents=True, exist_ok=True)
    report = out_dir / "REPORT.md"
    report.write_text(text)
    errors = list(card_errors.values()) + [f"{s.method}: {s.build_error}" for s in sections if s.build_error]
    errors += [f"{cr.claim.id}: {cr.note}" for s in sections for cr in s.claim_results if cr.verdict == INVALID]
    return report, errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paper.build", description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="results", help="root of the run directories (default: results)")
    parser.add_argument("--out", default="paper", help="output folder for tables/, figures/, REPORT.md (default: paper)")
    parser.add_argument("--cards", action="append", default=None,
                        help="folder holding <method>/CARD.md; repeat for several (default: replications)")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a card or a claim cannot be evaluated")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    report, errors = build(Path(args.results), Path(args.out), [Path(c) for c in args.cards or ["replications"]])
    for e in errors:
        print(f"warning: {e}", file=sys.stderr)
    print(f"wrote {report} and its tables and figures in {time.perf_counter() - start:.1f} s")
    return 1 if errors and args.strict else 0


if __name__ == "__main__":
    sys.exit(main())
