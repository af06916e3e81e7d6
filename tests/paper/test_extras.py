"""paper/extras.py and `method_tables`: a method's declared tables are found beside its card, written
and shown; a broken one is reported, not raised; `make replicate-<m>` prints what `make paper` builds."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import paper.build
from paper.build import build, method_tables
from paper.extras import extra_tables, load_tables, tables_file
from paper.tables import Table

FIXTURES = Path(__file__).resolve().parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
CARDS = [REPO / "replications", FIXTURES / "cards"]


def test_extra_tables_are_found_beside_the_cards():
    assert set(extra_tables("ccpo", CARDS)) == {"thinker", "compute"}
    assert set(extra_tables("canopy", CARDS)) == {"ablations", "training", "ordering"}
    assert set(extra_tables("sharp", CARDS)) == {"compute", "gap-growth", "oracle-share"}
    assert set(extra_tables("grpo", CARDS)) == {"mode-selection"}
    assert extra_tables("toy", CARDS) == {}  # a card without tables.py
    assert extra_tables("ccpo", [FIXTURES / "cards"]) == {}  # no card of its own there
    assert tables_file("grpo", CARDS) == REPO / "replications/grpo/tables.py"


def test_a_tables_file_is_loaded_from_its_path_not_imported_as_a_package(tmp_path):
    folder = tmp_path / "cards" / "solo"
    folder.mkdir(parents=True)
    (folder / "CARD.md").write_text("---\nmethod: solo\n---\n")
    assert tables_file("solo", [tmp_path / "cards"]) is None  # a card without tables.py
    (folder / "tables.py").write_text(
        "from paper.tables import Table\n"
        "EXTRA_TABLES = {'n': lambda runs: Table('x', 'N', ['n'], [[str(len(runs))]])}\n")
    declared = extra_tables("solo", [tmp_path / "cards"])
    assert declared["n"]([]).rows == [["0"]] and declared["n"].__module__ == "method_tables_solo"
    (folder / "tables.py").write_text("import numpyy\n")
    other = tmp_path / "other" / "solo"
    shutil.copytree(folder, other)
    with pytest.raises(ImportError):  # another file of the same method is loaded afresh
        load_tables("solo", other / "tables.py")


def test_declared_tables_are_written_and_shown(tmp_path, monkeypatch):
    def seeds_table(runs):
        return Table("ignored", "Seeds per arm", ["arm", "seeds"], [[runs[0].arm, str(len(runs))]])

    def broken(runs):
        return runs[0].evals["final"]["metrics"]["no_such_metric"]

    declared = {"seeds": seeds_table, "broken": broken}
    monkeypatch.setattr(paper.build, "load_tables", lambda method, path: declared if method == "grpo" else {})
    report, errors = build(FIXTURES / "results", tmp_path, CARDS)
    text = (tmp_path / "methods/grpo.md").read_text()  # the method's page: its full section
    assert (tmp_path / "tables/grpo-seeds.md").exists() and (tmp_path / "tables/grpo-seeds.tex").exists()
    assert "### Method-specific tables" in text and "**Seeds per arm.**" in text and "| grpo | 4 |" in text
    assert "Could not build `broken`: KeyError: 'no_such_metric'" in text
    assert "grpo: extra table broken: KeyError: 'no_such_metric'" in errors  # --strict fails on it
    summary = next(line for line in report.read_text().splitlines() if line.startswith("| grpo |"))
    assert "extra table error" in summary


def test_a_tables_module_that_does_not_import_is_the_methods_error(tmp_path, monkeypatch):
    def fail(method, path):
        raise ImportError("no module named numpyy")

    monkeypatch.setattr(paper.build, "load_tables", fail)
    report, errors = build(FIXTURES / "results", tmp_path, CARDS)
    assert any("replications/grpo/tables.py: does not import: ImportError" in e for e in errors)
    assert "\n## GRPO" in (tmp_path / "methods/grpo.md").read_text()  # the rest is still built
    assert "- **GRPO**: " in report.read_text()


def test_method_tables_prints_the_tables_make_paper_builds(tmp_path, monkeypatch):
    build(FIXTURES / "results", tmp_path, CARDS)
    monkeypatch.chdir(REPO)
    for method in ("grpo", "toy"):
        text = method_tables(method, FIXTURES / "results", card_dirs=CARDS)
        written = sorted((tmp_path / "tables").glob(f"{method}-*.md"))
        assert len(written) >= 4
        for path in written:  # each table of the method, exactly as make paper wrote it
            table = path.read_text().split("\n", 1)[1]  # after the <!-- caption --> line
            assert table in text, path.name
        assert "![" not in text  # no figures: nothing is drawn or written
        page = (tmp_path / "methods" / f"{method}.md").read_text()
        section = page.split(f"\n## {text.splitlines()[0][3:]}\n", 1)[1]
        assert text.rsplit("### What did and did not reproduce", 1)[1] in section


def test_method_tables_at_one_scale(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(FIXTURES / "results/grpo", root / "grpo")  # every fixture run is at scale cpu
    assert "| arith | GRPO | 4 | 0, 1, 2, 3 | cpu |" in method_tables("grpo", root, "cpu", card_dirs=CARDS)
    smoke = method_tables("grpo", root, "smoke", card_dirs=CARDS)
    assert "No finished runs yet." in smoke and "fewer than 5 pairs (n=0)" in smoke


@pytest.mark.parametrize("method", ["ccpo", "canopy", "sharp"])
def test_each_methods_tables_name_their_files_after_it(method):
    for name in extra_tables(method, CARDS):
        assert re.fullmatch(r"[a-z0-9-]+", name), name
