"""`make evaluate` (experiments/evaluate.py) without a model: which folders it loads each adapter from, and
the one-line refusals (the end-to-end reproduction is tests/e2e/test_run_outputs.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from experiments.evaluate import adapter_folders, main


def _adapter(folder: Path) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text("{}")
    return folder


def test_one_adapter_folder_serves_every_adapter_and_a_run_s_folder_each_by_name(tmp_path):
    policy = SimpleNamespace(adapters=["plan", "work"])
    single = _adapter(tmp_path / "single")
    assert adapter_folders(policy, str(single)) == {"plan": single, "work": single}
    _adapter(tmp_path / "run" / "plan")
    _adapter(tmp_path / "run" / "work")
    assert adapter_folders(policy, str(tmp_path / "run")) == {"plan": tmp_path / "run" / "plan",
                                                              "work": tmp_path / "run" / "work"}
    assert adapter_folders(policy, "none") == {}
    shutil.rmtree(tmp_path / "run" / "work")
    with pytest.raises(FileNotFoundError, match=r"missing: \['work'\]"):
        adapter_folders(policy, str(tmp_path / "run"))


def _refusal(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1, err
    return err


def test_a_run_without_exported_adapters_or_unfinished_is_one_line(capsys, tmp_path):
    committed = tmp_path / "seed-0"  # a finished run recorded before adapters were exported
    committed.mkdir()
    (committed / "manifest.json").write_text('{"method": "grpo"}')
    (committed / "done").write_text("")
    assert "records no exported adapters" in _refusal(capsys, "--run", str(committed))
    (committed / "done").unlink()
    assert "is not a finished run folder" in _refusal(capsys, "--run", str(committed))
    assert "drop ['seed=1']" in _refusal(capsys, "--run", str(committed), "seed=1")
