"""Launch checks that need no cluster: job shape vs trainer settings, and --dry-run scripts."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from slurm.jobs import entry_point, load_entry
from slurm.profiles import load_profile
from slurm.sbatch import job_shape

REPO = Path(__file__).resolve().parents[2]


class _Cell:
    def __init__(self, name):
        self.name = name


def _cfg(accelerator="cpu", devices=1, num_nodes=1):
    return {"trainer": {"accelerator": accelerator, "devices": devices, "num_nodes": num_nodes}}


def test_shape_is_one_task_per_device():
    gpu = load_profile("slurm-gpu", {"nodes": 2})
    shape = job_shape(gpu, [_Cell("a"), _Cell("b")], [_cfg("gpu", 8, 2)] * 2)
    assert (shape.nodes, shape.tasks_per_node, shape.gpus_per_node) == (2, 8, 8)
    assert job_shape(load_profile("local"), [_Cell("a")], [_cfg()]).tasks_per_node == 1


@pytest.mark.parametrize("profile, overrides, cfg, message", [
    ("slurm-gpu", {}, _cfg("gpu", 4, 1), r"trainer.devices=4 but profile slurm-gpu has gpus_per_node=8"),
    ("slurm-gpu", {}, _cfg("gpu", 8, 2),
     r"trainer.num_nodes=2 but profile slurm-gpu has nodes=1.*REPLICATE_SLURM_NODES=2"),
    ("slurm-gpu", {"nodes": 2}, _cfg("gpu", 8, 1), r"trainer.num_nodes=1 but profile slurm-gpu has nodes=2"),
    ("slurm-gpu", {}, _cfg("cpu", 8, 1), r"trainer.accelerator=cpu"),
    ("slurm", {}, _cfg("gpu", 1, 1), r"trainer.accelerator=gpu but profile slurm has no GPUs"),
    ("slurm", {}, _cfg("cpu", "auto", 1), r"trainer.devices='auto'"),
])
def test_a_mismatch_is_refused(profile, overrides, cfg, message):
    with pytest.raises(ValueError, match=message):
        job_shape(load_profile(profile, overrides), [_Cell("grpo/arith/grpo/seed-0")], [cfg])


def test_cells_of_one_array_share_their_shape():
    with pytest.raises(ValueError, match="must share their resources"):
        job_shape(load_profile("slurm"), [_Cell("a"), _Cell("b")], [_cfg(devices=1), _cfg(devices=2)])


@pytest.fixture
def paper_args(tmp_path):
    from envs.benchmarks.paper_math.samples import write_samples

    model = tmp_path / "deepseek-math-7b-instruct"  # validation only checks the folder exists
    model.mkdir()
    data = write_samples(tmp_path / "data", ["gsm8k", "math"])  # GSM8K and MATH in their published layouts
    return ["--method", "grpo", "--scale", "paper", "--cluster", "slurm", "--profile", "slurm-gpu",
            "--dry-run", f"model.path={model}", f"method.paper_data={data}", f"out_dir={tmp_path / 'out'}",
            f"work_dir={tmp_path / 'work'}"]


def test_dry_run_of_a_two_node_eight_gpu_paper_cell(paper_args, tmp_path, monkeypatch, capsys):
    from experiments.replicate import main

    monkeypatch.setenv("REPLICATE_SLURM_NODES", "2")
    monkeypatch.setenv("REPLICATE_SLURM_PARTITION", "gpu")
    rc = main(["--verbose", *paper_args, "trainer.devices=8", "trainer.num_nodes=2"])
    out = capsys.readouterr().out
    assert rc == 0, out
    script = out.split("#!/bin/bash", 1)[1].split("# [0]", 1)[0]
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=8", "#SBATCH --gpus-per-node=8",
                 "#SBATCH --partition=gpu", "#SBATCH --array=0-2%3", "#SBATCH --signal=USR2@300",
                 "#SBATCH --requeue", "#SBATCH --time=1440", "#SBATCH --cpus-per-task=8"):
        assert line in script, f"{line!r} missing from\n{script}"
    assert re.search(r"^srun --unbuffered .* -m submitit\.core\._submit ", script, re.M), script
    assert script.index("# setup") < script.index("srun")
    # the resolved config of every cell follows the script
    assert out.count("# overrides: scale=paper") == 3
    assert "  devices: 8\n  num_nodes: 2\n" in out and "  accelerator: gpu\n" in out
    assert not (tmp_path / "work" / "launches").exists()  # a dry run submits and records nothing


@pytest.mark.parametrize("extra, message", [
    (["trainer.devices=4"], "trainer.devices=4 but profile slurm-gpu has gpus_per_node=8"),
    (["trainer.devices=8", "trainer.num_nodes=2"], "trainer.num_nodes=2 but profile slurm-gpu has nodes=1"),
])
def test_mismatch_is_refused_before_submission(paper_args, tmp_path, capsys, extra, message):
    from experiments.replicate import main

    rc = main([a for a in paper_args if a != "--dry-run"] + extra)  # a real launch, refused
    err = capsys.readouterr().err
    assert rc == 2 and message in err, err
    assert "nothing submitted" in err
    assert not (tmp_path / "work" / "launches").exists()


def test_a_dry_run_prints_a_summary_and_the_script_only_verbose(paper_args, tmp_path, monkeypatch, capsys):
    """A paper dry run printed thousands of lines (the script and every cell's resolved config)."""
    from experiments.replicate import main

    monkeypatch.delenv("REPLICATE_SLURM_PARTITION", raising=False)
    assert main(paper_args) == 0
    out = capsys.readouterr().out
    assert len(out.splitlines()) < 50, out
    assert "#!/bin/bash" not in out and "# overrides:" not in out and "srun " not in out
    assert "3 cell(s) to submit as one job array of 3 tasks, at most 16 at once" in out
    assert "grpo/" in out and "each cell: 1 node(s) x 8 task(s) = 8 rank(s)" in out
    for line in ("    #SBATCH --gpus-per-node=8", "    #SBATCH --mem=0", "    #SBATCH --array=0-2%3"):
        assert line in out.splitlines(), out
    assert f"scripts and logs would go under {tmp_path / 'work' / 'launches'}" in out
    assert "note: a real launch is refused: profile slurm-gpu requests 8 GPU(s) per node but names no " \
           "partition" in out
    assert "VERBOSE=1 (--verbose) prints the sbatch script and every cell's config" in out
    assert main(["--verbose", *paper_args]) == 0
    verbose = capsys.readouterr().out
    assert "each cell: 1 node(s) x 8 task(s)" in verbose  # the summary, then the script and the configs
    assert "#!/bin/bash" in verbose and verbose.count("# overrides:") == 3
    assert not (tmp_path / "work" / "launches").exists()


def test_gpus_without_a_partition_are_refused_before_submission(paper_args, tmp_path, monkeypatch, capsys):
    from experiments.replicate import main

    monkeypatch.delenv("REPLICATE_SLURM_PARTITION", raising=False)
    rc = main([a for a in paper_args if a != "--dry-run"] + ["trainer.devices=8"])  # a real launch
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1, err
    assert err.startswith("error: profile slurm-gpu requests 8 GPU(s) per node but names no partition: set "
                          "partition: in the profile or REPLICATE_SLURM_PARTITION="), err
    assert not (tmp_path / "work" / "launches").exists()


def test_cell_job_requeues_the_same_cell_and_forces_only_once(tmp_path, monkeypatch):
    """checkpoint() (submitit's USR2 handler) resubmits the same cell; a requeued attempt of the job
    that FORCE=1-restarted a run resumes it instead of restarting it again."""
    import json

    from experiments.replicate import Cell
    from slurm.launch import CellJob

    seen = []

    def run(cell):
        seen.append(cell.overrides)
        return {"status": "done"}

    cell = Cell("grpo", "arith", "grpo", 0, "smoke", ("scale=smoke", "force=true"), str(tmp_path),
                str(tmp_path))
    job = CellJob(cell, run)
    again = job.checkpoint()
    assert isinstance(again.function, CellJob) and again.function.cell == cell and not again.args
    assert again.function.run is run

    monkeypatch.setenv("SLURM_JOB_ID", "41")
    job()  # first attempt: no manifest yet, FORCE applies
    cell.run_dir.mkdir(parents=True)
    (cell.run_dir / "manifest.json").write_text(json.dumps({"slurm": {"slurm_job_id": "41"}}))
    again.function()  # requeued attempt of job 41: resume what it restarted
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    job()  # another job (a new FORCE=1 launch) restarts it again
    assert seen == [("scale=smoke", "force=true", "progress=false"), ("scale=smoke", "progress=false"),
                    ("scale=smoke", "force=true", "progress=false")]


def test_the_launcher_imports_no_method():
    """slurm/ receives what it runs (callables, or names it imports generically): importing it loads
    nothing of replications/ (no import cycle)."""
    code = ("import sys, slurm, slurm.launch, slurm.sbatch, slurm.jobs, slurm.monitor, slurm.__main__; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('replications', 'paper')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_entry_points_round_trip():
    from experiments.replicate import Cell, collect_tables

    assert entry_point(collect_tables) == "experiments.replicate:collect_tables"
    assert load_entry("experiments.replicate:collect_tables") is collect_tables
    assert load_entry(entry_point(Cell)) is Cell
    assert entry_point(lambda cell: cell) is None  # not importable from another process
    with pytest.raises(ValueError, match="module:function"):
        load_entry("experiments.replicate.collect_tables")


def test_collect_prints_the_recorded_tables_function(tmp_path, monkeypatch, capsys):
    """`python -m slurm collect` imports the function the launch recorded by name; an unknown one is
    one error line, and the failures are still reported when the tables themselves fail."""
    import slurm.launch
    from slurm.jobs import Entry, Launch
    from slurm.launch import collect

    run_dir = tmp_path / "out/fake/env/ok/seed-0"
    run_dir.mkdir(parents=True)
    (run_dir / "done").write_text("")
    record = Launch(id="x", method="fake", scale="smoke", cwd=str(tmp_path), work_dir=str(tmp_path),
                    profile={"name": "local", "poll_s": 1}, cell_type="tests.slurm.slurm_fakes:FakeCell",
                    aggregate="tests.slurm.slurm_fakes:fake_aggregate",
                    entries=[Entry({"method": "fake", "env": "env", "arm": "ok", "seed": 0, "scale": "smoke",
                                    "overrides": [], "out_dir": str(tmp_path / "out"),
                                    "work_dir": str(tmp_path)},
                                   "fake/env/ok/seed-0", str(run_dir))])
    monkeypatch.setattr(slurm.launch, "sacct", lambda ids: {})
    assert collect(record, wait=False) == 0
    assert "aggregate fake/smoke: 1/1 cells; 0 missing" in capsys.readouterr().out

    record.aggregate = "tests.slurm.slurm_fakes:no_such_function"
    assert collect(record, wait=False) == 2
    err = capsys.readouterr().err
    assert "cannot import 'tests.slurm.slurm_fakes:no_such_function'" in err and "--entry" in err

    def broken(method, scale, cells):
        raise PermissionError("results/ is not readable")

    assert collect(record, broken, wait=False) == 1
    captured = capsys.readouterr()
    assert "1/1 cells done" in captured.out and "PermissionError: results/ is not readable" in captured.err
