"""`make compare` prints only what its filters ask for, and a time estimate before it starts (#46)."""

from __future__ import annotations

import re

from experiments import compare
from experiments.compare import (
    applicable,
    estimate_line,
    home_env,
    home_seeds,
    load_settings,
    matrix_text,
    plan,
)


def test_grpo_runs_only_beside_the_chosen_methods():
    """METHODS=iapo planned GRPO on all 8 environments, most of which IAPO did not apply to."""
    settings = load_settings()
    homes = [t for t, s in settings.items() if applicable("iapo", s.env, home_env(s, "smoke"))]
    # a column without a budget at smoke (terminal-smollm2: small only) is shown, said why, with no cells
    budget = [t for t in homes if home_seeds(settings[t], "smoke") is not None]
    p = plan("smoke", methods=["iapo"], seeds=[0])
    assert list(p.settings) == homes and {c.env for c in p.cells} == set(budget)
    assert {c.method for c in p.cells} == {"grpo", "iapo"}
    no_budget = [f"{t}: {settings[t].absent('smoke')}" for t in homes if t not in budget]
    assert p.skipped == no_budget
    text = matrix_text(p, {})
    assert "arith" not in text and "sharp" not in text and homes[0] in text
    # an environment named in ENVS where none of METHODS applies: shown, said why, nothing planned there
    p = plan("smoke", envs=["arith", *homes], methods=["iapo"], seeds=[0])
    assert "arith" in p.settings and not [c for c in p.cells if c.env == "arith"]
    assert p.skipped == ["arith: iapo does not apply (GRPO runs only beside it)", *no_budget]
    # GRPO alone (or no METHODS) still runs everywhere it is asked to
    assert {c.env for c in plan("smoke", envs=["arith"], methods=["grpo"], seeds=[0]).cells} == {"arith"}


def test_a_launch_prints_its_time_estimate_before_it_starts(tmp_path, monkeypatch, capsys):
    printed_before: list[str] = []

    def launch(cells, parallel, work):
        printed_before.append(capsys.readouterr().out)
        return []

    monkeypatch.setattr(compare, "launch_local", launch)  # run nothing
    monkeypatch.setattr(compare, "compare_tables", lambda method, scale, cells: "")
    args = ["--scale", "smoke", "--envs", "arith", "--methods", "grpo", "--seeds", "0",
            "--out-dir", str(tmp_path)]
    assert compare.main(args) == 0
    estimate = r"^\[compare\] equal steps: 1 cell\(s\): 1 to run, (~\d+ (s|min)|time unknown)"
    assert printed_before and re.search(estimate, printed_before[0], re.M)


def test_the_estimate_line():
    cells = plan("smoke", envs=["arith"], methods=["grpo"], seeds=[0, 1]).cells
    line = estimate_line(list(cells), parallel=2)
    assert line.startswith("[compare] equal steps: 2 cell(s): ") and "equal-tokens cells" in line
    assert estimate_line([], parallel=2) == "[compare] no equal-steps cell to run"
