"""One training run (a Hydra app): method x env x arm x seed -> a run directory.

    python -m replications.run method=grpo scale=smoke seed=1
    python -m replications.run method=grpo trainer.kl.coef=0.01 trainer.kl.placement=loss
    python -m replications.run method=grpo --cfg job        # print the resolved config

`method=<name>` picks the method's config tree (replications/<name>/conf); every other argument is
a Hydra override of that tree (which composes the shared groups of common/conf).
"""

from __future__ import annotations

import sys
from pathlib import Path

from omegaconf import DictConfig

from common.config import RunConfig, register_schema, to_run_config

DEFAULT_METHOD = "grpo"


def conf_dir(method: str) -> Path:
    from replications import METHODS

    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; choose one of {sorted(METHODS)}")
    return Path(__file__).resolve().parent / method / "conf"


def split_method(args: list[str]) -> tuple[str, list[str]]:
    """Take `method=<name>` out of the overrides (it selects the config tree, not a value)."""
    method, rest = DEFAULT_METHOD, []
    for a in args:
        if a.startswith("method="):
            method = a.split("=", 1)[1]
        else:
            rest.append(a)
    return method, rest


def compose(method: str, overrides: list[str] | tuple[str, ...] = ()) -> RunConfig:
    """The resolved, checked RunConfig of one run (no side effects)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    register_schema()
    with initialize_config_dir(config_dir=str(conf_dir(method)), version_base=None):
        cfg = hydra_compose(config_name="config", overrides=list(overrides))
    return to_run_config(cfg)


def main(argv: list[str] | None = None) -> None:
    import hydra

    from common.run import fit
    from replications import METHODS

    method, rest = split_method(list(sys.argv[1:] if argv is None else argv))
    register_schema()

    @hydra.main(version_base=None, config_path=str(conf_dir(method)), config_name="config")
    def app(cfg: DictConfig) -> None:
        run_dir = fit(to_run_config(cfg), METHODS)
        print(f"run directory: {run_dir.path}")

    sys.argv = [sys.argv[0], *rest]
    app()


if __name__ == "__main__":
    main()
