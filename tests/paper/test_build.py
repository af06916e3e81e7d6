"""python -m paper.build on the fixture runs: the numbers in the tables, what is flagged and listed."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from paper.build import build, main

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
CARDS = [REPO / "replications", FIXTURES / "cards"]


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    out = tmp_path_factory.mktemp("paper")
    (out / "figures").mkdir()
    (out / "figures/stale.png").write_bytes(b"left from an older build")
    build(FIXTURES / "results", out, CARDS)
    return out


def table(out: Path, name: str) -> list[dict[str, str]]:
    """Rows of a generated Markdown table, as dicts by header."""
    lines = [ln for ln in (out / "tables" / f"{name}.md").read_text().splitlines() if ln.startswith("|")]
    split = [[c.strip() for c in ln.strip("|").split(" | ")] for ln in lines]
    return [dict(zip(split[0], row, strict=True)) for row in split[2:]]


# Student-t quantiles by degrees of freedom (any t table)
T_975 = {2: 4.302652729749462, 3: 3.182446305284263}


def ci_text(values, signed=False):
    """mean [lo, hi] of a 95% Student-t interval, computed here from scratch."""
    x = np.asarray(values, dtype=float)
    half = T_975[len(x) - 1] * x.std(ddof=1) / np.sqrt(len(x))
    f = "{:+.3f}" if signed else "{:.3f}"
    return f"{f.format(x.mean())} [{f.format(x.mean() - half)}, {f.format(x.mean() + half)}]"


def test_final_table_numbers(out):
    [row] = table(out, "grpo-final")
    initial, final = [0.30, 0.28, 0.33, 0.31], [0.45, 0.41, 0.50, 0.47]  # seeds 0-3 of make_fixtures.py
    assert row["env"] == "arith" and row["arm"] == "GRPO" and row["seeds"] == "4"
    assert row["warm start mean@4"] == ci_text(initial)
    assert row["warm start mean@4"] == "0.305 [0.272, 0.338]"
    assert row["final mean@4"] == ci_text(final)
    assert row["change (paired)"] == ci_text(np.subtract(final, initial), signed=True)
    assert row["final pass@4"] == ci_text(np.add(final, 0.2))


def test_claims_table(out):
    rows = {r["claim"]: r for r in table(out, "toy-claims")}
    better = rows["TOY beats GRPO on grid"]
    assert better["verdict"].startswith(
        "inconclusive (fewer than 5 pairs (n=3); the interval alone says holds)")
    assert "Holm" in better["verdict"]  # a primary claim: its p value and Holm's adjustment beside it
    assert better["can this testbed tell?"] == "not checked (make design-<method>)"
    assert better["difference, paired by seed [95% t CI]"] == (
        ci_text([0.20, 0.20, 0.21], signed=True) + ", 3 pairs")
    assert (better["margin"], better["seeds needed / seeds run"]) == ("±0.05 (5 points of success)", "5 / 3")
    context = better["controls and confounds"]
    assert context.startswith("control best " + ci_text([0.51, 0.58, 0.53]) + ": better@final - best@final = "
                              + ci_text([-0.01, -0.06, 0.02], signed=True) + ", 3 pairs")
    assert context.endswith("; confound: better also trains twice as long (a made-up confound)")
    few = rows["the 2-seed arm beats GRPO"]
    assert few["verdict"].startswith("inconclusive (fewer than 5 pairs (n=2)")
    assert few["seeds needed / seeds run"] == "5 / 2 (finished: few 2; base 3)"
    fails = rows["GRPO beats TOY (a claim that fails)"]
    assert "the interval alone says opposite)" in fails["verdict"]
    # then the two claims against the supervised arms (no runs here)
    grpo, *supervised = table(out, "grpo-claims")
    assert [c["verdict"].split(";")[0] for c in supervised] == ["inconclusive (fewer than 5 pairs (n=0))"] * 2
    assert grpo["claim"].startswith("[sanity check] GRPO beats") and "88.2%" in grpo["paper"]
    # a sanity claim: no Holm
    assert grpo["verdict"] == "inconclusive (fewer than 5 pairs (n=4); the interval alone says holds)"
    diffs = np.subtract([0.45, 0.41, 0.50, 0.47], [0.30, 0.28, 0.33, 0.31])
    assert grpo["difference, paired by seed [95% t CI]"] == ci_text(diffs, signed=True) + ", 4 pairs"
    assert "confound: mostly mode selection" in grpo["controls and confounds"]


def test_claims_json(out):
    data = json.loads((out / "claims.json").read_text())
    assert data["rule"]["seeds_floor"] == 5 and data["rule"]["power"] == 0.8
    by_id = {(c["method"], c["id"]): c for c in data["claims"]}
    grpo = by_id["grpo", "beats-warm-start"]
    assert (grpo["verdict"], grpo["interval_verdict"], grpo["pairs"], grpo["seeds_needed"]) == (
        "inconclusive", "holds", 4, 5)
    assert grpo["seeds_per_arm"] == {"grpo": {"arith": 4}, "online-rft": {"arith": 0},
                                     "clean-sft": {"arith": 0}}
    assert grpo["margin"] == 0.05 and grpo["kind"] == "sanity"
    assert grpo["estimate"] == pytest.approx(0.1525) and grpo["interval"][0] < 0.1525 < grpo["interval"][1]
    for c in data["claims"]:
        assert {"method", "id", "verdict", "seeds_per_arm", "estimate", "interval", "margin", "seeds_needed",
                "controls", "confounds"} <= set(c)
        # no claim is decided on fewer pairs than its power calculation asks for
        assert c["verdict"] in ("inconclusive", "invalid claim") or c["pairs"] >= c["seeds_needed"]
    assert by_id["toy", "missing-metric"]["verdict"] == "invalid claim"
    ordering = by_id["toy", "ordering"]
    assert ordering["estimate"] is None and len(ordering["comparisons"]) == 2


def test_unfinished_and_invalid_runs_are_listed_not_counted(out):
    report = (out / "methods/grpo.md").read_text()
    assert "grpo/arith/grpo/seed-4`: unfinished, no done marker" in report
    assert "grpo/arith/grpo/seed-5`: invalid, eval.json is not valid JSON" in report
    [runs] = table(out, "grpo-runs")
    assert runs["seeds"] == "0, 1, 2, 3" and runs["finished"] == "4"


def test_code_versions_and_dirty_trees_are_flagged(out):
    report = (out / "methods/grpo.md").read_text() + (out / "methods/toy.md").read_text()
    assert "runs come from 2 different code versions" in report
    assert "`bbbbbbbbbb` (1 run: `" in report and "grpo/arith/grpo/seed-3`)" in report
    assert "uncommitted changes (git_dirty): `" in report and "toy/grid/base/seed-2`" in report


def test_every_output_is_written(out):
    names = sorted(p.name for p in (out / "figures").iterdir())
    for stem in ("grpo-arith-curves", "grpo-final", "toy-grid-curves", "toy-maze-curves", "toy-final",
                 "nocard-arith-curves", "matrix"):
        assert f"{stem}.png" in names and f"{stem}.pdf" in names
    assert "stale.png" not in names  # outputs of an older build are removed
    latex = (out / "tables/toy-claims.tex").read_text()
    assert r"\toprule" in latex and r"better $>$ base" in latex and "curve:entropy" not in latex
    matrix = table(out, "matrix")
    toy = [r for r in matrix if r["method"] == "toy"]
    # `best` is the control a claim on `better` names
    assert [r["arm"] for r in toy] == ["TOY", "control: TOY+"]
    assert toy[0]["arith"] == "—" and toy[1]["grid"] == ci_text([0.51, 0.58, 0.53]) + " (n=3)"
    assert "![grpo-arith-curves](../figures/grpo-arith-curves.png)" in (out / "methods/grpo.md").read_text()
    report = (out / "REPORT.md").read_text()
    assert report.index("- **GRPO**") < report.index("- **nocard**") < report.index("- **TOY**")
    assert "[details](methods/grpo.md)" in report and "## GRPO" in (out / "methods/grpo.md").read_text()


def test_rebuild_is_byte_identical(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(FIXTURES / "results/grpo", results / "grpo")
    digests = []
    for name in ("a", "b"):
        build(results, tmp_path / name, [REPO / "replications"])
        files = sorted(p for p in (tmp_path / name).rglob("*") if p.is_file())
        digests.append({p.relative_to(tmp_path / name): hashlib.sha256(p.read_bytes()).hexdigest()
                        for p in files})
    assert digests[0] == digests[1] and len(digests[0]) > 10


def test_empty_results(tmp_path):
    report, errors = build(tmp_path / "missing", tmp_path / "out", [REPO / "replications"])
    text = report.read_text()
    assert "No finished runs under" in text and errors == []
    assert "fewer than 5 pairs (n=0)" in (tmp_path / "out/methods/grpo.md").read_text()
    assert not list((tmp_path / "out").glob("figures/*"))


def test_cli_strict_fails_on_a_claim_that_cannot_be_evaluated(tmp_path, capsys):
    args = ["--results", str(FIXTURES / "results/nothing"), "--out", str(tmp_path)]
    assert main(args + ["--cards", str(REPO / "replications"), "--strict"]) == 0
    bad = tmp_path / "cards/bad"
    bad.mkdir(parents=True)
    (bad / "CARD.md").write_text("---\nmethod: bad\n---\n")
    assert main(args + ["--cards", str(tmp_path / "cards")]) == 0
    assert main(args + ["--cards", str(tmp_path / "cards"), "--strict"]) == 1
    assert "lacks 'title'" in capsys.readouterr().err


def test_a_table_that_cannot_be_built_is_reported(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(FIXTURES / "results/grpo", results / "grpo")
    (tmp_path / "cards/grpo").mkdir(parents=True)
    text = (REPO / "replications/grpo/CARD.md").read_text()
    text = text.replace("eval_metric: mean@k", "eval_metric: metrics/x")
    (tmp_path / "cards/grpo/CARD.md").write_text(text)
    report, errors = build(results, tmp_path / "out", [tmp_path / "cards"])
    assert any("grpo: KeyError" in e for e in errors)
    page = (report.parent / "methods/grpo.md").read_text()
    assert "Could not build the tables and figures: KeyError" in page


def test_the_first_page_is_one_line_per_method_then_short_tables(out):
    """#44: a first page a reader takes in in a minute; the long sections are the methods' own pages."""
    report = (out / "REPORT.md").read_text()
    first = report.split("## Summary")[0]
    assert max(len(line) for line in first.splitlines()) <= 300
    glance = [ln for ln in first.split("## Claims per method")[0].splitlines() if ln.startswith("- **")]
    methods = sorted(p.stem for p in (out / "methods").glob("*.md"))
    assert len(glance) == len(methods) and "nocard" in methods
    [toy] = [ln for ln in glance if ln.startswith("- **TOY**")]
    # the headline: the card's first primary claim, its verdict, interval, pairs and design check
    assert toy.startswith("- **TOY**: TOY beats GRPO on grid: **inconclusive**, ")
    assert ci_text([0.20, 0.20, 0.21], signed=True) + ", n=3, seeds needed 5" in toy
    assert "design check: not checked. [details](methods/toy.md)" in toy
    assert ("| `better-beats-base` | replication | inconclusive | " + ci_text([0.20, 0.20, 0.21], signed=True)
            + ", n=3 | 5 / 3 | not checked |") in first
    for m in methods:  # every page links back and holds its full section
        page = (out / "methods" / f"{m}.md").read_text()
        assert page.startswith("[Back to the report](../REPORT.md)") and "### What we ran" in page
    assert "### What we ran" not in report


def test_design_check_says_what_the_testbed_can_tell():
    from paper.report import design_short

    class Result:
        def __init__(self, verdict, design):
            self.verdict, self.design = verdict, design

    assert design_short(Result("holds", None)) == "not checked"
    assert design_short(Result("void", {"learnable": {}})) == "cannot tell (void)"
    assert design_short(Result("design null", {"separation": {}})).endswith("(design null)")
    assert design_short(Result("holds", {"learnable": {"pass": True}})) == "can tell (its gates pass)"
    assert design_short(Result("holds", {"gate": "partial", "learnable": {"pass": None}})) == \
        "separation only (pilots not run)"
    free = {"gate": "pass", "learnable": {"pass": None, "why": "training-free"}}
    assert design_short(Result("holds", free)) == "training-free: no gate applies"
