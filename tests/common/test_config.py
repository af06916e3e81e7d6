"""Bad configs fail before anything runs, with a message that says how to fix them."""

import json
import random
import re
import sys
from pathlib import Path

import pytest

from common.fit import resolve
from experiments.replicate import cell_config, plan, validate_cells
from experiments.run import arm_overrides, compose, replication_arms, with_arm
from replications import METHODS


def resolved(*overrides):
    return resolve(compose("grpo", ["scale=smoke", *overrides]), METHODS)


def test_default_smoke_config_resolves():
    r = resolved()
    assert r.env.name == "arith" and r.method.cfg.estimator == "grpo"
    assert str(r.run_dir.path).endswith("grpo/arith/default/seed-0")


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["method.name=nosuch"], "unknown method method.name='nosuch'; choose one of"),
        (["env.name=nosuch"], "unknown environment env.name='nosuch'; choose one of"),
        (["trainer.kl.coef=0.1", "trainer.kl.placement=loss", "trainer.kl.estimator=k4"],
         "unknown KL estimator"),
        (["trainer.kl.coef=0.1"], "has no effect with trainer.kl.placement=none"),
        (["trainer.kl.placement=loss"], "has no effect with trainer.kl.coef=0"),
        (["engine.kv_cache_memory_bytes=1000"], "has no effect with engine=hf"),
        (["eval.temperature=0"], "k identical greedy samples"),
        (["+env.colour=blue"], "unknown env setting"),
        (["+method.lambda_s=0.9"], "unknown method setting"),
        (["method.estimator=ppo"], "unknown advantage estimator"),
        (["model.kind=pretrained"], "needs model.path"),
        (["+model.roles.nobody=policy"], "unknown role"),
    ],
)
def test_bad_config_fails_with_a_fix(overrides, message):
    with pytest.raises(ValueError, match=message):
        resolved(*overrides)


def test_unknown_top_level_key_fails_at_compose():
    with pytest.raises(Exception, match="trainr"):
        compose("grpo", ["scale=smoke", "+trainr.steps=3"])


def test_unknown_method_fails_before_compose():
    with pytest.raises(ValueError, match="unknown method 'nosuch'"):
        compose("nosuch")


def test_replication_validates_every_cell_before_launch(tmp_path):
    cells = plan("grpo", "smoke", seeds=[0, 1],
                 extra_overrides=(f"out_dir={tmp_path}", "trainer.kl.coef=0.5"))
    with pytest.raises(ValueError, match="(?s)cell grpo/arith/grpo/seed-0.*no effect"):
        validate_cells(cells)
    assert not any(tmp_path.iterdir())  # nothing ran


def test_paper_scale_refuses_without_local_model(tmp_path):
    cells = plan("grpo", "paper", seeds=[0], extra_overrides=(f"out_dir={tmp_path}",))
    with pytest.raises(ValueError, match="needs model.path"):
        validate_cells(cells)


# ---- every bad setting refused before anything is written (issue 24) ------------------------------
ISSUE_PROBES = [  # what the adversarial pass found accepted: each through the command line
    (["eval.k=0"], "eval.k must be >= 1"),
    (["trainer.max_new_tokens=0"], "trainer.max_new_tokens must be >= 1"),
    (["model.max_length=16"], "model.max_length=16 leaves no room for a prompt"),  # smoke: max_new_tokens=24
    (["trainer.lr=-1"], "trainer.lr must be > 0"),
    (["env.train_size=0"], "env.train_size must be >= 1"),
    (["trainer.accelerator=gpu"], "trainer.accelerator=gpu but this machine has no GPU"),
    (["engine.gpu_memory_utilization=0.9"], "engine.gpu_memory_utilization=0.9 has no effect with engine=hf"),
    (["engine.enforce_eager=false"], "engine.enforce_eager=False has no effect with engine=hf"),
    (["engine.kv_cache_memory_bytes=1000"], "engine.kv_cache_memory_bytes=1000 has no effect with engine=hf"),
    (["engine.sync=full"], "engine.sync=full has no effect with engine=hf"),
    (["trainer.lr=nan"], "trainer.lr must be > 0 and finite; got nan"),
    (["trainer.temperature=nan"], "trainer.temperature must be > 0 and finite"),
    (["eval.top_p=2"], r"eval.top_p must be in \(0, 1\]; got 2"),
    (["trainer.clip_low=-0.1"], r"trainer.clip_low must be in \[0, 1\)"),
    (["trainer.devices=0"], "trainer.devices and trainer.num_nodes must be >= 1"),
    (["model.lora_rank=0"], "model.lora_rank must be >= 1"),
    (["trainer.kl.coef=0.1", "trainer.kl.placement=loss", "trainer.kl.estimator=k1"],
     r"k1 in the loss has zero expected gradient; use k3 \(gradient of KL\(ref\|\|pi\)\) or k2"),
    (["arm=nosuch"], "grpo has no arm 'nosuch'; its arms are grpo"),
]
RANGES = [  # every other range and combination, through resolve()
    (["trainer.lr=inf"], "trainer.lr must be > 0 and finite; got inf"),
    (["env.heldout_size=0"], "env.heldout_size must be >= 1"),
    (["env.demo_size=-1"], "env.demo_size must be >= 0"),
    (["trainer.accelerator=gpuu"], "trainer.accelerator must be one of"),
    (["trainer.temperature=0"], "trainer.temperature must be > 0"),
    (["eval.temperature=nan"], "eval.temperature must be >= 0 and finite"),
    (["eval.temperature=-1"], "eval.temperature must be >= 0"),
    (["eval.top_p=0"], r"eval.top_p must be in \(0, 1\]"),
    (["trainer.clip_low=1"], r"trainer.clip_low must be in \[0, 1\)"),
    (["trainer.clip_high=-0.1"], "trainer.clip_high must be >= 0"),
    (["trainer.num_nodes=0"], "trainer.devices and trainer.num_nodes must be >= 1"),
    (["model.lora_alpha=0"], "model.lora_alpha must be > 0"),
    (["model.lora_dropout=1"], r"model.lora_dropout must be in \[0, 1\)"),
    (["model.num_kv_heads=3"], "must be a multiple of model.num_kv_heads=3"),
    (["trainer.max_grad_norm=0"], "trainer.max_grad_norm must be > 0"),
    (["trainer.weight_decay=-0.1"], "trainer.weight_decay must be >= 0"),
    (["trainer.micro_batch_rows=-1"], "trainer.micro_batch_rows must be >= 0"),
    (["trainer.checkpoint_every=-1"], "trainer.checkpoint_every must be >= 0"),
    (["trainer.threads=-1"], "trainer.threads must be >= 0"),
    (["sft.steps=0"], "sft.steps must be >= 1 with sft.enabled=true"),
    (["sft.batch_size=0"], "sft.batch_size must be >= 1"),
    (["sft.demos=0"], "sft.demos must be >= 1"),
    (["sft.lr=0"], "sft.lr must be > 0"),
    (["eval.max_tasks=-1"], "eval.max_tasks must be >= 0"),
    (["eval.every=-1"], "eval.every must be >= 0"),
    (["trainer.kl.coef=-0.1", "trainer.kl.placement=loss"], "trainer.kl.coef must be >= 0"),
    (["engine=vllm", "engine.gpu_memory_utilization=0"],
     r"engine.gpu_memory_utilization must be in \(0, 1\]"),
]


@pytest.fixture()
def no_gpu(monkeypatch):
    """This test's machine has no GPU, whatever machine runs it."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def _id(x):
    return " ".join(x) if isinstance(x, list) else ""


@pytest.mark.parametrize("overrides, message", ISSUE_PROBES, ids=_id)
def test_each_bad_setting_is_one_line_before_any_run_folder(overrides, message, tmp_path, capsys, monkeypatch,
                                                            no_gpu):
    """Through the command line (`python -m experiments.run ...`): one line on stderr, exit 2, nothing in
    out_dir."""
    from experiments.run import main

    out, work = tmp_path / "out", tmp_path / "work"
    monkeypatch.setattr(sys, "argv", ["experiments.run"])
    with pytest.raises(SystemExit) as exit_:
        main(["method=grpo", "scale=smoke", f"out_dir={out}", f"work_dir={work}", "progress=false",
              *overrides])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert not out.exists() or not any(out.iterdir())  # no run folder


@pytest.mark.parametrize("overrides, message", ISSUE_PROBES[:-1] + RANGES, ids=_id)
def test_each_bad_setting_fails_in_resolve_with_one_line(overrides, message, no_gpu):
    """`resolve()` (what replicate's cells and `fit` call) refuses the same settings; the machine's own
    check apart."""
    from common.config import check_machine

    with pytest.raises(ValueError, match=message) as error:
        cfg = compose("grpo", ["scale=smoke", *overrides])
        resolve(cfg, METHODS)
        check_machine(cfg)
    assert len(str(error.value).splitlines()) == 1


def test_several_bad_settings_are_all_listed_one_line_each():
    with pytest.raises(ValueError) as error:
        resolved("eval.k=0", "trainer.lr=-1", "eval.top_p=2")
    lines = str(error.value).splitlines()
    assert lines[0] == "invalid configuration:" and len(lines) == 4
    assert [x.split()[1] for x in lines[1:]] == ["trainer.lr", "eval.k", "eval.top_p"]


# ---- issue 34: seeds, folders and sizes that got through ----------------------------------------------
SETTINGS_34 = [  # each crashed after the run folder existed, ran into a folder paper/ rejects, or started
    (["seed=99999999999999999999999"],
     r"^error: invalid configuration: seed must be in \[0, 2\^63\) .*got 99999999999999999999999$"),
    (["seed=-1"], r"seed must be in \[0, 2\^63\) \(a non-negative 64-bit integer\); got -1$"),
    (["out_dir="], "out_dir is empty: the run would write into the current folder .*; set out_dir=results"),
    (["trainer.group_size=1000000"], r"trainer.group_size=1000000 is over its bound 4096 .*; lower it$"),
    (["eval.k=1000000000"], "eval.k=1000000000 is over its bound 4096"),
    (["trainer.steps=10000000000000"], "trainer.steps=10000000000000 is over its bound 1000000"),
]
SEEDS_AND_SIZES = [  # the same checks on the other seeds, work_dir, and the sizes' product
    (["sft.seed=-3"], r"sft.seed must be in \[0, 2\^63\)"),
    (["model.init_seed=9223372036854775808"], r"model.init_seed must be in \[0, 2\^63\)"),
    (["work_dir=' '"], "work_dir is empty: .*; set work_dir=.cache"),
    (["trainer.steps=100000", "trainer.tasks_per_step=1000", "trainer.group_size=64"],
     r"trainer.steps x tasks_per_step x group_size = 100000 x 1000 x 64 = 6.4e\+09 training episodes, "
     r"over the 1e\+09"),
]


@pytest.mark.parametrize("overrides, message", SETTINGS_34, ids=_id)
def test_settings_that_got_through_are_one_line_before_any_folder(overrides, message, tmp_path, capsys,
                                                                 monkeypatch, no_gpu):
    """Through the command line, run from a folder of the test's own: one line, exit 2, nothing written
    anywhere (out_dir= would have written the run into the current folder, the repository root)."""
    from experiments.run import main

    out, work = tmp_path / "out", tmp_path / "work"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["experiments.run"])
    with pytest.raises(SystemExit) as exit_:
        main(["method=grpo", "scale=smoke", f"out_dir={out}", f"work_dir={work}", "progress=false",
              *overrides])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    assert re.search(message, err), err
    assert not any(tmp_path.rglob("seed-*")), sorted(tmp_path.rglob("*"))


def test_a_start_leaves_no_hydra_folder(tmp_path, capsys, monkeypatch):
    """Issue 34: every start of python -m experiments.run left an empty <work_dir>/hydra/<date>/<time>/."""
    from experiments.run import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", ["experiments.run"])
    with pytest.raises(SystemExit):
        main(["method=grpo", "scale=smoke", f"out_dir={tmp_path / 'out'}", f"work_dir={tmp_path / 'work'}",
              "eval.k=0"])
    assert "eval.k must be >= 1" in capsys.readouterr().err
    assert not any(tmp_path.iterdir()), sorted(tmp_path.rglob("*"))


@pytest.mark.parametrize("overrides, message", SETTINGS_34 + SEEDS_AND_SIZES, ids=_id)
def test_seeds_folders_and_sizes_are_checked_in_resolve(overrides, message):
    with pytest.raises(ValueError) as error:
        resolved(*overrides)
    assert len(str(error.value).splitlines()) == 1
    assert re.search(message.removeprefix("^error: "), str(error.value)), str(error.value)


def test_the_largest_seed_and_sizes_within_their_bounds_pass():
    from common.config import MAX_EPISODES, SEED_LIMIT, SIZE_LIMITS, run_config_errors

    cfg = compose("grpo", ["scale=smoke", f"seed={SEED_LIMIT - 1}",
                           f"trainer.group_size={SIZE_LIMITS['trainer.group_size']}",
                           f"eval.k={SIZE_LIMITS['eval.k']}", "trainer.tasks_per_step=1",
                           f"trainer.steps={MAX_EPISODES // SIZE_LIMITS['trainer.group_size']}"])
    assert run_config_errors(cfg) == []


def test_the_machine_check_is_separate_from_the_config_check(no_gpu):
    """A cluster launch checks its cells on a login node without GPUs: only the run itself checks the
    machine."""
    from common.config import check_machine

    cfg = compose("grpo", ["scale=smoke", "trainer.accelerator=gpu"])
    resolve(cfg, METHODS)  # the config is fine
    with pytest.raises(ValueError, match="this machine has no GPU"):
        check_machine(cfg)


def test_context_length_is_checked_once_the_tokenizer_exists():
    """`model.max_length` must hold the longest first observation plus one turn (here one token per
    character)."""
    env = resolved().env
    longest = max(len(env.new_episode(json.loads(row["task"]), random.Random(0)).start().text)
                  for split in ("train", "heldout") for row in env.task_set()[split])
    env.check_context(len, max_length=longest + 24, max_new_tokens=24)
    with pytest.raises(ValueError, match=f"longest prompt is {longest} tokens .* "
                                         f"raise model.max_length to at least {longest + 24}"):
        env.check_context(len, max_length=longest + 23, max_new_tokens=24)


def test_every_committed_config_passes_the_checks():
    """Every scale of every method, and every arm of its replication (at smoke, or at the first scale it
    runs at: `arm_scales`), composes without an error."""
    from common.config import run_config_errors
    from experiments.replicate import load_replication

    for method in METHODS:
        scales = sorted(p.stem for p in (Path("replications") / method / "conf" / "scale").glob("*.yaml"))
        arms = replication_arms(method)
        rep = load_replication(method)
        at = {arm: "smoke" if arm in rep.arms_at("smoke")
              else next(s for s in scales if arm in rep.arms_at(s)) for arm in arms}
        first = {scale: next((a for a in arms if a in rep.arms_at(scale)), "default") for scale in scales}
        cells = [(scale, first[scale]) for scale in scales] + [(at[arm], arm) for arm in arms]
        for scale, arm in cells:
            errors = [e for e in run_config_errors(compose(method, [f"scale={scale}", f"arm={arm}"]))
                      if "needs model.path" not in e]
            assert not errors, (method, scale, arm, errors)


# ---- arm= applies the arm's settings -----------------------------------------------------------
def test_arm_applies_its_settings_from_the_replication():
    cfg = compose("sharp", ["scale=smoke", "arm=sharp-loo-k2"])
    assert ((cfg.arm, cfg.method["credit"], cfg.env["k"], cfg.env["tag"])
            == ("sharp-loo-k2", "loo", 2, "toolplan-k2"))
    cfg = compose("sharp", ["scale=smoke", "arm=sharp-exact-k4", "env.k=3"])  # the user's own overrides win
    assert (cfg.method["credit"], cfg.env["k"], cfg.env["tag"]) == ("exact", 3, "toolplan-k4")
    # the RunConfig default, no such arm: allowed
    assert compose("grpo", ["scale=smoke", "arm=default"]).arm == "default"
    with pytest.raises(ValueError, match="sharp has no arm 'sharp-loo'; its arms are grpo-k2, sharp-loo-k2"):
        compose("sharp", ["scale=smoke", "arm=sharp-loo"])


def test_replicate_plan_composes_as_before():
    """plan() passes the arm's overrides explicitly and arm=<name>: they are not applied twice."""
    assert arm_overrides("sharp", ["arm=grpo-k4", *replication_arms("sharp")["grpo-k4"]]) == []
    for cell in plan("sharp", "smoke", arms=["sharp-loo-k2", "grpo-k4"]):
        cfg = cell_config(cell)
        explicit = [o for o in cell.overrides if not o.startswith("arm=")]
        assert cfg == compose("sharp", [*explicit, f"arm={cell.arm}"]) and cfg.arm == cell.arm


def test_arm_settings_go_before_the_first_override_on_the_command_line():
    args = ["--cfg", "job", "scale=smoke", "arm=sharp-loo-k2", "seed=3"]
    assert with_arm("sharp", args) == ["--cfg", "job", "method.credit=loo", "env.k=2", "env.tag=toolplan-k2",
                                       "scale=smoke", "arm=sharp-loo-k2", "seed=3"]
    assert with_arm("grpo", ["scale=smoke"]) == ["scale=smoke"]
