import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# parallel test workers (pytest-xdist), 1 without
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if WORKERS > 1:  # they share the cores: each gets its share
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // WORKERS))


@pytest.fixture(scope="session")
def wall_budget():
    """A wall-clock budget in seconds, stated for a machine of the test's own, as it holds here: times
    the parallel test workers sharing the cores."""
    return lambda seconds: seconds * WORKERS


@pytest.fixture()
def own_sandbox_uids(monkeypatch):
    """The test's sandboxes run as uids no other sandbox uses (a block outside UID_RANGE per test
    worker), so "no sandbox process is left" is about the test's own runs while parallel test workers
    run sandboxes of their own."""
    from envs.api.sandbox import uids

    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)
    first = uids.UID_RANGE[1] + 1000 * worker
    monkeypatch.setattr(uids, "UID_RANGE", (first, first + 1000))


@pytest.fixture(scope="session")
def tiny_parts(tmp_path_factory):
    """An untrained tiny model + tokenizer for the arith env (no SFT: fast)."""
    from common.config import ModelConfig, SFTConfig
    from common.warmstart import warm_started_base
    from envs.testbeds.arith import ArithConfig, ArithEnv

    torch.set_num_threads(1)
    env = ArithEnv(ArithConfig(train_size=64, heldout_size=16, max_value=20))
    cfg = ModelConfig()
    tok, base, _ = warm_started_base(cfg, SFTConfig(enabled=False), env, 0,
                                     str(tmp_path_factory.mktemp("work")))
    return env, cfg, tok, base


# ---- parallel test workers (pytest-xdist, `make test`: -n $(TEST_WORKERS) --dist loadgroup) --------------
# Tests that share something outside their tmp_path run in one worker, one after another:
# - slurm: the session's single-node SLURM cluster (one slurmctld per machine);
# - vllm: the vLLM CPU engine (a process group, large memory) and its `make` run;
# - ranks: runs of several processes (Lightning DDP with gloo, torch.distributed), which pick
#   free ports and start two ranks each; two of them at once would oversubscribe two cores 4:2.
_GROUPS = {"tests/slurm/": "slurm", "tests/common/test_vllm_engine.py": "vllm",
           "tests/e2e/test_ddp.py": "ranks", "tests/common/test_export_base.py": "ranks"}


@pytest.hookimpl(trylast=True)  # after xdist's own suffixing (a no-op on pytest 9.2)
def pytest_collection_modifyitems(config, items):
    root = config.rootpath
    for item in items:
        rel = item.path.relative_to(root).as_posix() if item.path.is_relative_to(root) else ""
        group = next((g for prefix, g in _GROUPS.items() if rel.startswith(prefix)), None)
        if group is None and (item.get_closest_marker("slurm") or item.get_closest_marker("vllm")):
            group = "slurm" if item.get_closest_marker("slurm") else "vllm"
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
    if getattr(config.option, "loadgroup", False):  # set on an xdist worker under --dist loadgroup
        for item in items:
            _suffix_group(item)


def _suffix_group(item) -> None:
    """What xdist's worker does for `--dist loadgroup` (the scheduler keeps the tests whose id ends in
    `@<group>` on one worker), done here because it no longer takes effect: xdist 3.8 writes
    `item._nodeid`, which pytest 9.2 no longer reads (the id lives in `item._id`), so every group was
    split over the workers (the SLURM tests ran on both, and one worker's cluster teardown killed the
    other's requeued job). A no-op where xdist's own suffix took effect."""
    names = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if not names:
        return
    suffix = "@" + "_".join(names)
    if item.nodeid.endswith(suffix):
        return
    if hasattr(item, "_id"):  # pytest >= 9.2
        from _pytest.nodeid import coerce_node_id

        item._id = coerce_node_id(item.nodeid + suffix)
    else:
        item._nodeid = item.nodeid + suffix
