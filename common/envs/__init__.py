"""Every environment of the suite, by name. One file per environment."""

from common.envs.arith import ArithEnv
from common.envs.base import EnvConfig, Environment, EpisodeState, Observation, StepResult

ENVS: dict[str, type[Environment]] = {
    "arith": ArithEnv,
}

__all__ = ["ENVS", "EnvConfig", "Environment", "EpisodeState", "Observation", "StepResult"]
