"""Every method has a small scale (#46): `make replicate-<m> SCALE=small DRY_RUN=1` plans its cells (SmolLM2
on the nearest real task set installed offline), each cell composed and checked as a real launch checks it,
none refused, and a run of another scale never times them."""

from __future__ import annotations

import pytest

pytest.importorskip("reasoning_gym", reason="the `envs` extra is not installed (pip install -e '.[envs]')")
pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (make setup)")

from experiments.replicate import cell_config, load_replication, main, plan  # noqa: E402
from replications import METHODS  # noqa: E402

# method -> (the environment tags its small cells train on, the arms they run; None: every arm)
SMALL = {"grpo": ({"reasoning_gym"}, None), "iapo": ({"tau2"}, None),
         "river": ({"terminal-smollm2"}, {"grpo-full", "grpo-random", "river-filter", "river"}),
         "skillrise": ({"textworld"}, None),
         "ccpo": ({"reasoning_gym_team"}, {"grpo-center", "ccpo-v1", "ccpo-v2", "ccpo-v2ps"}),
         "canopy": ({"bfcl"}, {"full"}),
         "sharp": ({"toolhops-chain-k5-smollm2"}, {"small-grpo", "small-local", "small-sharp-exact"}),
         "inflowop": ({"braid-smollm2"},
                      {"single", "template", "rerun-all", "greedy", "no-repair", "no-profile", "inflowop"})}


def test_every_method_is_listed():
    assert set(SMALL) == set(METHODS)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_a_dry_run_at_small_scale_plans_cells(method, tmp_path, capsys):
    code = main(["--method", method, "--scale", "small", "--dry-run", "--out-dir", str(tmp_path / "out"),
                 f"work_dir={tmp_path / 'work'}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    cells = plan(method, "small", extra_overrides=(f"out_dir={tmp_path / 'out'}",))
    rep = load_replication(method)
    assert cells and len(cells) == len(rep.arms_at("small")) * len(rep.seeds["small"])
    env, arms = SMALL[method]
    assert {c.env for c in cells} == env
    assert arms is None or {c.arm for c in cells} == arms
    assert {c.scale for c in cells} == {"small"}
    assert f"[plan] {len(cells)} cell(s): {len(cells)} to run" in out and "refused" not in out
    # the model is SmolLM2 (installed offline), which the scale picks
    assert {cell_config(c).model.hf_id for c in cells} == {"HuggingFaceTB/SmolLM2-135M-Instruct"}
