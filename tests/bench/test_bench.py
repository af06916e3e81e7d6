"""The benchmark end to end in a tiny configuration (2 steps per trainer): it runs and writes the
fields the report is built from. TRL's columns are checked only where TRL is installed."""

import importlib.util
import json

import pytest

pytestmark = pytest.mark.e2e
HAVE_TRL = importlib.util.find_spec("trl") is not None


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    from bench.cli import main

    out = tmp_path_factory.mktemp("bench")
    main(["--quick", "--threads", "1", "--out", str(out), "--work-dir", str(out / "work")])
    return out, json.loads((out / "bench.json").read_text())


def test_json_and_table_are_written(result):
    out, r = result
    assert (out / "bench.md").read_text().startswith("# Benchmark")
    assert set(r) >= {"machine", "settings", "matmul_flops", "models", "multiturn", "wall_s"}
    assert len(r["machine"]["load_average_start"]) == 3 and r["matmul_flops"]["32"] > 0


def test_our_trainer_series(result):
    _, r = result
    entry = r["models"]["tiny"]
    minimal = entry["cells"]["kl=0"]["minimal/32"]
    assert entry["params"] > 0 and minimal["step"]["median_s"] > 0 and minimal["flops_train"] > 0
    assert minimal["step"]["n"] == 1  # half the trainers' 2 measured steps (bench.cli.minimal_steps)
    ours = entry["cells"]["kl=0"]["ours/32"]
    assert ours["step"]["n"] == 2
    assert ours["step"]["min_s"] <= ours["step"]["median_s"] <= ours["step"]["max_s"]
    assert ours["tokens_per_s"] > 0 and ours["peak_rss_mib"] > 0 and 0 < ours["mfu_train"] < 1
    assert "overhead_over_minimal" in ours and entry["cells"]["kl=0"]["best_ours"] == "ours/32"


def test_multiturn_batching(result):
    _, r = result
    mt = r["multiturn"]
    assert mt["batched"]["generated_tokens"] > 0 and mt["one_at_a_time"]["generated_tokens"] > 0
    assert mt["speedup"] > 0 and mt["episodes"] == 4 and mt["one_at_a_time"]["rollouts"] == 1


def test_trl_series(result):
    if not HAVE_TRL:
        pytest.skip("TRL is not installed (pip install -c constraints.txt '.[bench]')")
    _, r = result
    cell = r["models"]["tiny"]["cells"]["kl=0"]
    trl = cell["trl/32"]
    assert trl["step"]["n"] == 2 and trl["tokens_per_s"] > 0 and trl["peak_rss_mib"] > 0
    assert cell["ratio_ours_over_trl"] > 0
    rounds = [o / t for o, t in zip(cell["ours/32"]["step"]["all_s"], trl["step"]["all_s"], strict=True)]
    # the median of two rounds
    assert len(rounds) == 2 and cell["ratio_paired"] == pytest.approx(sum(rounds) / 2)
    assert "| paired (median of per-round ratios) |" in (result[0] / "bench.md").read_text()


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_workers_forked_from_the_server_start_with_the_imports_done(start_method):
    from bench.preload import MODULES, report_loaded, worker_context

    ctx = worker_context(start_method)
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=report_loaded, args=(child,))
    proc.start()
    child.close()
    assert parent.poll(300), "the worker did not answer"
    loaded = parent.recv()
    proc.join(timeout=30)
    if start_method == "spawn":  # a fresh interpreter: nothing of the trainers' stack yet
        assert not {"lightning", "common.trainer", "trl"} & set(loaded)
    else:
        installed = {m for m in MODULES if importlib.util.find_spec(m.split(".")[0]) is not None}
        assert set(loaded) == installed and {"lightning", "common.trainer", "bench.workers"} <= installed


def test_an_unknown_start_method_is_an_error():
    from bench.preload import worker_context

    with pytest.raises(ValueError, match="unknown start method 'fork'"):
        worker_context("fork")


def test_the_timeline_says_where_the_time_went(result):
    out, r = result
    parts = [p["part"] for p in r["timeline"]]
    assert parts[0] == "matmul rates" and "tiny: kl=0" in parts and parts[-1] == "multi-turn rollouts"
    assert sum(p["s"] for p in r["timeline"]) <= r["wall_s"] + 1
    assert r["settings"]["start_method"] == "forkserver"
    assert "(matmul rates " in (out / "bench.md").read_text()
