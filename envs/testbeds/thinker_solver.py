"""`thinker_solver`: a Thinker–Solver team where the Thinker can free-ride (CCPO's CPU-scale setting).

A task is a handful of facts (`F=1 C=3 A=7 H=4`) and a question about the first one (`Q: F?`; it
comes first so that a ~1M-parameter model needs to copy, not search). A fact the Solver is not
shown appears to it as `X=?`.

- The **Thinker** sees every fact and the question, and writes one line of guidance: it can reveal
  the asked value (` 1`, or ` F=1`: *help*), state a wrong value (` 5`: *wrong*), or stay silent
  (an empty line: *silent*). It pays `cost_per_char` per character of its message.
- The **Solver** sees the question, the facts *it* is shown, and the Thinker's message, and answers
  ` #<value>`.

Tiers are about what the Solver is shown (the Thinker's view has the same form in every tier, so
it cannot tell them apart):
- tier 1: every fact; tier 2: the asked fact and some of the others. Easy: the Solver can answer
  alone, so the Thinker's message is at best useless and costs.
- tier 3: every fact but the asked one. Hard: only the Thinker knows the answer; alone, the Solver
  can only guess (1 in `num_values`).

The team's reward is `success - cost` (success: the Solver's answer is right). Because two thirds
of the tasks do not need the Thinker, a shared, group-normalized reward rewards silence more often
than help: that is the free-riding CCPO's counterfactual credit is meant to expose.

Variants (`new_episode(..., variant=)`):
- `main`: Thinker, then Solver.
- `solo`: the Solver alone, with an empty Thinker line (CCPO's counterfactual; compute is counted
  under its own tag by the rollout).
- `empty_guidance`: the Thinker writes, but the Solver receives an empty line (the Thinker's message
  is emptied; its accuracy drop measures what the message was worth).
- `paired`: for evaluation; the Solver answers alone first, then the Thinker writes and the Solver
  answers again with the message in a fresh context. `info` records `solo_correct`,
  `joint_correct`, `help` (joint right, solo wrong), `hurt` (joint wrong, solo right) and
  `contribution` (joint - solo). The reward and success are the joint ones.

Every episode's `info` records the class of the Thinker's message (`msg_help`, `msg_wrong`,
`msg_silent`, `msg_other`), its length and cost. A message that is neither empty nor `<digits>` / `X=<digits>`
is passed to the Solver as written and flagged with an `invalid_action` event; a Solver reply
without `#<integer>` is an invalid action and ends the episode with success 0. Numbers are ASCII
digits, at most 18 of them (anything else is not a number).

**The free-riding setting** (`common/conf/env/thinker_solver_freeride.yaml`, results under the env tag
`thinker_solver-freeride`; #18), switched on by `see_probs` (empty: the tiers above, unchanged):
- the asked value is derived, `question: sum`: `Q: F+C?` asks (F + C) mod `num_values` of the first
  two facts, so the Thinker has a skill to learn (a copy is not enough);
- the Solver is shown none of the facts; it *knows* the answer with a probability p drawn per episode
  from the episode's rng (shown as `K=<value>`, else `K=?`), where p is a property of the task, one
  of `see_probs` (tiers: largest p first). The Thinker's prompt does not say p nor the draw, so a
  shared reward credits a silent or wrong Thinker whenever the Solver happened to know;
- the demonstrator Solver follows a readable hint when it does not know, and also when it knows with
  probability `follow_known` (drawn per episode), so wrong hints hurt;
- binary reward (`cost_per_char: 0`). Episode `info` adds `knows` and `p_see`.
Because the draws come from the episode's rng, a solo play seeded like a joint play (CCPO's `crn`)
gets the same hidden draw.

**The dyad setting** (`common/conf/env/thinker_solver_dyad.yaml`, env tag `thinker_solver-dyad`; #38), the
free-riding setting plus three knobs, so that free-riding pays and a conditional policy exists:
- `cost_per_char` > 0: speaking costs (a bare value, ` 7`, one character), so under the team reward silence is
  the Thinker's best response where the Solver usually knows, and costly where it does not;
- `drop`: the Thinker's message is lost on the way with this probability (drawn per episode; the Solver
  receives an empty line, the Thinker still pays), so a help does not fix the outcome and the Solver's own
  draw moves the team reward whatever the Thinker does (the noise a counterfactual can remove);
- `cue_words`: one word per tier in both prompts (` S:strong`): the Thinker sees how likely the Solver is to
  know, the Solver sees how much the team leans on the Thinker there.
The Solver can copy a readable hint instead of answering what it knows (the demonstrator does with
`follow_known`); under the team reward a copied right hint pays the same as knowing. `expected_rewards` gives
each Thinker policy's expected team reward per tier against the demonstrator Solver (the algebra, tested);
`info` adds `needed` (helping beats silence in this tier), `solo_value` (the Solver's expected solo success
given the hidden draw: 1 if it knows, else 1/num_values: the oracle baseline), `dropped`, `team_reward`,
`msg_help_needed` / `msg_silent_unneeded` (present only where help is / is not needed), `msg_best_response`
(either: the Thinker did its tier's best response) and `solver_copied`
(present only where the Solver knows and received a wrong readable hint: whether it answered the hint).

**Arith's tasks** (`env.tasks: arith`, default `facts`; `common/conf/env/thinker_solver_arith.yaml`, env tag
`thinker_solver-arith`; #46): the same two roles, variants, reward and info on `arith`'s problems, both roles
seeing the whole problem; the Thinker writes the working and the Solver answers (envs/testbeds/
thinker_solver_arith.py). With `see_probs` (its free-riding setting, env tag `thinker_solver-arith-freeride`)
the Solver is shown the problem only with a per-task probability, drawn per episode. The rules every dyad
shares (turn plans, guidance, cost, step, info) are envs/testbeds/dyad.py's.

Scripted demonstrator (SFT warm start): the Thinker helps, stays silent or lies with the fixed
probabilities `expert_help`, `expert_silent`, `expert_wrong` (drawn once per episode from the
episode's rng; its message is the bare value, ` 1`), so the warm-started Thinker starts from a mix
of the three; the Solver answers from the facts it sees, else trusts the Thinker's value, else
guesses uniformly.
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass, field
from typing import Any

from envs.api.base import EnvConfig, Environment, EpisodeState, Observation, parse_int
from envs.testbeds.dyad import PHASES, SOLVER, THINKER, DyadEpisode
from envs.testbeds.thinker_solver_arith import ArithDyadEpisode, arith_generator, arith_random_action

_MESSAGE = re.compile(r"^\s*(?:([A-Z])\s*=\s*)?([0-9]+)\s*$")


@dataclass
class ThinkerSolverConfig(EnvConfig):
    name: str = "thinker_solver"
    num_facts: int = 4  # facts per task (variables drawn from A..`num_letters`)
    num_letters: int = 8  # variable names are the first `num_letters` capital letters
    num_values: int = 10  # values are 0..num_values-1 (a solo guess on a hard task is right 1 in num_values)
    cost_per_char: float = 0.02  # the Thinker's cost per character of its (stripped) message
    expert_help: float = 0.5  # the demonstrator Thinker's mix (sums to 1): reveal the asked fact,
    expert_silent: float = 0.3  # stay silent,
    expert_wrong: float = 0.2  # or state a wrong value for it
    # the free-riding setting (#18; module docstring); the defaults keep the tiers above, unchanged
    question: str = "copy"  # copy: `Q: F?` asks the first fact | sum: `Q: F+C?` asks (F + C) mod num_values
    # per task, P(the Solver knows the answer), drawn per episode; [] = tiers
    see_probs: list[float] = field(default_factory=list)
    # see_probs only: P(the demonstrator Solver follows a readable hint although it knows)
    follow_known: float = 0.0
    # the dyad setting (#38; module docstring; needs see_probs): one cue word per tier in both prompts
    # ([] = none, the prompts unchanged), in the order of see_probs' tiers (largest p first)
    cue_words: list[str] = field(default_factory=list)
    drop: float = 0.0  # P(the Thinker's message is lost: the Solver receives an empty line), per episode
    # facts (the above) | arith: arith's tasks, the Thinker writes the working (#46; thinker_solver_arith.py),
    # from arith's generator with these three settings (arith's defaults; arith.yaml: 2-4 operations, <= 20)
    tasks: str = "facts"
    min_ops: int = 1
    max_ops: int = 3
    max_value: int = 99


def expected_rewards(cfg: ThinkerSolverConfig, p: float) -> dict[str, float]:
    """Expected team reward (success - cost) of each Thinker policy on a task where the Solver knows with
    probability `p`, against the demonstrator Solver (answers what it knows, but follows a delivered
    readable hint with `follow_known`; without knowing, follows a delivered hint, else guesses 1 in V):
    help (the right bare value), silent, wrong (a wrong bare value). A bare value costs one character.
        help   = p + (1-p) ((1-drop) + drop/V) - c
        silent = p + (1-p)/V
        wrong  = p (1 - (1-drop) f) + (1-p) drop/V - c"""
    v, c, d, f = cfg.num_values, cfg.cost_per_char, cfg.drop, cfg.follow_known
    return {"help": p + (1 - p) * ((1 - d) + d / v) - c, "silent": p + (1 - p) / v,
            "wrong": p * (1 - (1 - d) * f) + (1 - p) * d / v - c}


def help_needed(cfg: ThinkerSolverConfig, p: float) -> bool:
    """Whether helping is the Thinker's best response (beats silence) where the Solver knows with `p`."""
    r = expected_rewards(cfg, p)
    return r["help"] > r["silent"]


def read_message(message: str) -> tuple[str | None, int] | None:
    """(letter or None, value) of a well-formed Thinker message, `<value>` or `X=<value>`; else None."""
    m = _MESSAGE.match(message.strip())
    value = parse_int(m.group(2)) if m is not None else None
    return None if m is None or value is None else (m.group(1), value)


def classify(message: str, asked: str, value: int) -> str:
    """help | wrong | silent | other: what a Thinker message says about the asked fact."""
    if not message.strip():
        return "silent"
    said = read_message(message)
    if said is None or said[0] not in (None, asked):
        return "other"
    return "help" if said[1] == value else "wrong"


class ThinkerSolverEpisode(DyadEpisode):
    malformed_why = "guidance must be empty, <value> or X=<value>"

    def __init__(self, task: dict[str, Any], cfg: ThinkerSolverConfig, rng: random.Random, variant: str):
        self.facts: list[tuple[str, int]] = [(k, int(v)) for k, v in task["facts"]]
        self.asked: str = task["asked"]
        self.summed: str | None = task.get("summed")  # question sum: the second addend
        values = dict(self.facts)
        if self.summed is None:
            self.value = values[self.asked]
        else:
            self.value = (values[self.asked] + values[self.summed]) % cfg.num_values
        self.shown: list[str] = list(task["shown"])  # facts the Solver sees
        # the free-riding setting: P(the Solver knows the answer)
        self.p_see: float | None = task.get("p_see")
        self.cfg, self.rng, self.variant = cfg, rng, variant
        self.message: str | None = None  # the Thinker's message as written
        self.solo_correct: bool | None = None
        # the demonstrator's choice for this episode, drawn once so expert_action() is repeatable
        u = rng.random()
        self.expert_kind = ("help" if u < cfg.expert_help else
                            "silent" if u < cfg.expert_help + cfg.expert_silent else "wrong")
        self.expert_wrong_value = rng.choice([v for v in range(cfg.num_values) if v != self.value])
        self.expert_guess = rng.randrange(cfg.num_values)
        # the free-riding setting's hidden draws, after the others (the tiers' draws are unchanged)
        self.knows = self.asked in self.shown if self.p_see is None else rng.random() < self.p_see
        self.follows = self.p_see is not None and rng.random() < cfg.follow_known
        self.dropped = cfg.drop > 0 and rng.random() < cfg.drop  # the dyad setting: the message is lost
        self.cue: str | None = task.get("cue")  # the dyad setting's tier word
        if self.summed is not None:  # a plausible slip: one addend instead of the sum
            slips = [v for v in (values[self.asked], values[self.summed]) if v != self.value]
            self.expert_wrong_value = slips[0] if slips else self.expert_wrong_value
        self.phases = PHASES[variant]
        self.phase = 0

    # ---- prompts ----------------------------------------------------------------------------
    def question(self) -> str:
        return f"Q: {self.asked}?" if self.summed is None else f"Q: {self.asked}+{self.summed}?"

    def thinker_prompt(self) -> str:
        facts = " ".join(f"{k}={v}" for k, v in self.facts)
        return f"Facts: {facts}. {self.question()}{self._cue()}\nT:"

    def _cue(self) -> str:
        return "" if self.cue is None else f" S:{self.cue}"

    def solver_prompt(self, guidance: str) -> str:
        facts = " ".join(f"{k}={v if k in self.shown else '?'}" for k, v in self.facts)
        known = "" if self.p_see is None else f" K={self.value if self.knows else '?'}"
        return f"Facts: {facts}. {self.question()}{known}{self._cue()}\nT:{guidance}\nA:"

    # ---- the demonstrator -------------------------------------------------------------------
    def expert_action(self) -> str:
        if self.phases[self.phase] == THINKER:
            if self.expert_kind == "silent":
                return ""
            return f" {self.value if self.expert_kind == 'help' else self.expert_wrong_value}"
        hint = self._hint()
        if self.knows and not (self.follows and hint is not None):
            return f" #{self.value}"
        return f" #{hint if hint is not None else self.expert_guess}"

    # ---- reading a message (the rules: envs/testbeds/dyad.py) -------------------------------
    def classify(self, message: str) -> str:
        return classify(message, self.asked, self.value)

    def unreadable(self, message: str) -> bool:
        return read_message(message) is None

    def hint_value(self, guidance: str) -> int | None:
        said = read_message(guidance)
        return said[1] if said is not None and said[0] in (None, self.asked) else None

    def _dyad_info(self, correct: bool, answer: int | None) -> dict[str, Any]:
        assert self.p_see is not None
        needed = help_needed(self.cfg, self.p_see)
        info: dict[str, Any] = {"needed": needed, "dropped": self.dropped,
                                "team_reward": float(correct) - self.cost(),
                                "solo_value": 1.0 if self.knows else 1.0 / self.cfg.num_values}
        if self.message is not None:
            kind = self.classify(self.message)
            wanted = "help" if needed else "silent"
            info["msg_help_needed" if needed else "msg_silent_unneeded"] = kind == wanted
            info["msg_best_response"] = kind == wanted
        hint = self._hint()
        if self.knows and hint is not None and hint != self.value:
            info["solver_copied"] = answer == hint
        return info

    def _setting_info(self, correct: bool, answer: int | None) -> dict[str, Any]:
        info: dict[str, Any] = {"hard": not self.knows}
        if self.p_see is not None:
            info.update(knows=self.knows, p_see=self.p_see)
        if self.cue is not None:
            info.update(self._dyad_info(correct, answer))
        return info


class ThinkerSolverEnv(Environment):
    name = "thinker_solver"
    roles = (THINKER, SOLVER)
    offers = frozenset({"multi_agent_shared_outcome", "two_role_dialogue"})  # envs/api/features.py
    config_class = ThinkerSolverConfig
    oracle_settings = {"expert_help": 1.0, "expert_silent": 0.0, "expert_wrong": 0.0}
    stop = ("\n",)

    def __init__(self, cfg: ThinkerSolverConfig):
        mix = cfg.expert_help + cfg.expert_silent + cfg.expert_wrong
        if abs(mix - 1.0) > 1e-9 or min(cfg.expert_help, cfg.expert_silent, cfg.expert_wrong) < 0:
            raise ValueError("env.expert_help + expert_silent + expert_wrong must be a distribution; "
                             f"got sum {mix}")
        if not 2 <= cfg.num_facts <= cfg.num_letters <= 26 or cfg.num_values < 2:
            raise ValueError("need 2 <= env.num_facts <= env.num_letters <= 26 and env.num_values >= 2")
        if cfg.question not in ("copy", "sum"):
            raise ValueError(f"env.question must be copy or sum; got {cfg.question!r}")
        if cfg.question == "sum" and not cfg.see_probs:
            raise ValueError("env.question=sum needs env.see_probs (the free-riding setting); the tiers ask "
                             "a copy")
        if any(not 0 <= p <= 1 for p in cfg.see_probs) or len(set(cfg.see_probs)) != len(cfg.see_probs):
            raise ValueError("env.see_probs must be distinct probabilities in [0, 1] (e.g. [0.1, 0.5, 0.9]); "
                             f"got {cfg.see_probs}")
        if not 0 <= cfg.follow_known <= 1:
            raise ValueError(f"env.follow_known must be a probability; got {cfg.follow_known}")
        if cfg.cue_words and len(cfg.cue_words) != len(cfg.see_probs):
            raise ValueError(f"env.cue_words needs one word per tier of env.see_probs "
                             f"({len(cfg.see_probs)}); got {cfg.cue_words}")
        if not 0 <= cfg.drop <= 1 or (cfg.drop and not cfg.cue_words):
            raise ValueError(f"env.drop must be a probability, and is a knob of the dyad setting "
                             f"(env.cue_words); got {cfg.drop}")
        arith = cfg.tasks == "arith"
        if cfg.tasks not in ("facts", "arith") or arith and (
                cfg.follow_known or cfg.cue_words or cfg.question != "copy"):
            raise ValueError(f"env.tasks must be facts or arith, and arith takes none of the facts' settings "
                             f"but see_probs (question, cue_words, drop, follow_known); got {cfg.tasks!r}")
        super().__init__(cfg)
        self.cfg: ThinkerSolverConfig = cfg
        self.arith = arith_generator(cfg) if arith else None  # env.tasks=arith: arith's tiers and generator
        if self.arith is not None and cfg.see_probs and len(cfg.see_probs) != len(self.arith.tiers):
            raise ValueError(f"env.see_probs with env.tasks=arith needs one probability per number of "
                             f"operations ({len(self.arith.tiers)}: {self.arith.tiers}); got {cfg.see_probs}")

    @property
    def tiers(self) -> tuple[int, ...]:
        if self.arith is not None:
            return self.arith.tiers  # the number of operations
        if self.cfg.see_probs:  # the free-riding setting: tier i has the i-th largest P(the Solver knows)
            return tuple(range(1, len(self.cfg.see_probs) + 1))
        return (1, 2, 3)  # 1: Solver sees all; 2: sees the asked fact and some others; 3: asked fact hidden

    def generate_task(self, rng: random.Random, tier: int) -> dict[str, Any]:
        if self.arith is not None:
            task = self.arith.generate_task(rng, tier)
            if self.cfg.see_probs:  # arith's free-riding setting: fewer operations, more often shown
                task["p_see"] = sorted(self.cfg.see_probs, reverse=True)[self.arith.tiers.index(tier)]
            return task
        letters = rng.sample(string.ascii_uppercase[: self.cfg.num_letters], self.cfg.num_facts)
        facts = [[k, rng.randrange(self.cfg.num_values)] for k in letters]
        asked = letters[0]  # the asked fact comes first: the tiny model needs no search, only copying
        others = letters[1:]
        # the free-riding setting: the Solver sees no fact, knows the answer with p_see
        if self.cfg.see_probs:
            p_see = sorted(self.cfg.see_probs, reverse=True)[tier - 1]
            return {"facts": facts, "asked": asked, "shown": [], "p_see": p_see,
                    **({"summed": letters[1]} if self.cfg.question == "sum" else {}),
                    **({"cue": self.cfg.cue_words[tier - 1]} if self.cfg.cue_words else {})}
        if tier == 1:
            shown = letters
        elif tier == 2:
            hidden = set(rng.sample(others, rng.randint(1, len(others) - 1 if len(others) > 1 else 1)))
            shown = [k for k in letters if k not in hidden]
        else:
            shown = others
        return {"facts": facts, "asked": asked, "shown": shown}

    def variants(self) -> tuple[str, ...]:
        return ("main", "solo", "empty_guidance", "paired")

    def new_episode(self, task: dict[str, Any], rng: random.Random, variant: str = "main") -> EpisodeState:
        if variant not in self.variants():
            raise ValueError(f"thinker_solver has no episode variant {variant!r}; "
                             f"it has {list(self.variants())}")
        episode = ArithDyadEpisode if self.cfg.tasks == "arith" else ThinkerSolverEpisode
        return episode(task, self.cfg, rng, variant)

    def random_action(self, state: EpisodeState, obs: Observation, rng: random.Random) -> str:
        """Thinker: silent or one value, uniform over the num_values + 1; Solver: ` #<v>`, v uniform. (The
        oracle, the demonstrator that always helps, reaches 1 - the cost of a one-character message: 0.98
        at the default cost.) With env.tasks=arith: `arith_random_action`, values in [0, env.max_value]."""
        if self.arith is not None:
            return arith_random_action(obs, rng, self.cfg.max_value)
        v = rng.randrange(self.cfg.num_values + 1)
        if obs.role == "thinker":
            return "" if v == self.cfg.num_values else f" {v}"
        return f" #{rng.randrange(self.cfg.num_values)}"
