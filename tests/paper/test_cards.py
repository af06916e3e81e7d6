"""paper/cards.py: the CARD.md front-matter schema and the predicate grammar."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from paper.cards import CardError, Term, load_cards, parse_card, parse_predicate, placeholders

REPO = Path(__file__).resolve().parents[2]

MINIMAL = """---
method: m
title: M
paper: "Someone 2026"
{extra}
---
body
"""


def card(extra: str):
    return parse_card(MINIMAL.format(extra=extra))


def test_grpo_card_states_the_baseline_claim_and_paper_numbers():
    c = parse_card((REPO / "replications/grpo/CARD.md").read_text())
    assert (c.method, c.main_arm, list(c.arms)) == ("grpo", "grpo", ["grpo", "online-rft", "clean-sft"])
    assert "2402.03300" in c.paper
    reported = {(r.value, r.mark) for r in c.reported}
    assert {(88.2, "P"), (51.7, "P")} <= reported
    claim, rft, sft = c.claims
    assert [rft.id, sft.id] == ["rl-beats-online-rft", "rl-beats-clean-sft"]
    assert rft.terms == [Term("grpo", "final"), Term("online-rft", "final")]
    assert (rft.margin, sft.margin) == (0.05, 0.05)
    assert claim.controls == ["online-rft", "clean-sft"]
    assert claim.terms == [Term("grpo", "final"), Term("grpo", "initial")]
    assert (claim.envs, claim.metric, claim.min_seeds) == (["arith"], "mean@k", 3)
    assert (claim.kind, claim.margin, c.margins_preregistered) == ("sanity", 0.05, False)
    assert any("mode selection" in x for x in claim.confounds)


def test_every_committed_claim_has_a_margin_and_a_reason():
    cards, errors = load_cards([REPO / "replications"])
    assert errors == {} and {"grpo", "sharp", "ccpo", "canopy"} <= set(cards)
    for card in cards.values():
        if card.method in ("grpo", "sharp", "ccpo", "canopy"):
            # set after their cpu-scale runs existed (#16); later cards may say so
            assert not card.margins_preregistered
        for claim in card.claims:
            assert claim.margin > 0 and claim.margin_why, (card.method, claim.id)
    ccpo = {c.id: c for c in cards["ccpo"].claims}
    assert ccpo["v2-accuracy-beats-shared"].controls == ["grpo-center"]
    canopy = {c.id: c for c in cards["canopy"].claims}
    assert any("quarter of the data" in x for x in canopy["n-small"].confounds)
    assert any("on-policy" in x for x in canopy["two-updates"].confounds)
    assert any("1-8-token" in x for x in canopy["seq-mean"].confounds)


def test_predicates():
    assert parse_predicate("a > b") == [Term("a", None), Term("b", None)]
    assert parse_predicate("c < b < a") == [Term("a", None), Term("b", None), Term("c", None)]
    assert parse_predicate("sharp-exact > grpo@initial") == [Term("sharp-exact", None),
                                                              Term("grpo", "initial")]
    for bad, match in [("a = b", "no '>'"), ("a > b < c", "mixes"), ("a > b c", "not an arm name"),
                       ("a > b > a", "repeats"), ("a@best > b", "not an arm name")]:
        with pytest.raises(CardError, match=match):
            parse_predicate(bad)


def test_claim_defaults_and_curve_metrics():
    c = card("""claims:
  - {id: x, text: X, predicate: "a > b", env: e, margin: 0.05, margin_why: "5 points"}
  - {id: y, text: Y, predicate: "a < b", env: [e, f], metric: "curve:entropy", window: all, min_seeds: 5,
     margin: 1, margin_why: why, controls: c, confounds: [one, two], kind: sanity}""")
    x, y = c.claims
    assert x.terms == [Term("a", "final"), Term("b", "final")] and x.metric == "mean@k" and x.min_seeds == 3
    assert (x.margin, x.margin_why, x.controls, x.confounds, x.kind) == (
        0.05, "5 points", [], [], "replication")
    assert y.terms == [Term("b", None), Term("a", None)] and y.window is None and y.envs == ["e", "f"]
    assert y.is_curve and y.min_seeds == 5
    assert (y.margin, y.controls, y.confounds, y.kind) == (1.0, ["c"], ["one", "two"], "sanity")
    assert not c.margins_preregistered and card("margins_preregistered: true").margins_preregistered


M = "margin: 0.05, margin_why: w"


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ("colour: blue", "unknown key"),
        ("claims: [{id: x, text: X, predicate: 'a > b', env: e, typo: 1}]", "unknown key"),
        ("claims: [{id: x, text: X, predicate: 'a > b'}]", "lacks 'env'"),
        ("claims: [{id: x, text: X, predicate: 'a > b', env: e}]", "lacks 'margin': every claim declares"),
        ("claims: [{id: x, text: X, predicate: 'a > b', env: e, margin: 0.05}]", "lacks 'margin_why'"),
        ("claims: [{id: x, text: X, predicate: 'a > b', env: e, margin: 0, margin_why: w}]", "number > 0"),
        ("claims: [{id: x, text: X, predicate: 'a > b', env: e, margin: yes, margin_why: w}]", "number > 0"),
        (f"claims: [{{id: x, text: X, predicate: 'a > b', env: e, {M}, controls: [b]}}]", "controls must be"),
        (f"claims: [{{id: x, text: X, predicate: 'a > b', env: e, {M}, controls: [c@final]}}]",
         "controls must be"),
        (f"claims: [{{id: x, text: X, predicate: 'a > b', env: e, {M}, confounds: [1]}}]", "list of strings"),
        (f"claims: [{{id: x, text: X, predicate: 'a > b', env: e, {M}, kind: headline}}]", "kind must be"),
        ("margins_preregistered: maybe", "true or false"),
        (f"claims: [{{id: x, text: X, predicate: 'a@final > b', env: e, metric: 'curve:kl', {M}}}]",
         "apply to eval"),
        (f"claims: [{{id: x, text: X, predicate: 'a > b', env: e, window: 3, {M}}}]", "only to curve"),
        (f"claims: [{{id: x, text: X, predicate: 'a > a@final', env: e, {M}}}]", "itself"),
        (f"claims: [{{id: x, text: X, predicate: 'a > b', env: e, {M}}}, "
         f"{{id: x, text: Y, predicate: 'b > a', env: e, {M}}}]", "unique"),
        ("min_seeds: 0", "positive integer"),
        ("arms: {a: A}\nmain_arm: b", "main_arm"),
        ("reported: [{what: x}]", "what, value"),
    ],
)
def test_schema_errors_say_what_is_wrong(extra, match):
    with pytest.raises(CardError, match=match):
        card(extra)


def test_front_matter_must_be_delimited():
    with pytest.raises(CardError, match="must start"):
        parse_card("# no front matter\n")
    with pytest.raises(CardError, match="closing"):
        parse_card("---\nmethod: m\n")


def test_load_cards_reports_errors_per_method(tmp_path):
    (tmp_path / "good").mkdir()
    (tmp_path / "good/CARD.md").write_text(MINIMAL.replace("method: m", "method: good").format(extra=""))
    (tmp_path / "wrong").mkdir()
    (tmp_path / "wrong/CARD.md").write_text(MINIMAL.format(extra=""))  # says method: m
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken/CARD.md").write_text("---\nmethod: [\n---\n")
    cards, errors = load_cards([tmp_path])
    assert list(cards) == ["good"]
    assert "folder is 'wrong'" in errors["wrong"] and "not valid YAML" in errors["broken"]


def scaffold(tmp_path: Path, name: str = "foo") -> Path:
    """A card as `make new-method NAME=foo` writes it (scripts/new_method.py fills only these two)."""
    text = (REPO / "replications/_template/CARD.md.tmpl").read_text()
    path = tmp_path / "cards" / name / "CARD.md"
    path.parent.mkdir(parents=True)
    path.write_text(text.replace("{{name}}", name).replace("{{Class}}", name.capitalize()))
    return path


def test_a_card_left_as_the_template_wrote_it_is_not_written(tmp_path):
    from paper.build import build, main

    path = scaffold(tmp_path)
    cards, errors = load_cards([tmp_path / "cards"])
    assert cards == {} and list(errors) == ["foo"]
    assert "card not written: template placeholders left in title, paper, summary" in errors["foo"]
    assert "claims[0].margin_why" in errors["foo"] and "\n" not in errors["foo"]
    report, problems = build(tmp_path / "no-results", tmp_path / "out", [tmp_path / "cards"])
    text = report.read_text() + (report.parent / "methods/foo.md").read_text()
    assert "Card not written yet:" in text and "- **foo**: card not written" in report.read_text()
    template = (REPO / "replications/_template/CARD.md.tmpl").read_text()
    for placeholder in ("<the paper's title>", "<First author>", "<One paragraph", "{{", "<one line: why"):
        assert placeholder in template and placeholder not in text
    assert [p for p in problems if "foo" in p and "card not written" in p]
    args = ["--results", str(tmp_path / "no-results"), "--out", str(tmp_path / "out2"),
            "--cards", str(tmp_path / "cards")]
    assert main(args + ["--strict"]) == 1 and main(args) == 0
    # written: every placeholder replaced by text, the card is read
    filled = re.sub(r"<[A-Za-z][^<>\n]*>", "written", path.read_text())
    path.write_text(filled)
    cards, errors = load_cards([tmp_path / "cards"])
    assert errors == {} and cards["foo"].title == "Foo: written"


def test_an_unfilled_name_is_a_placeholder_too():
    c = card('claims: [{id: a, text: "{{Class}} beats GRPO", predicate: "a > b", env: x, margin: 0.1, '
             'margin_why: "because"}]')
    assert placeholders(c) == ["claims[0].text"]
    assert placeholders(card('summary: "a < b and c > d hold"')) == []
