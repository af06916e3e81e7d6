"""README's replications table is generated from the claims (#44's item, needed by #36's verdicts)."""

from __future__ import annotations

from pathlib import Path

from paper import readme


def test_the_block_is_rewritten_between_its_markers_and_nowhere_else(tmp_path):
    path = tmp_path / "README.md"
    path.write_text(f"head\n{readme.BEGIN}\nold typed numbers\n{readme.END}\ntail\n")
    assert readme.update(path, [])
    text = path.read_text()
    assert text.startswith("head\n" + readme.BEGIN) and text.endswith(readme.END + "\ntail\n")
    assert "old typed numbers" not in text and "| method | `make` |" in text
    plain = tmp_path / "OTHER.md"
    plain.write_text("no markers\n")
    assert not readme.update(plain, []) and plain.read_text() == "no markers\n"


def test_the_committed_readme_has_the_block():
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert readme.BEGIN in text and readme.END in text


def test_the_headlines_numbers_are_claims_json(tmp_path):
    """Every figure of the generated table is one claims.json holds for the same claim."""
    import json

    from paper.build import REPO, section, write_claims_json
    from paper.cards import load_cards
    from paper.load import load_results
    from paper.tables import fmt_ci

    fixtures = Path(__file__).resolve().parent / "fixtures"
    cards_dirs = [REPO / "replications", fixtures / "cards"]
    results = load_results(fixtures / "results")
    cards, _ = load_cards(cards_dirs)
    sections = [section(m, results, cards.get(m), None, cards_dirs) for m in ("grpo", "toy")]
    write_claims_json(sections, tmp_path / "claims.json")
    claims = json.loads((tmp_path / "claims.json").read_text())["claims"]
    block = readme.table(sections)
    for s in sections:
        [row] = [ln for ln in block.splitlines() if f"`make replicate-{s.method}`" in ln]
        head = next(c for c in claims if c["method"] == s.method and c["kind"] == "replication")
        assert f"(`{head['id']}`)" in row and f"**{head['verdict']}**" in row
        if head["estimate"] is not None:
            shown = fmt_ci((head["estimate"], *head["interval"]), signed=True)
            assert f"{shown}, {head['pairs']} pairs" in row


def test_the_headline_is_the_first_primary_claim_the_testbed_can_tell():
    from types import SimpleNamespace

    from paper.report import headline
    from paper.verdicts import DESIGN_NULL, HOLDS, NO_EFFECT, VOID

    def cr(cid, kind, verdict):
        return SimpleNamespace(claim=SimpleNamespace(id=cid, kind=kind), verdict=verdict)

    claims = [cr("a", "replication", VOID), cr("s", "sanity", HOLDS), cr("b", "replication", DESIGN_NULL),
              cr("c", "replication", NO_EFFECT), cr("d", "replication", HOLDS)]
    assert headline(claims).claim.id == "c"  # the first primary claim whose testbed can tell
    assert headline(claims[:3]).claim.id == "a"  # none can tell: the first primary claim
    assert headline([claims[1]]).claim.id == "s" and headline([]) is None
