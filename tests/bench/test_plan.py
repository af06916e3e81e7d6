"""The benchmark's hardware-aware parts, without running anything heavy: which precisions are kept
(injected matmul rates), MFU on the committed results, the time cap's planning (an injected clock)."""

import copy
import json
from pathlib import Path

import pytest

from bench import plan
from bench.cli import estimate_cell
from bench.hardware import fastest, usable_precisions
from bench.report import derive, mfu

COMMITTED = Path(__file__).resolve().parents[2] / "results" / "bench" / "bench.json"


# ---- precisions -----------------------------------------------------------------------------------
def test_a_precision_slower_than_fp32_is_skipped_with_its_rates():
    # the AVX2-only EPYC of issue 25: bf16 matmul at 1.0 GFLOP/s against 155 in float32
    kept, skipped = usable_precisions({"32": 155e9, "bf16": 1.0e9}, ["32", "bf16"])
    assert kept == ["32"]
    assert set(skipped) == {"bf16"} and "1.0 GFLOP/s" in skipped["bf16"] and "155.0" in skipped["bf16"]


def test_a_faster_precision_is_kept_and_fp32_always():
    kept, skipped = usable_precisions({"32": 196e9, "bf16": 434e9}, ["32", "bf16"])
    assert kept == ["32", "bf16"] and skipped == {}
    assert fastest({"32": 196e9, "bf16": 434e9}, kept) == "bf16"
    # float32 is the reference: kept even if another precision is faster, and even if alone
    assert usable_precisions({"32": 1e9, "bf16": 9e9}, ["32"]) == (["32"], {})


def test_an_unknown_precision_is_an_error():
    with pytest.raises(ValueError, match="unknown precision 'fp8'"):
        usable_precisions({"32": 1e9}, ["32", "fp8"])


# ---- MFU ------------------------------------------------------------------------------------------
def test_mfu_of_the_committed_results_is_at_most_one():
    r = json.loads(COMMITTED.read_text())
    derive(r)
    values = [s["mfu_train"] for e in r["models"].values() for c in e["cells"].values() for s in c.values()
              if isinstance(s, dict) and "mfu_train" in s]
    # per model: the minimal work (KL-off cell) and ours in each KL cell, three models
    assert len(values) >= 9 and all(v is not None and 0 < v <= 1 for v in values)


def test_mfu_above_one_is_reported_as_na_not_clamped():
    assert mfu(50e9, 1.0, 100e9) == (0.5, None)
    value, note = mfu(330e9, 1.0, 100e9)
    assert value is None and note.startswith("n/a") and "330%" in note


def test_mfu_of_a_series_is_against_its_own_precisions_rate():
    r = json.loads(COMMITTED.read_text())
    cell = r["models"]["tiny"]["cells"]["kl=0"]
    derive(r)
    minimal = cell["minimal/bf16"]
    # what our scorer runs (a shared prompt once)
    flops = minimal.get("flops_train_shared_prompt", minimal["flops_train"])
    t = cell["ours/bf16"]["time_train_s"]
    assert cell["ours/bf16"]["mfu_train"] == pytest.approx(flops / t / r["matmul_flops"]["bf16"])
    slow = copy.deepcopy(r)  # the AVX2 machine's rates: the bf16 count then exceeds the rate -> n/a
    slow["matmul_flops"] = {"32": 155e9, "bf16": 1.0e9}
    derive(slow)
    s = slow["models"]["tiny10m"]["cells"]["kl=0"]["ours/bf16"]
    assert s["mfu_train"] is None and "n/a" in s["mfu_train_note"]


# ---- the time cap ---------------------------------------------------------------------------------
class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_budget_admits_what_fits_and_notes_what_does_not():
    clock = Clock()
    b = plan.Budget(600, clock=clock)
    assert b.admit("tiny kl=0", 200)
    clock.t = 500
    assert not b.admit("engines", 150)
    assert b.skipped[0]["part"] == "engines"
    assert "150 s, 100 s left of the 10-minute cap" in b.skipped[0]["note"]
    assert b.admit("multi-turn", 100)  # exactly what is left still fits


def test_budget_choose_reduces_before_it_skips():
    clock = Clock()
    b = plan.Budget(600, clock=clock)
    clock.t = 400
    options = [("every precision", "all", 300.0), ("one precision", "one", 150.0)]
    assert b.choose("smollm2 kl=0", options) == "one"
    assert len(b.skipped) == 1 and b.skipped[0]["note"].startswith("reduced to one precision")
    clock.t = 550
    assert b.choose("smollm2 kl=0.04", options) is None
    assert b.skipped[-1]["part"] == "smollm2 kl=0.04 (one precision)" and "skipped" in b.skipped[-1]["note"]


def test_cell_estimate_prior_then_measured():
    names = ["minimal/32", "ours/32", "trl/32"]
    rates = {"32": 100e9}
    prior = estimate_cell(names, 10e9, rates, {}, None, 1e6, warmup=1, steps=2, kl=False)
    step = plan.STEP_OVERHEAD_S + 10e9 / (plan.PRIOR_EFFICIENCY * 100e9)
    assert prior == pytest.approx(plan.startup_s(3, 1e6) + 3 * 3 * step)
    measured = {"minimal/32": 1.0, "ours/32": 0.5, "trl/32": 1.5}
    kl_cell = estimate_cell(names, 10e9, rates, measured, 12.0, 1e6, warmup=1, steps=2, kl=True)
    assert kl_cell == pytest.approx(12.0 + 3 * 3.0 * plan.KL_FACTOR)


# ---- bench.cli's control flow, with every measurement replaced by a stub -------------------------
def fake_cell(s, precisions, trl_precisions, warmup, steps, minimal=True, start_method="forkserver"):
    from bench.cli import cell_series

    cell = {}
    for name in cell_series(s, precisions, trl_precisions, minimal):
        stats = {"step": {"median_s": 1.0, "min_s": 0.9, "max_s": 1.1, "n": steps}, "tokens_per_s": 100.0,
                 "generated_tokens_per_step": 100.0, "peak_rss_mib": 500.0}
        if not name.startswith("trl/"):
            stats.update(time_train_s=0.5, time_rollout_s=0.4, flops_train=1e9, flops_generate=1e8)
        cell[name] = stats
    cell["timing"] = {"wall_s": 10.0, "startup_s": 1.0}
    return cell


@pytest.fixture
def stubbed(monkeypatch):
    import bench.cli
    import bench.hardware

    calls = []
    rates = {"32": {"mm": 100e9, "linear": 90e9}, "bf16": {"mm": 1e9, "linear": 2e9}}
    monkeypatch.setattr(bench.hardware, "matmul_rates", lambda p, device="cpu": rates[p])
    monkeypatch.setattr(bench.cli, "_prior_flops", lambda s: (1e9, 1e8, 1_000_000))
    monkeypatch.setattr(bench.cli, "run_cell", lambda *a, **k: calls.append(a) or fake_cell(*a, **k))
    monkeypatch.setattr(bench.cli, "run_engines", lambda *a: {"ok": True, "files": "x"})
    # the cells are stubbed: TRL itself never runs
    monkeypatch.setattr(bench.cli, "trl_installed", lambda: True)
    return calls


def test_run_skips_the_slow_precision_everywhere(stubbed, tmp_path):
    from bench.cli import main

    r = main(["--models", "tiny", "--kl", "0", "--no-multiturn", "--no-engines", "--generation-models", "",
              "--out", str(tmp_path)])
    assert "bf16" in r["precisions_skipped"] and r["matmul_flops"] == {"32": 100e9, "bf16": 2e9}
    series = set(r["models"]["tiny"]["cells"]["kl=0"])
    assert {"ours/32", "trl/32", "minimal/32"} <= series and not any("bf16" in s for s in series)
    assert "Precision bf16 skipped" in (tmp_path / "bench.md").read_text()
    assert r["machine"]["cpu"]["model"]  # what the manifests record


def test_kl_cell_measures_no_minimal_work_and_compares_with_the_kl_off_one(stubbed, tmp_path):
    """The minimal work has no reference pass: it is measured once per model, in the KL-off cell."""
    from bench.cli import main

    r = main(["--models", "tiny", "--kl", "0,0.04", "--no-multiturn", "--no-engines",
              "--generation-models", "", "--out", str(tmp_path)])
    cells = r["models"]["tiny"]["cells"]
    assert "minimal/32" in cells["kl=0"] and not any(k.startswith("minimal/") for k in cells["kl=0.04"])
    ours = cells["kl=0.04"]["ours/32"]
    assert ours["minimal_from"] == "kl=0"
    assert ours["overhead_over_minimal"] == pytest.approx(0.0)  # 1.0 s vs 1.0 s
    assert ours["mfu_train"] == pytest.approx(1e9 / 0.5 / 100e9)
    assert "vs kl=0's" in (tmp_path / "bench.md").read_text()


def test_without_trl_its_series_are_skipped_with_a_note(stubbed, monkeypatch, tmp_path):
    import bench.cli

    monkeypatch.setattr(bench.cli, "trl_installed", lambda: False)
    r = bench.cli.main(["--models", "tiny", "--kl", "0", "--no-multiturn", "--no-engines",
                        "--generation-models", "", "--out", str(tmp_path)])
    series = set(r["models"]["tiny"]["cells"]["kl=0"])
    assert "ours/32" in series and not any(s.startswith("trl/") for s in series)
    assert "not installed" in r["trl_skipped"] and r["machine"]["trl"] is None


def test_run_under_a_cap_skips_with_notes_never_silently(stubbed, tmp_path):
    from bench.cli import main

    r = main(["--models", "tiny,tiny10m", "--max-minutes", "0.01", "--no-multiturn", "--engines",
              "--generation-models", "", "--out", str(tmp_path)])
    assert stubbed == [] and all(not e["cells"] for e in r["models"].values())
    parts = [s["part"] for s in r["skipped_for_time"]]
    assert ({"tiny kl=0", "tiny kl=0.04", "tiny10m kl=0", "tiny10m kl=0.04"}
            <= {p.split(" (")[0] for p in parts})
    assert any(p.startswith("engine columns") for p in parts)
    md = (tmp_path / "bench.md").read_text()
    assert md.count("Time cap:") == len(parts)


def test_paired_ratio_is_the_median_of_per_round_ratios():
    from bench.work import paired_ratio

    # the machine slows down across the cell (rounds 2 and 3 twice as slow): each round's ratio is
    # 0.5, the ratio of the medians is not
    ours, theirs = [1.0, 2.0, 2.0, 1.0], [2.0, 4.0, 4.0, 2.0]
    assert paired_ratio(ours, theirs) == 0.5
    assert paired_ratio([1.0, 3.0, 2.0], [2.0, 4.0, 8.0]) == 0.5  # rounds 0.5, 0.75, 0.25 -> median 0.5
    assert paired_ratio([1.0, 2.0], [2.0]) is None and paired_ratio([], []) is None


def test_the_timeline_records_each_part_since_the_last_mark():
    clock = Clock()
    t = plan.Timeline(clock=clock)
    clock.t = 2.04
    t.mark("rates")
    clock.t = 12.5
    t.mark("cell")
    assert t.parts == [{"part": "rates", "s": 2.0}, {"part": "cell", "s": 10.5}]


def test_alternation_rotates_and_a_series_with_fewer_steps_rests_in_the_last_rounds(monkeypatch):
    import bench.alternate
    from bench.cli import minimal_steps

    log = []

    class FakeWorker:
        def __init__(self, name, kind, setting, steps, start_method):
            self.name, self.steps_asked, self.records, self.stats = name, steps, [], {}
            self.proc = type("Proc", (), {"is_alive": staticmethod(lambda: False)})()

        def wait(self):
            return "ready", None

        def step(self):
            log.append(self.name)
            self.records.append({"time_s": float(len(self.records))})

        def stop(self):
            self.stats = {"stopped": True}

    monkeypatch.setattr(bench.alternate, "Worker", FakeWorker)
    series = {"minimal/32": ("minimal", {}), "ours/32": ("ours", {}), "trl/32": ("trl", {})}
    workers = bench.alternate.alternate(series, warmup=1, steps=4,
                                        fewer_steps={"minimal/32": minimal_steps(4)})
    # rounds: order rotates by one each round; minimal: warm-up + 2 measured steps, then rests
    assert log == ["minimal/32", "ours/32", "trl/32", "ours/32", "trl/32", "minimal/32",
                   "trl/32", "minimal/32", "ours/32", "ours/32", "trl/32", "ours/32", "trl/32"]
    assert workers["minimal/32"].steps_asked == 1 + 2 + 1 and workers["ours/32"].steps_asked == 1 + 4 + 1
    assert [len(w.records) for w in workers.values()] == [2, 4, 4]  # the warm-up step dropped
    assert all(w.stats == {"stopped": True} for w in workers.values())
    assert [minimal_steps(n) for n in (1, 2, 4, 10)] == [1, 1, 2, 5]
