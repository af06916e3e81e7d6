"""Audit-labelled train pools of `arith`, `service_desk` and `chain_tasks` (#46, env_pool_with_audit;
envs/testbeds/audit_pool.py): by default every stream is what it was before they existed (digests recorded
from the code before the change), and with defects on, the pool is the default one with labels and defects
added.

A digest is sha256 (16 hex) of the JSON of a split's columns (`id`, `tier`, `task`), or of the transcripts
of the first 20 tasks of a split (each turn: role, observation, new_context, action, reward, success, every
event, info) played by the demonstrator (rng 0) and by the random policy (`random_action`, rng 1), per
episode variant.
"""

from __future__ import annotations

import collections
import json
import random
from typing import Any

import pytest

from envs.api.base import Environment
from envs.api.protocols import AuditLabels
from envs.registry import ENVS
from envs.testbeds.arith import ArithConfig, ArithEnv
from envs.testbeds.chain_tasks import ChainTasksConfig, ChainTasksEnv
from envs.testbeds.service_desk import ServiceDeskConfig, ServiceDeskEnv
from envs.testbeds.terminal.env import TerminalConfig, TerminalEnv
from tests.helpers import digest, split_digests, transcript


def pins(env: Environment, n: int = 20) -> tuple[dict[str, str], dict[str, str]]:
    tasks = env.task_set()
    # whole columns as lists (a datasets Column hashed by its repr would cover its first five rows only)
    splits = split_digests(env)
    plays = {}
    for split in tasks:
        rows = [json.loads(r["task"]) for r in tasks[split].select(range(min(n, len(tasks[split]))))]
        for variant in env.variants():
            for policy, seed, suffix in (("expert", 0, ""), ("random", 1, "/random")):
                rng = random.Random(seed)
                plays[f"{split}/{variant}{suffix}"] = digest([transcript(env, t, rng, variant, policy)
                                                              for t in rows])
    return splits, plays


ARITH_CONF: dict[str, Any] = dict(mode="single", min_ops=2, max_ops=4, max_value=20, demo_shortcut=0.3,
                                  train_size=2000, heldout_size=192, dev_size=64,
                                  demo_size=768)  # common/conf/env/arith.yaml
CHOICE: dict[str, Any] = dict(setting="choice", delays=[0, 8], demo_right_tool=0.5, human_rate=0.0,
                              demo_trap=0.0, demo_repeat=0.0)  # common/conf/env/service_desk_choice.yaml
CHAIN_CONF: dict[str, Any] = dict(busy_rate=0.1, fault_rate=0.0, demo_slip=0.0, slack=3, train_size=1500,
                                  heldout_size=150, dev_size=64)  # common/conf/env/chain_tasks.yaml
# CANOPY's cpu settings (faults, slips) on smaller splits, with a demo split
CHAIN_DEMO: dict[str, Any] = {**CHAIN_CONF, "fault_rate": 0.05, "demo_slip": 0.3, "train_size": 300,
                              "heldout_size": 30, "dev_size": 20, "demo_size": 60}

# recorded before arith and service_desk offered env_pool_with_audit
PINS: dict[str, tuple[Any, dict[str, str], dict[str, str]]] = {
    "arith": (lambda: ArithEnv(ArithConfig()),
              {"train": "8764f37191205754", "heldout": "bd6b6d9d59d3a119", "dev": "1871365f69251e73"},
              {"train/main": "93dff8906a328754", "train/main/random": "009dff558822fe80",
               "heldout/main": "687db889918f6ef9", "heldout/main/random": "18d081f1dd324d90",
               "dev/main": "3d53e317e95b4bab", "dev/main/random": "585c5a3c2e66dc00"}),
    "arith-conf": (lambda: ArithEnv(ArithConfig(**ARITH_CONF)),
                   {"train": "c6f43b9a2fcb042c", "heldout": "8eb38971aecdd5fd", "demo": "c779250528d8d6bb",
                    "dev": "6ec85f925194c846"},
                   {"train/main": "8fc6f8c1981d28d4", "train/main/random": "95a4603871c76bbb",
                    "heldout/main": "6c7757e20e8b6005", "heldout/main/random": "3a0f8615dbce02ff",
                    "demo/main": "30119973e0b3aa95", "demo/main/random": "e8b73e640c356e49",
                    "dev/main": "6896117668a1bc58", "dev/main/random": "ed02c6f88a63f716"}),
    "arith-stepwise": (
        lambda: ArithEnv(ArithConfig(mode="stepwise", max_ops=4, train_size=100, heldout_size=40,
                                     dev_size=20)),
        {"train": "ad7103ce30676f4f", "heldout": "d3bd352408f6f615", "dev": "e388b7f9eba24db8"},
        {"train/main": "589822a77d6d697f", "train/main/random": "61d52ac91bab5de4",
         "heldout/main": "8635791b0eda8553", "heldout/main/random": "db91ef9bdc881797",
         "dev/main": "078514af00731a63", "dev/main/random": "84faaa653812bc66"}),
    "service_desk": (
        lambda: ServiceDeskEnv(ServiceDeskConfig()),
        {"train": "219699684527079c", "heldout": "286f6cba19015b40", "dev": "70cb9e9e5bde556f"},
        {"train/main": "b11eabf55b0c7d76", "train/main/random": "9be25180351d7042",
         "train/probe": "286c174fc3905ccf", "train/probe/random": "8e3ae860c662c82b",
         "heldout/main": "823ae640262836c3", "heldout/main/random": "a13e270f0a5a253e",
         "heldout/probe": "76a729324b48db98", "heldout/probe/random": "506fed2d77edab5b",
         "dev/main": "8751fed3766dc34d", "dev/main/random": "69461944fa55ce6e",
         "dev/probe": "13000565e314300c", "dev/probe/random": "01982ed520b97c3b"}),
    "service_desk-choice": (
        lambda: ServiceDeskEnv(ServiceDeskConfig(**CHOICE)),
        {"train": "abdb7edac8e9bcc1", "heldout": "73863c3ea56c813a", "dev": "5fc820060b86b6cf"},
        # re-pinned when the decision events gained `right` (#39, several orders): the transcripts with that
        # key removed were checked byte-identical to the ones pinned before (observations, rewards, events)
        {"train/main": "1f12694a2f21e6ca", "train/main/random": "c829f25a776c9fdb",
         "heldout/main": "54adb4baa39b0530", "heldout/main/random": "0f951e934d79d0ff",
         "dev/main": "b69fe0d732c72071", "dev/main/random": "cf7dc82e7cf82bed"}),
    # recorded before chain_tasks offered env_pool_with_audit (its split digests are also
    # test_chain_tasks_default_pins.py's, recorded before families)
    "chain_tasks": (
        lambda: ChainTasksEnv(ChainTasksConfig(**CHAIN_CONF)),
        {"train": "2be50d31f47f2fe0", "heldout": "07fbe2f05b05a357", "dev": "5946260760674d7f"},
        {"train/main": "4215ea4ca6a70423", "train/main/random": "fc85b3b3ff03b8db",
         "heldout/main": "b999933369663696", "heldout/main/random": "0716a27a7d9ff435",
         "dev/main": "3beadb980cdfec8a", "dev/main/random": "29efbc7f03ce22ba"}),
    "chain_tasks-demo": (
        lambda: ChainTasksEnv(ChainTasksConfig(**CHAIN_DEMO)),
        {"train": "904173258b9f3e2f", "heldout": "2bde4f6486aa8bf3", "demo": "d4f41a2e5f8256b5",
         "dev": "4527c28db1da8920"},
        {"train/main": "2a3f16caac01f39c", "train/main/random": "84daa92f1dae3ddf",
         "heldout/main": "d16809495fc409a0", "heldout/main/random": "4f228f7ba1777328",
         "demo/main": "fa82203884755c5c", "demo/main/random": "4f4b9bd0020717c5",
         "dev/main": "00b98c91bb756038", "dev/main/random": "4d09a89842c4d1be"}),
}


@pytest.mark.parametrize("name", PINS)
def test_default_streams_observations_and_rewards_are_unchanged(name):
    make, splits, plays = PINS[name]
    assert pins(make()) == (splits, plays)


def test_the_pins_see_a_change():
    """The digests move with one changed task, observation or reward (so the pins above can fail)."""
    env = ArithEnv(ArithConfig())
    task = json.loads(env.task_set()["train"][0]["task"])
    plain = transcript(env, task, random.Random(0), "main", "expert")
    moved = transcript(env, {**task, "start": task["start"] + 1}, random.Random(0), "main", "expert")
    assert digest(plain) != digest(moved)
    assert pins(ArithEnv(ArithConfig(data_seed=1)))[0]["train"] != PINS["arith"][1]["train"]


ARITH_SHARES = dict(share_reject=0.1, share_unsolvable=0.1, share_weak=0.2, share_first_number=0.2)
DESK_SHARES = dict(share_weak=0.2, share_reject=0.1, share_unsolvable=0.1)
CHAIN_SHARES = dict(share_weak=0.3, share_reject=0.1, share_unsolvable=0.15)
SMALL: dict[str, Any] = dict(train_size=200, heldout_size=40, dev_size=20)


def strip(task: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    return {k: v for k, v in task.items() if k not in fields}


@pytest.mark.parametrize("make,shares,fields", [
    (lambda **kw: ArithEnv(ArithConfig(**{**ARITH_CONF, **SMALL, "demo_size": 30, **kw})), ARITH_SHARES,
     ("defect", "verifier", "hide_last")),
    (lambda **kw: ServiceDeskEnv(ServiceDeskConfig(**SMALL, **kw)), DESK_SHARES,
     ("defect", "verifier", "missing")),
    (lambda **kw: ChainTasksEnv(ChainTasksConfig(**{**CHAIN_DEMO, **SMALL, "demo_size": 30, **kw})),
     CHAIN_SHARES, ("defect", "verifier", "missing")),
])
def test_defects_join_the_default_pool_and_change_nothing_else(make, shares, fields):
    default, audited = make(), make(**shares)
    d, a = default.task_set(), audited.task_set()
    assert list(d) == list(a)
    for split in d:
        if split != "train":  # dev, held-out and demo: exactly the default's, unlabelled (clean)
            assert d[split]["task"] == a[split]["task"] and d[split]["tier"] == a[split]["tier"]
    train = [json.loads(t) for t in a["train"]["task"]]
    # the same drawn tasks in the same rows: only the label and the defect's fields added
    assert [strip(t, fields) for t in train] == [json.loads(t) for t in d["train"]["task"]]
    assert d["train"]["tier"] == a["train"]["tier"]
    counts = collections.Counter(audited.defect_of(t) for t in train)
    defective = {k.removeprefix("share_"): round(v * 200) for k, v in shares.items()}
    assert counts == {**defective, "clean": 200 - sum(defective.values())}
    assert all("defect" in t for t in train)  # every train task labelled, clean ones too
    assert not any(set(fields) & set(json.loads(t)) for t in d["train"]["task"])  # the default: no label
    assert all(default.defect_of(json.loads(t)) == "clean" for t in d["train"]["task"])
    # deterministic from data_seed: the same labels again, others with another seed
    assert [json.loads(t) for t in make(**shares).task_set()["train"]["task"]] == train
    other = [json.loads(t)["defect"] for t in make(**shares, data_seed=7).task_set()["train"]["task"]]
    assert other != [t["defect"] for t in train]


def test_every_env_offering_the_pool_has_its_labels():
    for name, cls in ENVS.items():
        assert ("env_pool_with_audit" in cls.offers) == issubclass(cls, AuditLabels), name
    offering = {n for n, c in ENVS.items() if "env_pool_with_audit" in c.offers}
    assert {"terminal", "arith", "service_desk", "chain_tasks"} <= offering
    assert ArithEnv(ArithConfig()).shortcut_defects() == {"weak", "first_number"}
    assert ServiceDeskEnv(ServiceDeskConfig()).shortcut_defects() == {"weak"}
    assert ChainTasksEnv(ChainTasksConfig()).shortcut_defects() == {"weak"}
    assert TerminalEnv(TerminalConfig(backend="sim")).shortcut_defects() == {"leak", "weak", "planted"}


def test_bad_shares_are_refused_in_one_line():
    with pytest.raises(ValueError, match="env.share_"):
        ArithEnv(ArithConfig(share_weak=0.7, share_reject=0.5))
    with pytest.raises(ValueError, match="env.share_"):
        ServiceDeskEnv(ServiceDeskConfig(share_weak=-0.1))
    with pytest.raises(ValueError, match="env.share_"):
        ChainTasksEnv(ChainTasksConfig(share_unsolvable=0.6, share_reject=0.5))
    with pytest.raises(ValueError, match="env.families=false"):
        ChainTasksEnv(ChainTasksConfig(families=True, share_weak=0.1))
    with pytest.raises(ValueError, match="unknown chain_tasks defect"):
        ChainTasksEnv(ChainTasksConfig()).generate_task(random.Random(0), 2, defect="leak")
    with pytest.raises(ValueError, match="env.mode=single"):
        ArithEnv(ArithConfig(mode="stepwise", share_weak=0.1))
    with pytest.raises(ValueError, match="env.setting=classic"):
        ServiceDeskEnv(ServiceDeskConfig(setting="choice", share_reject=0.1))
    with pytest.raises(ValueError, match="unknown arith defect"):
        ArithEnv(ArithConfig()).generate_task(random.Random(0), 2, defect="leak")
