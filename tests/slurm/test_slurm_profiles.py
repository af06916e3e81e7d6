"""Cluster profiles: shipped files, inheritance, REPLICATE_SLURM_* overrides, checks."""

import pytest

from slurm.profiles import available_profiles, env_overrides, load_profile


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
