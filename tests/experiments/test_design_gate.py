"""`make replicate-<m>` does not run an arm whose every claim the design check says cannot tell (#36):
`experiments.plan.design_blocks` on hand-made design files, and FORCE_DESIGN's wording."""

from __future__ import annotations

import json

import pytest

from experiments.plan import Cell, CellState, design_blocks, design_text


@pytest.fixture(autouse=True)
def _states(monkeypatch):  # a made-up method: its state is its folder's (done or to run)
    monkeypatch.setattr(Cell, "state",
                        lambda c: CellState("done" if (c.run_dir / "done").exists() else "to run"))


def _cell(tmp_path, arm, scale="cpu"):
    return Cell("m", "env", arm, 0, scale, (), str(tmp_path / "out"), str(tmp_path / "work"))


def _design(tmp_path, claims, scale="cpu"):
    path = tmp_path / "results" / "m" / "design.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"claims": claims, "scale": scale}))
    return tmp_path / "results"


def test_an_arm_is_blocked_only_when_every_claim_naming_it_cannot_tell(tmp_path):
    results = _design(tmp_path, {
        "a-beats-b": {"arms": ["a", "b"], "gate": "void"},
        "a-beats-c": {"arms": ["a", "c"], "gate": "design null"},
        "d-beats-b": {"arms": ["d", "b"], "gate": "pass"},
        "e-gain": {"arms": ["e"], "gate": "partial"},
    })
    cells = [_cell(tmp_path, arm) for arm in "abcdef"]
    blocks = design_blocks(cells, results)
    # a: all its claims void or null; c: its one claim a null; b: one claim passes; d/e: testable; f: no claim
    assert sorted(blocks) == [cells[0].name, cells[2].name]
    assert blocks[cells[0].name] == "a-beats-b: void; a-beats-c: design null"
    assert "FORCE_DESIGN=1" in design_text(blocks, forced=False)
    assert "force_design=true" in design_text(blocks, forced=True)
    assert design_text({}, forced=False) == ""


def test_an_oracle_arm_is_blocked_when_every_claim_it_controls_cannot_tell(tmp_path):
    """SkillRise's oracle-ind (the positive control of two void claims, in no claim's arms) would have run
    five cells on a fresh clone for nothing."""
    oracle = {"arm": "o", "gain": 0.0, "pass": False}
    results = _design(tmp_path, {
        "a-beats-b": {"arms": ["a", "b"], "gate": "void", "positive_control": oracle},
        "c-beats-b": {"arms": ["c", "b"], "gate": "void", "positive_control": oracle},
        "d-beats-b": {"arms": ["d", "b"], "gate": "pass", "positive_control": {"arm": "p", "pass": True}},
    })
    blocks = design_blocks([_cell(tmp_path, "o"), _cell(tmp_path, "p")], results)
    assert blocks == {_cell(tmp_path, "o").name: "a-beats-b: void; c-beats-b: void"}


def test_no_block_at_another_scale_without_a_file_or_for_a_finished_cell(tmp_path):
    old = {"arms": ["x", "b"], "gate": "void", "checked_at": {"scale": "dyad"}}
    results = _design(tmp_path, {"a-beats-b": {"arms": ["a", "b"], "gate": "void"}, "old": old})
    assert design_blocks([_cell(tmp_path, "a", scale="paper")], results) == {}  # checked at cpu only
    assert design_blocks([_cell(tmp_path, "x")], results) == {}  # its claim was checked at another scale
    assert list(design_blocks([_cell(tmp_path, "x", scale="dyad")], results)) == [_cell(tmp_path, "x").name]
    assert design_blocks([_cell(tmp_path, "a")], tmp_path / "nowhere") == {}
    finished = _cell(tmp_path, "a")
    finished.run_dir.mkdir(parents=True)
    (finished.run_dir / "done").write_text("")
    assert design_blocks([finished], results) == {}


def test_claims_the_card_no_longer_makes_do_not_block(tmp_path):
    """A design file older than the CARD's testbed (its claim ids gone from the CARD) blocks nothing;
    the same file with a claim the CARD makes blocks its arm."""
    path = tmp_path / "results" / "iapo" / "design.json"
    path.parent.mkdir(parents=True)
    cell = Cell("iapo", "env", "grpo", 0, "cpu", (), str(tmp_path / "out"), str(tmp_path / "work"))
    path.write_text(json.dumps({"scale": "cpu", "claims": {
        "probes-not-harmed": {"arms": ["iapo", "grpo"], "gate": "void"}}}))  # the first testbed's claim
    assert design_blocks([cell], tmp_path / "results") == {}
    path.write_text(json.dumps({"scale": "cpu", "claims": {
        "beats-grpo": {"arms": ["iapo", "grpo"], "gate": "void"}}}))
    assert design_blocks([cell], tmp_path / "results") == {cell.name: "beats-grpo: void"}
