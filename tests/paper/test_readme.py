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
