"""IAPO's influence graph over a trajectory's assistant actions, and the annotators that build it.

Nodes are the assistant actions of one episode (model turns; user and tool messages are evidence,
never credited). Edges i -> j (i before j), typed as in the paper:

- support-use: `input` (j acts on information i supplied or elicited) and `success_utilization`
  (j uses i's output, and it worked);
- failed-use: `failed_utilization` (j repeats i's error, uses its invalid output, or falls back
  because of it).

Besides edges: `errors` (actions that carry an error) and `user_input` (actions that directly act on
a user message: they count in d_in as an incoming support edge from the user).

An annotator is any `annotate(episode) -> InfluenceGraph`:

- `provenance_annotator` (the default): reads the environment's provenance events
  (`Event("provenance", j, {"source": i, "kind": ...})`, source -1 for direct user input) and its
  `error` / `invalid_action` events. Deterministic, no model call.
- `argument_annotator`: for environments without provenance events (and IAPO's small and paper recipes
  on tau2, which read the text although tau2 emits provenance events since #46): an edge i -> j
  (`success_utilization`, or `failed_utilization` when j errored) when an argument of action j (a
  token with a digit, an underscore or a hyphen: an id, a code, a date) first appeared in what
  followed action i (the next observation) and not in the episode's first observation; direct user
  input when the turn right before j is another role's (a simulated user). Deterministic.
- `LLMAnnotator`: the paper's annotator, a frozen model at temperature 0 prompted with the
  transcript and the edge definitions; it answers one line per fact (`EDGE i -> j <kind>`,
  `ERROR i`, `USER j`), parsed by `parse_annotation` (malformed lines, self-loops, backward edges and
  indices out of range are dropped). It needs a model on local disk (`hf_greedy`) and runs at the
  paper scale only.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from common.episode import Episode

EdgeKind = Literal["input", "success_utilization", "failed_utilization"]
SUPPORT: tuple[EdgeKind, ...] = ("input", "success_utilization")
FAILED: tuple[EdgeKind, ...] = ("failed_utilization",)
EDGE_KINDS: tuple[EdgeKind, ...] = (*SUPPORT, *FAILED)
USER_SOURCE = -1


@dataclass
class InfluenceGraph:
    """The graph over `n` actions (0-based action indices, in order of play)."""

    n: int
    # (source, target, kind), source < target
    edges: set[tuple[int, int, EdgeKind]] = field(default_factory=set)
    errors: set[int] = field(default_factory=set)
    user_input: set[int] = field(default_factory=set)

    def add_edge(self, source: int, target: int, kind: str) -> bool:
        """Add i -> j when it is a valid edge (kind known, 0 <= i < j < n); returns whether it was added."""
        if kind not in EDGE_KINDS or not 0 <= source < target < self.n:
            return False
        self.edges.add((source, target, kind))  # type: ignore[arg-type]
        return True

    def degrees(self) -> tuple[list[int], list[int], list[int], list[int]]:
        """(d+, d-, d_in, e) per action: outgoing support edges, outgoing failed edges, incoming support
        edges plus direct user input, error flags."""
        d_plus, d_minus, d_in = [0] * self.n, [0] * self.n, [0] * self.n
        for source, target, kind in self.edges:
            if kind in SUPPORT:
                d_plus[source] += 1
                d_in[target] += 1
            else:
                d_minus[source] += 1
        for j in self.user_input:
            d_in[j] += 1
        return d_plus, d_minus, d_in, [int(i in self.errors) for i in range(self.n)]


Annotator = Callable[[Episode], InfluenceGraph]


def action_turns(episode: Episode) -> list[int]:
    """Indices in `episode.turns` of its assistant actions (turns a trained model sampled; a scripted
    actor's or a frozen adapter's turns, e.g. a simulated user, are evidence)."""
    return [t for t, turn in enumerate(episode.turns) if turn.adapter is not None and turn.trainable]


def provenance_annotator(episode: Episode) -> InfluenceGraph:
    """The graph from the environment's provenance and error events (deterministic)."""
    turns = action_turns(episode)
    index = {t: a for a, t in enumerate(turns)}
    graph = InfluenceGraph(len(turns))
    for event in episode.events:
        j = index.get(event.turn)
        if j is None:
            continue
        if event.kind in ("error", "invalid_action"):
            graph.errors.add(j)
        elif event.kind == "provenance":
            source = event.data.get("source")
            if source == USER_SOURCE:
                graph.user_input.add(j)
            elif isinstance(source, int) and source in index:
                graph.add_edge(index[source], j, str(event.data.get("kind")))
    return graph


_ARGUMENT = re.compile(r"[A-Za-z0-9_\-]*[0-9_\-][A-Za-z0-9_\-]*")


def _arguments(text: str) -> set[str]:
    return {a for a in _ARGUMENT.findall(text) if any(c.isalnum() for c in a)}


def argument_annotator(episode: Episode) -> InfluenceGraph:
    """The graph from argument provenance in the text (see the module docstring); errors from events."""
    turns = action_turns(episode)
    graph = InfluenceGraph(len(turns))
    index = {t: a for a, t in enumerate(turns)}
    for event in episode.events:
        if event.kind in ("error", "invalid_action") and event.turn in index:
            graph.errors.add(index[event.turn])
    seen = _arguments(episode.turns[0].prompt_text) if episode.turns else set()
    produced: dict[str, int] = {}  # argument -> the action whose following observation first showed it
    for a, t in enumerate(turns):
        if t > 0 and episode.turns[t - 1].role != episode.turns[t].role:
            graph.user_input.add(a)
        for arg in sorted(_arguments(episode.turns[t].text)):
            if arg in produced:
                graph.add_edge(produced[arg], a,
                               "failed_utilization" if a in graph.errors else "success_utilization")
        if t + 1 < len(episode.turns):
            for arg in _arguments(episode.turns[t + 1].prompt_text) - seen:
                produced.setdefault(arg, a)
            seen |= _arguments(episode.turns[t + 1].prompt_text)
    return graph


# ---- the paper's annotator: a frozen model at temperature 0 -----------------------------------------
EDGE_DEFINITIONS = """You annotate how the assistant's actions in a dialogue influenced each other.
Actions are numbered A0, A1, ... in order. Report one fact per line, nothing else:
EDGE i -> j input                : action j acts on information that action i supplied or elicited
EDGE i -> j success_utilization  : action j used the output of action i, and it worked
EDGE i -> j failed_utilization   : action j repeats action i's error, uses its invalid output, or falls back \
because of it
ERROR i                          : action i carries an error (a failed tool call, a malformed call)
USER j                           : action j directly acts on a message from the user
Only edges from an earlier action to a later one. Write DONE when finished."""

_EDGE = re.compile(r"^\s*EDGE\s+A?(\d{1,4})\s*->\s*A?(\d{1,4})\s+([a-z_]+)\s*$")
_FLAG = re.compile(r"^\s*(ERROR|USER)\s+A?(\d{1,4})\s*$")


def transcript(episode: Episode) -> str:
    """The episode as the annotator reads it: each action's observation, then the action, numbered."""
    lines = []
    for a, t in enumerate(action_turns(episode)):
        turn = episode.turns[t]
        lines.append(f"[observation before A{a}]\n{turn.prompt_text.strip()}\n[A{a}] {turn.text.strip()}")
    return "\n".join(lines)


def annotation_prompt(episode: Episode) -> str:
    return f"{EDGE_DEFINITIONS}\n\n{transcript(episode)}\n\nFacts:\n"


def parse_annotation(text: str, n: int) -> InfluenceGraph:
    """The graph an annotator wrote (`EDGE i -> j kind`, `ERROR i`, `USER j`, one per line; stops at
    `DONE`). Lines that are not facts, unknown kinds, self-loops, backward edges and indices outside
    0..n-1 are dropped: an annotator's mistakes never reach the weights as exceptions.

    >>> g = parse_annotation("EDGE 0 -> 2 input\\nERROR 1\\nEDGE 2 -> 1 input\\nUSER 0\\nDONE\\nERROR 2", 3)
    >>> sorted(g.edges), sorted(g.errors), sorted(g.user_input)
    ([(0, 2, 'input')], [1], [0])
    """
    graph = InfluenceGraph(n)
    for line in text.splitlines():
        if line.strip() == "DONE":
            break
        if (m := _EDGE.match(line)) is not None:
            graph.add_edge(int(m.group(1)), int(m.group(2)), m.group(3))
        elif (f := _FLAG.match(line)) is not None and 0 <= int(f.group(2)) < n:
            (graph.errors if f.group(1) == "ERROR" else graph.user_input).add(int(f.group(2)))
    return graph


@dataclass
class LLMAnnotator:
    """The paper's annotator: `generate(prompt) -> text` is a frozen model decoding greedily
    (temperature 0); its answer is parsed into the graph."""

    generate: Callable[[str], str]

    def __call__(self, episode: Episode) -> InfluenceGraph:
        return parse_annotation(self.generate(annotation_prompt(episode)), len(action_turns(episode)))


def hf_greedy(model_path: str, max_new_tokens: int = 256) -> Callable[[str], str]:
    """A frozen local causal LM decoding greedily (temperature 0), for `LLMAnnotator` (paper scale)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model: Any = AutoModelForCausalLM.from_pretrained(
        model_path, dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)
    model.eval().requires_grad_(False)
    if torch.cuda.is_available():
        model.cuda()

    def generate(prompt: str) -> str:
        ids = tokenizer(prompt, return_tensors="pt").to(model.device)
        with torch.no_grad():
            out = model.generate(**ids, do_sample=False, max_new_tokens=max_new_tokens,
                                 pad_token_id=tokenizer.eos_token_id)
        return str(tokenizer.decode(out[0, ids["input_ids"].shape[1]:], skip_special_tokens=True))

    return generate


def decision_turns(episode: Episode) -> set[int]:
    """Turn indices the environment marked as decisions (`info` events with a `decision` key)."""
    return {e.turn for e in episode.events if e.kind == "info" and "decision" in e.data}


def right_turns(episode: Episode) -> set[int]:
    """Turn indices of decisions the environment marked right (`info` events `{"decision": ..., "right":
    True}`: service_desk choice's lookup that returned the id, refund that succeeded)."""
    return {e.turn for e in episode.events
            if e.kind == "info" and "decision" in e.data and e.data.get("right")}


def fault_turns(episode: Episode) -> set[int]:
    """Turn indices whose action raised an `error` or `invalid_action` event."""
    return {e.turn for e in episode.events if e.kind in ("error", "invalid_action")}
