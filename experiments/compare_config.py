"""What `make compare` runs, as configs: the environments of the comparison (`compare.yaml`: env tag
-> environment and the home replication arm whose scale sets the budget there, optionally with Hydra
`overrides` after the home's `scale=`, `arm=` and `scales`, the home's scale per compare scale: `Setting`),
which methods apply where (`applicable`, `matrix`), the arm a method runs (`compare_arm`), and one cell's
config: the home arm's budget with the method's recipe (`RECIPE`), written as Hydra overrides of the
method's own tree and checked to compose back to exactly that config (`target_config`, `overrides_for`).
`experiments.compare` plans, reuses and runs the cells.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from common.util import dotted_get, dotted_set, flatten
from experiments.replicate import RESERVED, _plain_config, load_replication

COMPARE_FILE = Path(__file__).resolve().parent / "compare.yaml"
# what a method brings to an environment; everything else of a cell's config is the home arm's budget
RECIPE = ("method", "trainer.ppo_epochs", "trainer.minibatches", "trainer.clip_low", "trainer.clip_high",
          "trainer.loss_agg", "trainer.entropy_coef", "trainer.kl", "model.roles", "model.default_adapter",
          "model.frozen_adapters")
OPTIONAL = ("overrides", "scales", "arms", "plays")  # a column's optional keys in compare.yaml


@dataclass(frozen=True)
class Setting:
    """One environment of the comparison (a line of compare.yaml)."""

    tag: str  # the env tag: results folder and matrix column
    env: str  # the environment's name in envs.registry.ENVS
    home: str  # the method whose replication arm sets the budget
    arm: str  # that arm (`default`: the home's scale alone, no arm's settings)
    overrides: tuple[str, ...] = ()  # Hydra overrides after `scale=`, `arm=` where the home is composed
    scales: tuple[tuple[str, str], ...] = ()  # (compare scale, the home's scale); none: the same scale
    arms: tuple[tuple[str, str], ...] = ()  # (method, the arm it plays on this column); none: compare_arm
    plays: tuple[tuple[str, int], ...] = ()  # (method, K): its group members are chains of K task plays

    def home_scale(self, scale: str) -> str | None:
        """The home's scale whose budget the column has at compare scale `scale` (None: no column there)."""
        return dict(self.scales).get(scale) if self.scales else scale

    def home_overrides(self, scale: str) -> tuple[str, ...]:
        """What composes the home's config for compare scale `scale` (a scale it has: `home_seeds`)."""
        return (f"scale={self.home_scale(scale)}", f"arm={self.arm}", *self.overrides)

    def absent(self, scale: str) -> str:
        """Why the column has no cells at compare scale `scale` (its home has no budget for it)."""
        if self.home_scale(scale) is None:
            named = ", ".join(f"{s} ({self.home}'s scale {h})" for s, h in self.scales)
            return f"compare.yaml's scales give it a budget at compare scale {named} only"
        return f"{self.home} (the budget's home) has no scale {self.home_scale(scale)}"


def load_settings(path: Path = COMPARE_FILE) -> dict[str, Setting]:
    data = yaml.safe_load(path.read_text()) or {}
    out = {}
    for tag, s in (data.get("envs") or {}).items():
        keys = set(s or {})
        missing, unknown = {"env", "home", "arm"} - keys, keys - {"env", "home", "arm", *OPTIONAL}
        if missing or unknown:
            raise ValueError(f"{path}: env {tag!r} lacks {sorted(missing)} or has unknown {sorted(unknown)}")
        overrides = tuple(str(o) for o in s.get("overrides") or ())
        moved = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") in RESERVED]
        if moved:
            raise ValueError(f"{path}: env {tag!r}: overrides {moved} set what compare.yaml's home, arm and "
                             "scales (or the cell) set")
        scales = tuple((str(k), str(v)) for k, v in (s.get("scales") or {}).items())
        arms = tuple((str(k), str(v)) for k, v in (s.get("arms") or {}).items())
        plays = tuple((str(k), int(v)) for k, v in (s.get("plays") or {}).items())
        if len({v for _, v in plays}) > 1 or any(v < 1 for _, v in plays):
            raise ValueError(f"{path}: env {tag!r}: plays must give one K >= 1 (task plays per group member)")
        out[tag] = Setting(tag, s["env"], s["home"], s["arm"], overrides, scales, arms, plays)
    return out


def home_seeds(setting: Setting, scale: str) -> list[int] | None:
    """The column's seeds at compare scale `scale`: the home replication's at the scale that sets the budget
    (None: the column has no budget at `scale`)."""
    at, seeds = setting.home_scale(scale), load_replication(setting.home).seeds
    return list(seeds[at]) if at in seeds else None


def compare_arm(method: str, setting: Setting | None = None) -> str:
    """The arm of `method`'s replication that `make compare` runs (on `setting`: the column's `arms` entry
    for the method where it has one, e.g. the recipe its own replication plays on that testbed)."""
    from replications import METHODS

    arm = dict(setting.arms).get(method) if setting is not None else None
    arm = arm or METHODS[method].compare_arm or method
    arms = load_replication(method).arms
    if arm not in arms:
        raise ValueError(f"{method}: make compare runs the arm {arm!r}, which is not in "
                         f"replications/{method}/conf/replication.yaml ({', '.join(arms)}); "
                         "set compare_arm on its Method class")
    return arm


def applicable(method: str, env: str, settings: dict[str, Any] | None = None) -> bool:
    """Whether `env` offers everything `method` needs (envs/api/features.py): with `settings` (a run's
    resolved `env` config), what an instance with those settings offers (`Environment.offers_for`)."""
    from envs.registry import ENVS
    from replications import METHODS

    offers = ENVS[env].offers if settings is None else ENVS[env].offers_for(settings)
    return METHODS[method].needs <= offers


def home_env(setting: Setting, scale: str) -> dict[str, Any] | None:
    """The resolved `env` config of the column's home arm at `scale`, with the column's overrides (None when
    the column has no budget at `scale`): what the column's environment is, so what it offers."""
    if home_seeds(setting, scale) is None:
        return None
    return dict(_plain_config(setting.home, setting.home_overrides(scale))["env"])


def matrix(methods: list[str], settings: dict[str, Setting],
           scale: str = "cpu") -> dict[tuple[str, str], bool]:
    """(method, env tag) -> applicable, for every method and every environment of the comparison, as
    each column's home arm configures its environment at `scale`."""
    envs = {tag: home_env(s, scale) for tag, s in settings.items()}
    return {(m, tag): applicable(m, s.env, envs[tag]) for m in methods for tag, s in settings.items()}


# ---- one cell's config ---------------------------------------------------------------------------
def hydra_value(v: Any) -> str:
    """A value in Hydra's override grammar (strings quoted, so any character survives)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    if isinstance(v, str):
        if "${" in v:  # a resolved config holds none; an interpolation here would be resolved again
            raise ValueError(f"cannot write {v!r} as a Hydra override value (an interpolation)")
        # Hydra's quoted string: backslashes escape only before a quote or the closing quote
        return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), v) + "'"
    if isinstance(v, list | tuple):
        return "[" + ",".join(hydra_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{hydra_value(x)}" for k, x in v.items()) + "}"
    raise ValueError(f"cannot write {v!r} as a Hydra override")


def _config(method: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    return copy.deepcopy(_plain_config(method, overrides))


def target_config(method: str, setting: Setting, scale: str, arm: str, out_sub: str,
                  out_root: str | None = None) -> dict[str, Any]:
    """The cell's config (seed 0): the home arm's budget, the method's recipe, `arm` as its name; its records
    under `<out_root>/<out_sub>` (out_root: the scale's out_dir unless given)."""
    at = setting.home_scale(scale)
    if home_seeds(setting, scale) is None:
        raise ValueError(f"compare.yaml: {setting.tag}: {setting.absent(scale)}")
    home = _config(setting.home, setting.home_overrides(scale))
    found = home["env"].get("tag") or home["env"]["name"]
    if home["env"]["name"] != setting.env or found != setting.tag:
        raise ValueError(f"compare.yaml: {setting.tag} says env {setting.env}, but {setting.home}'s arm "
                         f"{setting.arm} at scale={at} plays env {home['env']['name']} with tag {found}")
    if at != scale and home["scale"] != scale:
        raise ValueError(f"compare.yaml: {setting.tag} at scale {scale}: {setting.home}'s scale {at} "
                         f"is scale {home['scale']}")
    own = _config(method, (f"scale={scale}", f"arm={arm}"))
    target = home
    for key in RECIPE:
        dotted_set(target, key, copy.deepcopy(dotted_get(own, key)))
    chains = dict(setting.plays)
    if chains and method not in chains:  # equal task plays: a method of single plays gets K x the group
        target["trainer"]["group_size"] = int(target["trainer"]["group_size"]) * next(iter(chains.values()))
    target["arm"] = arm
    target["out_dir"] = f"{out_root or home['out_dir']}/{out_sub}"
    return target


def overrides_for(method: str, target: dict[str, Any], scale: str) -> tuple[str, ...]:
    """Hydra overrides of `method`'s tree that compose to `target` exactly (checked)."""
    base = (f"scale={scale}", f"arm={target['arm']}")
    start, want = flatten(_config(method, base), keep_empty=True), flatten(target, keep_empty=True)
    changes = [f"++{k}={hydra_value(v)}" for k, v in want.items() if k not in start or start[k] != v]
    # a key `want` lacks goes with its topmost parent that holds nothing `want` keeps (a whole nested dict:
    # removing its leaves one by one would leave its empty dicts behind)
    removed = dict.fromkeys(_topmost_absent(k, want) for k in start if k not in want)
    changes += [f"~{k}" for k in removed]
    overrides = (*base, *changes)
    got = flatten(_config(method, overrides), keep_empty=True)
    wrong = sorted(k for k in want.keys() | got.keys() if want.get(k, "(absent)") != got.get(k, "(absent)"))
    if wrong:
        raise ValueError(f"{method} on {target['env'].get('tag')}: the overrides do not compose to the "
                         f"cell's config (differ: {wrong[:5]})")
    return overrides


def _topmost_absent(key: str, want: dict[str, Any]) -> str:
    """The shortest dotted prefix of `key` under which `want` (flat) holds nothing."""
    parts = key.split(".")
    for n in range(1, len(parts) + 1):
        prefix = ".".join(parts[:n])
        if not any(k == prefix or k.startswith(prefix + ".") for k in want):
            return prefix
    return key
