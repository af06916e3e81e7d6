"""What the Makefile hands the shell (issue 34): booleans mean what they say, a value that would not stay
one argument stops make with one line before any command runs; ARGS may not move a cell (seed=, arm=,
method=, scale=); a start leaves no empty Hydra folder. `make -n` prints the commands without running them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="GNU make is not installed")


def make_n(target: str, *variables: str) -> subprocess.CompletedProcess[str]:
    """`make -n <target> VAR=value ...` in the repository (`-o setup`: nothing installed)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    return subprocess.run(["make", "-n", "-o", "setup", f"PY={sys.executable}", target, *variables], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)


def flags(*variables: str, target: str = "replicate-grpo") -> set[str]:
    """The --options of the command `make <target>` would run."""
    proc = make_n(target, *variables)
    assert proc.returncode == 0, proc.stderr
    return {word for word in proc.stdout.split() if word.startswith("--")}


def refusal(*variables: str, target: str = "replicate-grpo") -> str:
    """make's one line when it refuses the variables (nothing printed to run)."""
    proc = make_n(target, *variables)
    assert proc.returncode != 0 and proc.stdout == "", proc.stdout
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr.strip()


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("yes", True), ("0", False),
                                       ("false", False), ("no", False), ("", False)])
def test_force_and_dry_run_mean_what_they_say(value, on):
    """FORCE=0 forced and DRY_RUN=0 was a dry run."""
    assert ("--force" in flags(f"FORCE={value}")) == on
    assert ("--dry-run" in flags(f"DRY_RUN={value}")) == on
    assert ("--dry-run" in flags(f"DRY_RUN={value}", target="compare")) == on


@pytest.mark.parametrize("value, wait", [("1", True), ("yes", True), ("0", False), ("no", False),
                                         ("", False)])
def test_wait(value, wait):
    assert ("--no-wait" not in flags("CLUSTER=slurm", f"WAIT={value}")) == wait
    assert "--no-wait" not in flags("CLUSTER=slurm")  # WAIT=1 by default


@pytest.mark.parametrize("variable", ["FORCE=2", "DRY_RUN=True", "WAIT=on", "VLLM=y", "FORCE=1 1"])
def test_any_other_boolean_value_is_refused_in_one_line(variable):
    name, value = variable.split("=")
    line = refusal(variable)
    assert line.startswith("Makefile:") and f"*** {name}={value} is not a boolean: use 1, true or yes" in line


@pytest.mark.parametrize("variable, message", [
    ("SEEDS=0' --x '", "SEEDS=0' --x ' is not a comma-separated list of seeds, e.g. SEEDS=0,1,2"),
    ("SEEDS=0;1", "SEEDS=0;1 is not a comma-separated list of seeds"),
    ("SCALE=smoke #",
     "SCALE=smoke # is not one word of letters, digits and _ - . (it reaches the shell unquoted)"),
    ("PROFILE=a;b", "PROFILE=a;b is not one word"),
    ("GRID=trainer.lr=1' --dry-run '", "GRID holds a single quote: it cannot reach the shell intact"),
])
def test_a_value_that_would_not_stay_one_argument_is_refused_before_the_shell(variable, message):
    """A quote in SEEDS cut --dry-run off the command line, and the real replication ran."""
    assert message in refusal(variable, "DRY_RUN=1")


def test_seeds_and_the_other_values_reach_the_command_as_given():
    proc = make_n("replicate-grpo", "SEEDS=0,1,2", "SCALE=paper_v2", "PROFILE=slurm-gpu")
    assert ("--seeds '0,1,2'" in proc.stdout and "--scale paper_v2" in proc.stdout
            and "--profile slurm-gpu" in proc.stdout)


def test_args_that_move_a_cell_are_refused_through_make(tmp_path):
    """ARGS=seed=7 ran seed 7 while the progress line showed seed 0; the real make, a dry run."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "-o", "setup", f"PY={sys.executable}", "replicate-grpo", "SCALE=smoke",
                           "DRY_RUN=1",
                           f"ARGS=seed=7 out_dir={tmp_path / 'out'} work_dir={tmp_path / 'work'}"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0 and proc.stdout == ""
    assert ("error: seed=7 in the extra overrides (ARGS) is refused: a cell's seed is set by SEEDS (--seeds)"
            in proc.stderr)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("variable, message", [
    ("SEED=3", "SEED is not a variable of this Makefile; did you mean SEEDS?"),
    ("scale=smoke", "scale is not a variable of this Makefile; did you mean SCALE?"),
    ("Seeds=1", "Seeds is not a variable of this Makefile; did you mean SEEDS?"),
    ("dry_run=1", "dry_run is not a variable of this Makefile; did you mean DRY_RUN?"),
    ("DRYRUN=1", "DRYRUN is not a variable of this Makefile; did you mean DRY_RUN?"),
    ("XYZZY=1", "XYZZY is not a variable of this Makefile; its variables are SCALE CLUSTER SEEDS"),
])
def test_a_variable_the_makefile_does_not_know_is_refused_naming_the_nearest(variable, message):
    """`make replicate-grpo scale=smoke` ran the 35-minute cpu scale: make takes any variable silently."""
    line = refusal(variable, "SCALE=smoke")
    assert line.startswith("Makefile:") and f"*** {message}" in line
    assert refusal(variable, target="help") == line  # before any target, `help` included


def test_every_variable_of_the_makefile_is_known_and_the_environments_pass():
    """The variables the Makefile reads (`NAME ?=` lines) are the ones it accepts; make's own
    (SHELL given on the command line) and the environment's (scale=smoke exported) are not checked."""
    text = (ROOT / "Makefile").read_text()
    declared = {line.split("?=")[0].strip() for line in text.splitlines()
                if "?=" in line and not line.startswith(("export", "#"))}
    assert declared, "no `VARIABLE ?=` lines found in the Makefile"
    proc = make_n("replicate-grpo", *(f"{v}=" for v in sorted(declared) if v != "SCALE"), "SHELL=/bin/bash")
    assert proc.returncode == 0, proc.stderr
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "-n", "-o", "setup", f"PY={sys.executable}", "replicate-grpo"], cwd=ROOT,
                          env={**env, "scale": "smoke"}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "--scale cpu" in proc.stdout, proc.stderr


@pytest.mark.parametrize("scale, ok", [("smoke", True), ("cpu", True), ("small", True), ("paper", True),
                                       ("paper_v2", True), ("tiny", False), ("Smoke", False)])
def test_scale_is_one_of_the_scales(scale, ok):
    if ok:
        assert f"--scale {scale}" in make_n("replicate-grpo", f"SCALE={scale}").stdout
    else:
        assert (f"*** SCALE={scale} is not a scale: use smoke, cpu, small, paper or a method's paper_<setup>"
                in refusal(f"SCALE={scale}"))


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_verbose_reaches_the_replication(value, on):
    """VERBOSE=1: a SLURM dry run prints the whole sbatch script and every cell's config."""
    assert ("--verbose" in flags(f"VERBOSE={value}", "CLUSTER=slurm", "DRY_RUN=1")) == on
    assert "--verbose" not in flags()

def test_evaluate_hands_the_run_or_the_adapter_and_the_split_to_the_module():
    run = make_n("evaluate", "RUN=runs/smoke/grpo/arith/grpo/seed-0", "SPLIT=dev").stdout
    assert "-m experiments.evaluate --split dev" in run and "--run 'runs/smoke/grpo/arith/grpo/seed-0'" in run
    adapter = make_n("evaluate", "ADAPTER=my adapters", "ENV=toolhops", "SCALE=smoke", "METHOD=sharp").stdout
    assert ("--adapter 'my adapters' method=sharp scale=smoke 'env=toolhops'" in adapter
            and "--split" not in adapter)
    assert "ENV holds a single quote" in refusal("ENV=a'b", target="evaluate")
    # a shell's own ENV (a file sh reads) is no environment name: only make's command line sets it
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "-n", "-o", "setup", f"PY={sys.executable}", "evaluate", "ADAPTER=x"],
                          cwd=ROOT, env={**env, "ENV": "/etc/it's-profile"}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0 and "env=" not in proc.stdout, proc.stderr
    assert "SPLIT=a b is not one word" in refusal("SPLIT=a b", target="evaluate")


@pytest.mark.parametrize("value, on", [("1", True), ("yes", True), ("0", False), ("", False)])
def test_setup_installs_the_loggers_extra_only_when_asked(value, on):
    """`make -n setup`: the commands printed, nothing installed."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    proc = subprocess.run(["make", "-n", f"PY={sys.executable}", "setup", f"LOGGERS={value}"], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert ("-e '.[loggers]'" in proc.stdout) == on
    assert "LOGGERS=on is not a boolean" in refusal("LOGGERS=on")
