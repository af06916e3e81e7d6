"""`make replicate-grpo SCALE=smoke` through the real local launcher (submitit), then the tables;
a bad setting or argument is one line, and failed cells are always listed."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

import experiments.replicate as replicate
from experiments.replicate import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
def test_smoke_replication_end_to_end(tmp_path, wall_budget):
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "experiments.replicate", "--method", "grpo", "--scale", "smoke",
           f"out_dir={out}", f"work_dir={work}"]
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    elapsed = time.time() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    budget = wall_budget(120)  # 2 minutes on a machine of its own
    assert elapsed < budget, f"smoke replication took {elapsed:.0f} s (budget: {budget} s)"
    cell = out / "grpo" / "arith" / "grpo" / "seed-0"
    for name in ("config.yaml", "manifest.json", "metrics.jsonl", "eval.json", "done"):
        assert (cell / name).exists(), name
    # the grpo section of the report as make paper builds it: runs, claims, held-out scores
    assert "## GRPO: Group Relative Policy Optimization" in proc.stdout
    assert "| arith | GRPO | 1 | 0 | smoke |" in proc.stdout
    assert "| arith | GRPO | 1 | " in proc.stdout.split("### Held-out scores", 1)[1]
    assert "not counted" not in proc.stdout and not list(out.glob("grpo/*.md"))  # prints, writes no summary
    # a rerun skips the finished cell and changes nothing
    before = (cell / "metrics.jsonl").read_text()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and (cell / "metrics.jsonl").read_text() == before


@pytest.mark.e2e
def test_bad_config_fails_before_any_cell_runs(tmp_path):
    cmd = [sys.executable, "-m", "experiments.replicate", "--method", "grpo", "--scale", "smoke",
           f"out_dir={tmp_path}", "trainer.kl.estimator=k9", "trainer.kl.coef=0.1",
           "trainer.kl.placement=loss"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert "unknown KL estimator" in proc.stderr and "choose k1 | k2 | k3" in proc.stderr
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("args", "message"), [
    (["trainer.nope=1"], "error: Could not override 'trainer.nope': Key 'nope' not in 'TrainerConfig'; "
                         "python -m experiments.run method=grpo --cfg job prints every setting"),
    (["trainer.lr=abc"], "'abc' of type 'str' could not be converted to Float"),
    (["trainer.lr=["], "(an override is key=value, e.g. trainer.lr=1e-3)"),
    (["trainer.lr"], "error: Error parsing override 'trainer.lr': missing EQUAL"),
    (["env=nope"], "error: no config 'env/nope'; choose one of arith, "),
    (["trainer.lr=${nope}"], "error: Interpolation key 'nope' not found (in trainer.lr)"),
    (["--seeds", "abc"], "error: argument --seeds: 'abc' is not a comma-separated list of seeds >= 0"),
    (["--seeds", "0,-1"], "error: argument --seeds: '0,-1' is not"),
    (["--seeds", "99999999999999999999999"], "error: argument --seeds: '99999999999999999999999' is not a "
                                             "comma-separated list of seeds >= 0 (and < 2^63)"),
    (["--scale", "huge"], "error: grpo has no scale 'huge'; "
                          "choose one of ['cpu', 'paper', 'small', 'smoke']"),
    (["--parallel", "x"], "error: argument --parallel: invalid int value: 'x'"),
    (["--arms", "nope"], "error: grpo has no arm(s) ['nope']"),
    # issue 34: ARGS=seed=7 ran seed 7 in the folder and progress line of seed 0
    (["seed=7"], "error: seed=7 in the extra overrides (ARGS) is refused: a cell's seed is set by SEEDS "
                 "(--seeds), not by an override"),
    (["+arm=other"], "error: +arm=other in the extra overrides (ARGS) is refused: a cell's arm is set by the "
                     "replication's arms"),
    (["method=sharp"], "a cell's method is set by the target (make replicate-<method>, --method)"),
    (["scale=cpu"], "a cell's scale is set by SCALE (--scale)"),
])
def test_a_bad_setting_or_argument_is_one_line(tmp_path, capsys, args, message):
    """What `make replicate-grpo ARGS=... SEEDS=...` passes: refused in one line, exit 2, nothing run."""
    rc = main(["--method", "grpo", "--scale", "smoke", f"out_dir={tmp_path / 'out'}",
               f"work_dir={tmp_path / 'work'}", *args])
    captured = capsys.readouterr()
    assert rc == 2 and captured.out == ""
    assert len(captured.err.splitlines()) == 1, captured.err
    assert message in captured.err, captured.err
    assert not any(tmp_path.iterdir())


def test_an_unknown_method_is_one_line(capsys):
    assert main(["--method", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown method 'nope'; choose one of [") and len(err.splitlines()) == 1, err


def test_failed_cells_are_listed_even_when_the_tables_fail(tmp_path, capsys, monkeypatch):
    """An unwritable results folder can break the summary too: the failed cells are still listed."""
    def launch_local(cells, parallel, work_dir):
        return [f"{cells[0].name} failed:\nPermissionError: [Errno 13] Permission denied: '{tmp_path}/out'"]

    def collect_tables(method, scale, cells):
        raise PermissionError(f"[Errno 13] Permission denied: '{tmp_path}/out/grpo'")

    monkeypatch.setattr(replicate, "launch_local", launch_local)
    monkeypatch.setattr(replicate, "collect_tables", collect_tables)
    rc = main(["--method", "grpo", "--scale", "smoke", f"out_dir={tmp_path / 'out'}",
               f"work_dir={tmp_path / 'work'}"])
    err = capsys.readouterr().err
    assert rc == 1
    assert "[replicate] FAILED grpo/arith/grpo/seed-0 failed:\nPermissionError" in err
    assert "[replicate] FAILED the replication stopped: PermissionError: [Errno 13] Permission denied" in err


@pytest.mark.e2e
def test_an_out_dir_that_cannot_be_written_lists_the_failed_cell(tmp_path):
    """A results folder below a file: the cell fails, the tables of what exists are printed, the
    failure is listed, exit 1 (or the check before the launch refuses it in one line, exit 2)."""
    (tmp_path / "a-file").write_text("")
    cmd = [sys.executable, "-m", "experiments.replicate", "--method", "grpo", "--scale", "smoke",
           f"out_dir={tmp_path / 'a-file' / 'out'}", f"work_dir={tmp_path / 'work'}"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    if proc.returncode == 2:
        assert len(proc.stderr.strip().splitlines()) == 1 and proc.stderr.startswith("error: "), proc.stderr
        return
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "[replicate] FAILED grpo/arith/grpo/seed-0 failed:" in proc.stderr
    assert "1 of 1 cells not done" in proc.stdout and "## GRPO" in proc.stdout
