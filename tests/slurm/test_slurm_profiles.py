"""Cluster profiles: shipped files, inheritance, REPLICATE_SLURM_* overrides, checks."""

import re
from pathlib import Path

import pytest

from slurm.profiles import available_profiles, env_overrides, load_profile
from slurm.sbatch import JobShape, make_executor, sbatch_script


def test_shipped_profiles_load():
    assert {"local", "slurm", "slurm-gpu"} <= set(available_profiles())
    local = load_profile("local")
    assert (local.partition, local.gpus_per_node, local.cpus_per_task) == ("debug", 0, 1)
    gpu = load_profile("slurm-gpu")
    assert gpu.gpus_per_node == 8 and gpu.time_min == 1440
    assert gpu.max_requeues == load_profile("slurm").max_requeues  # inherited through `base: slurm`
    assert load_profile(None).name == "slurm"


def test_environment_overrides_are_typed_yaml():
    env = {"REPLICATE_SLURM_PARTITION": "long", "REPLICATE_SLURM_TIME_MIN": "240",
           "REPLICATE_SLURM_SETUP": "[module load cuda, source .venv/bin/activate]",
           "REPLICATE_SLURM_SBATCH": "{constraint: a100}", "REPLICATE_SLURM_ACCOUNT": "null"}
    p = load_profile("slurm-gpu", environ=env)
    assert p.partition == "long" and p.time_min == 240 and p.account is None
    assert p.setup == ["module load cuda", "source .venv/bin/activate"]
    assert p.sbatch == {"constraint": "a100"}
    setup = load_profile("slurm", environ={"REPLICATE_SLURM_SETUP": "module load x"}).setup
    assert setup == ["module load x"]


def test_unknown_or_invalid_settings_are_errors(tmp_path):
    with pytest.raises(ValueError, match="REPLICATE_SLURM_PARTITON"):
        env_overrides({"REPLICATE_SLURM_PARTITON": "gpu"})
    with pytest.raises(ValueError, match="unknown cluster profile 'nope'"):
        load_profile("nope")
    with pytest.raises(ValueError, match="gpus_per_node must be"):
        load_profile("slurm", environ={"REPLICATE_SLURM_GPUS_PER_NODE": "-1"})
    with pytest.raises(ValueError, match="signal_delay_s"):
        load_profile("local", {"signal_delay_s": 3600})
    bad = tmp_path / "site.yaml"
    bad.write_text("base: slurm\npartitions: gpu\n")
    with pytest.raises(ValueError, match="unknown field"):
        load_profile(str(bad))


def test_profile_file_with_base(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text("base: slurm-gpu\npartition: a100\naccount: my-lab\ngpus_per_node: 4\n")
    p = load_profile(str(site))
    assert (p.partition, p.account, p.gpus_per_node, p.time_min) == ("a100", "my-lab", 4, 1440)
    assert p.name == str(site)


def _script(profile, nodes=1, tasks=8):
    """The batch script a launch of one array of 3 cells would submit (built offline, as a dry run does)."""
    shape = JobShape(nodes, tasks, profile.gpus_per_node)
    executor = make_executor(Path("/tmp/launches/x/%j"), profile, shape, "grpo-paper", "/work", offline=True)
    return sbatch_script(executor, 3)


def test_a_profile_with_gpus_must_name_a_partition():
    gpu = load_profile("slurm-gpu")
    (error,) = gpu.submit_errors()
    assert ("profile slurm-gpu requests 8 GPU(s) per node but names no partition: set partition: in the "
            "profile or REPLICATE_SLURM_PARTITION=") in error and "\n" not in error
    assert load_profile("slurm-gpu", {"partition": "gpu"}).submit_errors() == []
    assert load_profile("slurm").submit_errors() == []  # no GPUs: the default partition is fine


def test_gpus_are_asked_for_one_way_gpus_per_node_or_gres():
    default = _script(load_profile("slurm-gpu", {"partition": "gpu"}))
    assert "#SBATCH --gpus-per-node=8" in default and "--gres" not in default
    gres = _script(load_profile("slurm-gpu", {"partition": "gpu", "gpu_request": "gres"}))
    assert "#SBATCH --gres=gpu:8" in gres and "gpus-per-node" not in gres
    assert "#SBATCH --ntasks-per-node=8" in gres  # still one task per GPU
    with pytest.raises(ValueError, match=r"gpu_request must be one of \['gpus-per-node', 'gres'\]"):
        load_profile("slurm-gpu", {"gpu_request": "gpus"})
    with pytest.raises(ValueError, match="ask for the GPUs one way"):
        load_profile("slurm-gpu", {"gpu_request": "gres", "sbatch": {"gpus-per-node": 8}})


def test_whole_node_memory():
    gpu = load_profile("slurm-gpu", {"partition": "gpu"})
    assert gpu.mem_gb == "node" and "all memory of each node" in gpu.describe()
    assert "#SBATCH --mem=0\n" in _script(gpu) and "480G" not in _script(gpu)
    assert "#SBATCH --mem=16G\n" in _script(load_profile("slurm"), tasks=1)
    assert load_profile("slurm", environ={"REPLICATE_SLURM_MEM_GB": "node"}).whole_node_memory
    for bad in ("all", 0, True):
        with pytest.raises(ValueError, match="mem_gb must be a number > 0 or 'node'"):
            load_profile("slurm", {"mem_gb": bad})


def test_current_nccl_variable_names():
    """NCCL_ASYNC_ERROR_HANDLING is PyTorch's deprecated name (a warning in every rank's log)."""
    old = re.compile(r"(?<![A-Z_])NCCL_(ASYNC_ERROR_HANDLING|BLOCKING_WAIT|DESYNC_DEBUG)")
    for name in available_profiles():
        assert not [line for line in load_profile(name).setup if old.search(line)], name
    assert "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1" in load_profile("slurm-gpu").setup
    with pytest.raises(ValueError, match="NCCL_ASYNC_ERROR_HANDLING is PyTorch's old name; use "
                                         "TORCH_NCCL_ASYNC_ERROR_HANDLING"):
        load_profile("slurm", {"setup": ["export NCCL_ASYNC_ERROR_HANDLING=1"]})
