"""Every method's every paper scale, as a user launches it on a GPU cluster's login node:

    make replicate-<m> SCALE=<paper scale> DRY_RUN=1 CLUSTER=slurm PROFILE=slurm-gpu \\
        ARGS="model.path=<local model> method.paper_data=<local data>"

prints a valid sbatch script (parsed: its #SBATCH directives, one srun line, `bash -n`) and the
resolved config of every cell, once the config check has passed with the model folder and the
papers' data present (fixtures: an empty model folder, hand-written rows in each data set's
published layout). The login node has no GPU: nothing here may ask for one. No cluster is needed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

pytest.importorskip("math_verify")  # the `envs` extra (make setup)

from envs.benchmarks.paper_math.samples import write_samples  # noqa: E402
from envs.registry import ENVS  # noqa: E402
from experiments.replicate import load_replication, main  # noqa: E402
from replications import METHODS  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PAPER_SCALES = [(m, p.stem) for m in sorted(METHODS)
                for p in sorted((ROOT / "replications" / m / "conf" / "scale").glob("paper*.yaml"))]
# the data set a scale's refusal names when its data folder is empty (None: its benchmarks ship in their
# packages)
FIRST_DATA_SET = {("grpo", "paper"): "GSM8K", ("ccpo", "paper"): "MATH", ("ccpo", "paper_v2"): "MATH",
                  ("sharp", "paper"): "MuSiQue", ("canopy", "paper"): "AppWorld",
                  ("canopy", "paper_swe"): "SWE-bench Verified",
                  # scaffolded by make new-method: GRPO's paper data until the method states its own
                  ("iapo", "paper"): None, ("inflowop", "paper"): "braid_paper",
                  ("river", "paper"): "terminal_bench", ("skillrise", "paper"): "scienceworld"}
# paper scales whose environment is not registered yet: the dry run refuses, naming it, until it is
UNREGISTERED_ENV = {("skillrise", "paper"): "scienceworld", ("inflowop", "paper"): "braid_paper",
                    ("river", "paper"): "terminal_bench"}
# registered, but refused by the method until the environment has what it needs (SkillRise: a curate turn)
NOT_READY_ENV = {("skillrise", "paper")}
# paper scales whose memory plan (experiments/plan_memory.py) does not fit 80 GB GPUs: refused naming the
# knob, planned again on 141 GB GPUs (PLAN_GPU_GB=141) where they fit
MEMORY_REFUSED = {("canopy", "paper"): "engine.max_model_len"}
DIRECTIVE = re.compile(r"^#SBATCH --([a-z][a-z-]*)(?:=(\S+))?$")


@pytest.fixture(scope="module")
def staged(tmp_path_factory) -> tuple[Path, Path]:
    """(model folder, data folder): the config check only needs the model folder to exist."""
    root = tmp_path_factory.mktemp("paper")
    model = root / "model"
    model.mkdir()
    return model, write_samples(root / "data")


@pytest.fixture(autouse=True)
def login_node(monkeypatch):
    """A login node without a GPU: a dry run must not check the machine (check_machine runs in the job)."""
    import torch

    def no_gpu_here(*args, **kwargs):
        raise AssertionError("a dry run asked for the machine's GPUs on the login node")

    monkeypatch.setattr(torch.cuda, "is_available", no_gpu_here)
    monkeypatch.setattr(torch.cuda, "device_count", no_gpu_here)
    monkeypatch.setattr("common.config.machine_errors", no_gpu_here)
    monkeypatch.setattr("common.fit.check_machine", no_gpu_here)


def args(method: str, scale: str, model: Path, data: Path, tmp: Path) -> list[str]:
    return ["--method", method, "--scale", scale, "--cluster", "slurm", "--profile", "slurm-gpu", "--dry-run",
            "--verbose", f"model.path={model}", f"method.paper_data={data}", f"out_dir={tmp / 'out'}",
            f"work_dir={tmp / 'work'}"]


def test_every_paper_scale_is_covered():
    assert sorted(FIRST_DATA_SET) == PAPER_SCALES


@pytest.mark.parametrize("method, scale", PAPER_SCALES)
def test_dry_run_prints_a_valid_job_script(method, scale, staged, tmp_path, capsys, monkeypatch):
    model, data = staged
    monkeypatch.delenv("PLAN_GPU_GB", raising=False)
    rc = main(args(method, scale, model, data, tmp_path))
    captured = capsys.readouterr()
    if (method, scale) in MEMORY_REFUSED:
        assert rc == 2 and len(captured.err.splitlines()) == 1, captured.err
        assert "does not fit 80 GB GPUs" in captured.err and MEMORY_REFUSED[(method, scale)] in captured.err
        monkeypatch.setenv("PLAN_GPU_GB", "141")
        rc = main(args(method, scale, model, data, tmp_path))
        captured = capsys.readouterr()
    missing = UNREGISTERED_ENV.get((method, scale))
    if missing is not None and (missing not in ENVS or (method, scale) in NOT_READY_ENV):
        assert rc == 2 and len(captured.err.splitlines()) == 1 and missing in captured.err, captured.err
        return
    assert rc == 0, captured.err
    out = captured.out
    planned = {"inflowop", "canopy/paper_swe"}  # no training steps; a hybrid model the plan has no shape for
    assert ("=> fits" in out) != (method in planned or f"{method}/{scale}" in planned), out[:2000]
    rep = load_replication(method)
    cells = len(rep.arms_at(scale)) * len(rep.seeds[scale])

    script = "#!/bin/bash" + out.split("#!/bin/bash", 1)[1].split("\n# [0]", 1)[0]
    lines = script.splitlines()
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert all(DIRECTIVE.match(line) for line in sbatch), [line for line in sbatch
                                                          if not DIRECTIVE.match(line)]
    directives = {m.group(1): m.group(2) for m in map(DIRECTIVE.match, sbatch) if m}
    keys = ("nodes", "ntasks-per-node", "gpus-per-node", "cpus-per-task", "job-name", "array")
    assert {k: directives[k] for k in keys} == {
        "nodes": "1", "ntasks-per-node": "8", "gpus-per-node": "8", "cpus-per-task": "8",
        "job-name": f"{method}-{scale}", "array": f"0-{cells - 1}%{min(cells, 16)}"}
    assert directives["signal"] == "USR2@300" and "requeue" in directives and directives["time"] == "1440"
    srun = [line for line in lines if line.startswith("srun ")]
    assert len(srun) == 1 and " -m submitit.core._submit " in srun[0], script
    assert lines.index(srun[0]) > max(lines.index(line) for line in sbatch)
    syntax = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert syntax.returncode == 0, syntax.stderr

    # the resolved config of every cell follows: the paper's settings, the model and the data as given
    blocks = out.split("\n# [")[1:]
    assert len(blocks) == cells and out.count(f"# overrides: scale={scale} ") == cells
    for block in blocks:
        cfg = yaml.safe_load(block.split("\n", 2)[2])
        assert ((cfg["scale"], cfg["model"]["path"], cfg["method"]["paper_data"])
                == ("paper", str(model), str(data)))
        assert cfg["trainer"]["accelerator"] == "gpu" and cfg["trainer"]["devices"] == 8
        assert cfg["trainer"]["precision"] == "bf16" and cfg["engine"]["name"] == "vllm"
        if cfg["env"]["name"].startswith("paper_math"):  # the environment reads the papers' data itself
            assert cfg["env"]["path"] == str(data)
        elif FIRST_DATA_SET[(method, scale)] is not None:
            # the method checks it (the suite has no environment for it yet)
            assert cfg["method"]["paper_datasets"]
    # nothing submitted
    assert not (tmp_path / "work" / "launches").exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("method, scale", PAPER_SCALES)
def test_without_the_data_the_dry_run_is_refused_naming_it(method, scale, staged, tmp_path, capsys):
    model, _ = staged
    empty = tmp_path / "data"
    empty.mkdir()
    first_arm = load_replication(method).arms_at(scale)[0]  # one cell is enough to be refused
    rc = main([*args(method, scale, model, empty, tmp_path), "--seeds", "0", "--arms", first_arm])
    err = capsys.readouterr().err
    if FIRST_DATA_SET[(method, scale)] is None:  # nothing to stage: an empty data folder changes nothing
        assert rc == 0, err
        return
    assert rc == 2 and len(err.splitlines()) == 1, err
    # refused for its env
    if UNREGISTERED_ENV.get((method, scale)) not in (None, *ENVS) or (method, scale) in NOT_READY_ENV:
        assert err.startswith("error: cell ") and FIRST_DATA_SET[(method, scale)] in err, err
        return
    assert (err.startswith("error: cell ") and FIRST_DATA_SET[(method, scale)] in err
            and str(empty) in err), err
    assert not (tmp_path / "work").exists()
