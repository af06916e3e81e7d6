"""One training run (a Hydra app): method x env x arm x seed -> a run directory.

    python -m experiments.run method=grpo scale=smoke seed=1
    python -m experiments.run method=grpo trainer.kl.coef=0.01 trainer.kl.placement=loss
    python -m experiments.run method=sharp arm=sharp-loo-k2
        # an arm of replications/sharp/conf/replication.yaml
    python -m experiments.run method=grpo --cfg job        # print the resolved config

`method=<name>` picks the method's config tree (replications/<name>/conf); every other argument is
a Hydra override of that tree (which composes the shared groups of common/conf). `arm=<name>` names
the run's records; when the method's replication.yaml has an arm of that name, its settings apply
too, before the other overrides (as `experiments.replicate` runs it). A bad setting is refused with
one line per error before anything is written.
"""

from __future__ import annotations

import copy
import functools
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import yaml
from omegaconf import DictConfig, OmegaConf

from common.config import RunConfig, check_machine, register_schema, to_run_config

DEFAULT_METHOD = "grpo"


def conf_dir(method: str) -> Path:
    import replications
    from replications import METHODS

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    return Path(replications.__file__).resolve().parent / method / "conf"


def split_method(args: list[str]) -> tuple[str, list[str]]:
    """Take `method=<name>` out of the overrides (it selects the config tree, not a value)."""
    method, rest = DEFAULT_METHOD, []
    for a in args:
        if a.startswith("method="):
            method = a.split("=", 1)[1]
        else:
            rest.append(a)
    return method, rest


def replication_arms(method: str) -> dict[str, list[str]]:
    """The arms of the method's replication (replications/<method>/conf/replication.yaml): name ->
    overrides."""
    path = conf_dir(method) / "replication.yaml"
    if not path.exists():
        return {}
    arms = yaml.safe_load(path.read_text()).get("arms") or {}
    return {name: list(overrides or []) for name, overrides in arms.items()}


def arm_overrides(method: str, overrides: Sequence[str]) -> list[str]:
    """The settings of the arm that `arm=<name>` in `overrides` names, to apply before `overrides`.

    An arm of the method's replication.yaml is a set of settings, not only a label: a run labelled with
    it must be computed with them. The ones `overrides` already holds verbatim are left out, so
    `replicate.plan`'s cells (which pass them explicitly) compose exactly as before. No `arm=`, or
    `arm=default` where the replication has no arm of that name, adds nothing; any other unknown arm
    is an error that lists the arms.
    """
    arm = None
    for o in overrides:
        key, sep, value = o.partition("=")
        if sep and key.lstrip("+") == "arm":
            arm = value  # the last one wins, as in Hydra
    if arm is None:
        return []
    arms = replication_arms(method)
    if arm in arms:
        return [o for o in arms[arm] if o not in overrides]
    if arm == RunConfig.arm:
        return []
    raise ValueError(f"{method} has no arm {arm!r}; its arms are {', '.join(arms)} "
                     f"(replications/{method}/conf/replication.yaml), or leave arm= out")


def with_arm(method: str, args: list[str]) -> list[str]:
    """Command-line arguments with the arm's settings inserted before the first override.

    Hydra's overrides must stay together on its command line (`a=1 --cfg job b=2` is refused).
    """
    extra = arm_overrides(method, args)
    first = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), len(args))
    return [*args[:first], *extra, *args[first:]]


def compose(method: str, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The resolved, checked RunConfig of one run (no side effects); `arm=<name>` applies that arm's settings.

    A plain `seed=<k>` is set on the composed config rather than composed: the seeds of one cell compose
    once (Hydra's composition is most of a replication's planning time). Interpolations are resolved after
    it is set, so a `${seed}` anywhere still reads the cell's seed.
    """
    register_schema()
    overrides = [*arm_overrides(method, overrides), *overrides]
    seeds = [o for o in overrides if re.fullmatch(r"seed=[0-9]+", o)]
    rest = tuple(o for o in overrides if o not in seeds)
    cfg = copy.deepcopy(_hydra_compose(method, rest))
    if seeds:
        cfg["seed"] = int(seeds[-1].split("=")[1])
    return to_run_config(cfg)


@functools.lru_cache(maxsize=256)
def _hydra_compose(method: str, overrides: tuple[str, ...]) -> dict[str, Any]:
    """Hydra's composition as plain data, interpolations unresolved (`to_run_config` resolves them)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(conf_dir(method)), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    container = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(container, dict)
    container.pop("hydra", None)
    return {str(k): v for k, v in container.items()}


def _refuse(error: Exception) -> NoReturn:
    """A configuration error: its message alone (one line per bad setting), no traceback; exit status 2."""
    print(f"error: {error}", file=sys.stderr)
    sys.exit(2)


def _stopped(error: Exception) -> NoReturn:
    """A run its storage stopped (a full disk, a folder it may not write): its one line, exit status 1."""
    print(f"error: {error}", file=sys.stderr)
    sys.exit(1)


def main(argv: list[str] | None = None) -> None:
    import hydra

    from common.fit import RunStopped, fit, resolve
    from common.records import RunRefused
    from replications import METHODS

    method, rest = split_method(list(sys.argv[1:] if argv is None else argv))
    try:
        config_path = str(conf_dir(method))
        rest = with_arm(method, rest)
    except ValueError as e:
        _refuse(e)
    register_schema()

    @hydra.main(version_base=None, config_path=config_path, config_name="config")
    def app(cfg: DictConfig) -> None:
        # the whole command line again: Lightning starts ranks 1.. of a multi-process run by running it
        sys.argv = [sys.argv[0], f"method={method}", *sys.argv[1:]]
        try:  # every check before anything is written
            run_cfg = to_run_config(cfg)
            check_machine(run_cfg)
            resolve(run_cfg, METHODS)
        except ValueError as e:
            _refuse(e)
        try:
            run_dir = fit(run_cfg, METHODS)
        except RunRefused as e:  # e.g. a finished run asked again with other settings: one line, no traceback
            _refuse(e)
        except RunStopped as e:  # a full disk, a read-only folder: one line, no traceback
            _stopped(e)
        if run_dir.writer:  # rank 0 of a multi-process run
            print(f"run directory: {run_dir.path}")

    sys.argv = [sys.argv[0], *rest]
    app()


if __name__ == "__main__":
    main()
