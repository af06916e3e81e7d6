"""A run's identity: the hash of its resolved config and how two configs differ (`config_hash`,
`config_changes`, `recorded_changes`: settings that do not define the experiment left out, settings
added after a run was recorded read at their defaults), and the short key of a run folder under
work_dir/checkpoints (`run_key`). `common.records` keys a run's checkpoints and refuses runs of
other settings with them; the planners (`experiments.replicate`, `experiments.compare`) ask whether
a cell's folder holds a run of its settings.
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml

from common.util import flatten

# libyaml: a config.yaml is read per cell when planning
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


# settings that may change between a run and its resumption without changing the experiment
# (out_dir and work_dir only say where things live: the run folder's absolute path is the identity)
# (what a run logs, `log.*`, neither: a run folder recorded before those settings existed is the same run)
# (nor how long a collective may wait, `trainer.dist_timeout_s`)
RESUME_IRRELEVANT = {"progress", "force", "force_design", "trainer.threads", "loggers", "out_dir", "work_dir",
                     "log.samples_every", "log.samples_groups", "log.wandb_project", "trainer.dist_timeout_s"}
# Settings added to the suite after runs were recorded. A recorded config without a key that the new
# config holds at its schema default (`RunConfig`'s typed sections: `sft.pack: false`, say) is the same
# experiment: the default of a new setting is, by the suite's rule, what the code computed before the
# setting existed. `env` and `method` are open dicts (their defaults live in each environment's and
# method's own Config class), so a key added there is listed here with the value that computes exactly
# what earlier runs computed (the dev split is generated after every other split; the default evaluation
# is still the held-out split; every run before #16's supervised arms was RL; the paper scale's data paths
# are read only at the paper scale; River's #40 settings: terminal's planted defect at share 0, its empty
# tag, River's dynamic sampling off; SHARP's raw credit weights and soft toolhops value (#37); SkillRise's
# numbered layout and its advantage and token normalisations as they were (#41); service_desk choice's one
# order per episode (#39)).
ADDED_SETTINGS = {"env.dev_size": 64, "eval.split": "heldout", "method.update": "rl",
                  "method.paper_data": None, "method.paper_datasets": [], "env.share_planted": 0.0,
                  "env.tag": "", "method.dynamic": False, "method.dynamic_rounds": 4,
                  "method.weights": "raw", "env.layout": "numbered", "method.advantage_norm": "paper",
                  "method.token_norm": "all", "env.value": "soft", "env.orders": 1, "env.lookups": 2,
                  "env.order_prior": 0.0}


def _settings(config: dict[str, Any] | None) -> dict[str, str]:
    """Flat {key: canonical JSON of its value}: a config and its config.yaml (tuples read back as
    lists, NaN as .nan) compare equal."""
    flat = flatten(json.loads(json.dumps(config or {}, default=str)))
    return {k: json.dumps(v, sort_keys=True) for k, v in flat.items() if k not in RESUME_IRRELEVANT}


@functools.cache
def schema_defaults() -> dict[str, str]:
    """Every setting's default as `_settings` writes it: the typed sections of `RunConfig` (whose
    defaults are complete) and `ADDED_SETTINGS` (keys of the open `env` and `method` dicts)."""
    from common.config import RunConfig

    typed = {k: v for k, v in _settings(asdict(RunConfig())).items() if not k.startswith(("env.", "method."))}
    return {**typed, **{k: json.dumps(v, sort_keys=True) for k, v in ADDED_SETTINGS.items()}}


def config_hash(config: dict[str, Any]) -> str:
    """sha1 of the settings that define the experiment (RESUME_IRRELEVANT ones left out)."""
    return hashlib.sha1(json.dumps(_settings(config), sort_keys=True).encode()).hexdigest()


def config_changes(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """The settings that differ, as 'key: old -> new' (RESUME_IRRELEVANT ones left out). A key that
    only one side records counts as its default there (`schema_defaults`): a setting added after a
    run was recorded, held at its default, is no change."""
    a, b = _settings(old), _settings(new)
    if old is not None and new is not None:
        defaults = schema_defaults()
        for key in (a.keys() ^ b.keys()) & defaults.keys():
            a.setdefault(key, defaults[key])
            b.setdefault(key, defaults[key])
    return [f"{k}: {a.get(k, '(absent)')} -> {b.get(k, '(absent)')}" for k in sorted(a.keys() | b.keys())
            if a.get(k) != b.get(k)]


def recorded_changes(folder: Path, config: dict[str, Any] | None) -> list[str] | None:
    """How `config` differs from the one recorded in `folder`; None when there is nothing to compare."""
    previous = folder / "config.yaml"
    if config is None or not previous.exists():
        return None
    return config_changes(yaml.load(previous.read_text(), Loader=YAML_LOADER), config)


def run_key(folder: Path) -> str:
    """A short name for a run folder under work_dir/checkpoints: sha1 of its absolute path."""
    return hashlib.sha1(str(Path(folder).resolve()).encode()).hexdigest()[:12]
