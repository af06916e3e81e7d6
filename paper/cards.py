"""CARD.md front matter: the paper's numbers and the claims our runs check, machine-readably.

Every `replications/<method>/CARD.md` starts with YAML between two `---` lines (schema in
paper/README.md). A claim is a predicate over arms, for example

    predicate: "sharp-exact > grpo"          # arm A beats arm B (final eval, unpaired)
    predicate: "grpo@final > grpo@initial"   # an arm beats its own warm start (paired by seed)
    predicate: "full > dense > no-kl > n8"   # an ordering: every adjacent pair
    predicate: "no-kl < full"                # with metric: curve:entropy, window: 10

evaluated on `metric` in `env` (a list of envs: stratified over them). Every claim declares its
`margin`, the smallest difference that matters (in the metric's units), and `margin_why`, one line
saying why; it may name `controls` (other arms the reader should see beside it) and `confounds`
(free text), which the report prints next to its verdict (paper/claims.py decides it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

DEFAULT_MIN_SEEDS = 3
DEFAULT_CONFIDENCE = 0.95
DEFAULT_WINDOW = 10
CURVE_PREFIX = "curve:"

CLAIM_KINDS = ("replication", "sanity")  # sanity: checks the pipeline works, not the paper's idea

_CARD_KEYS = {"method", "title", "paper", "summary", "arms", "main_arm", "envs", "curves", "eval_metric",
              "min_seeds", "confidence", "margins_preregistered", "reported", "claims"}
_CLAIM_KEYS = {"id", "text", "paper", "predicate", "env", "metric", "window", "min_seeds", "margin",
               "margin_why", "controls", "confounds", "kind"}
_REPORTED_KEYS = {"what", "value", "unit", "mark"}
_TERM = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.\-]*)(?:@(initial|final))?$")


class CardError(ValueError):
    """A CARD.md front matter that does not follow the schema."""


# what `make new-method` leaves to be written: `{{name}}` (unfilled) and `<what to write here>` text
PLACEHOLDER = re.compile(r"\{\{[^{}\n]*\}\}|<[A-Za-z][^<>\n]*>")


def placeholders(card: Card) -> list[str]:
    """The fields of `card` the report prints that still hold a template placeholder
    (replications/_template/CARD.md.tmpl), by name: e.g. ["title", "claims[0].margin_why"]."""
    fields: list[tuple[str, str]] = [("title", card.title), ("paper", card.paper), ("summary", card.summary)]
    fields += [(f"arms.{arm}", label) for arm, label in card.arms.items()]
    fields += [(f"reported[{i}].what", r.what) for i, r in enumerate(card.reported)]
    for i, c in enumerate(card.claims):
        fields += [(f"claims[{i}].{key}", value) for key, value in
                   (("text", c.text), ("paper", c.paper), ("margin_why", c.margin_why))]
        fields += [(f"claims[{i}].confounds", x) for x in c.confounds]
    return [name for name, value in fields if PLACEHOLDER.search(value)]


@dataclass(frozen=True)
class Term:
    arm: str
    stage: str | None  # "initial" | "final" for eval metrics; None for curve metrics (or the default)

    def label(self) -> str:
        return f"{self.arm}@{self.stage}" if self.stage else self.arm


@dataclass
class Claim:
    id: str
    text: str
    predicate: str
    terms: list[Term]  # in claimed order: terms[0] > terms[1] > ... (a "<" chain is reversed)
    envs: list[str]
    margin: float  # the smallest difference that matters, in the metric's units (> 0)
    margin_why: str  # one line: why this margin
    metric: str = "mean@k"
    window: int | None = DEFAULT_WINDOW  # curve metrics: last N steps; None = every step
    min_seeds: int = DEFAULT_MIN_SEEDS  # a floor on the seeds needed, below the power calculation's
    paper: str = ""
    controls: list[str] = field(default_factory=list)  # arms shown beside the verdict (e.g. a control arm)
    confounds: list[str] = field(default_factory=list)  # known confounds, printed next to the verdict
    kind: str = "replication"  # one of CLAIM_KINDS

    @property
    def is_curve(self) -> bool:
        return self.metric.startswith(CURVE_PREFIX)


@dataclass
class Reported:
    what: str
    value: float | str
    unit: str = ""
    mark: str = "P"


@dataclass
class Card:
    method: str
    title: str
    paper: str
    summary: str = ""
    arms: dict[str, str] = field(default_factory=dict)  # arm -> label the paper uses (figure order)
    main_arm: str | None = None
    envs: list[str] | None = None
    curves: list[str] = field(default_factory=lambda: ["success_rate"])
    eval_metric: str = "mean@k"
    min_seeds: int = DEFAULT_MIN_SEEDS
    confidence: float = DEFAULT_CONFIDENCE
    margins_preregistered: bool = False  # were the margins set before the runs they judge? (not unless said)
    reported: list[Reported] = field(default_factory=list)
    claims: list[Claim] = field(default_factory=list)
    path: Path | None = None

    def label(self, arm: str) -> str:
        return self.arms.get(arm, arm)


def split_front_matter(text: str) -> tuple[str, str]:
    """(yaml, body) of a Markdown file that starts with a `---` line."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise CardError("CARD.md must start with a '---' line opening its YAML front matter")
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1:])
    raise CardError("CARD.md front matter has no closing '---' line")


def parse_predicate(predicate: str) -> list[Term]:
    """'a > b > c' or 'c < b < a' -> [a, b, c] (the claimed order, best first)."""
    ops = re.findall(r"[<>]", predicate)
    if not ops:
        raise CardError(f"predicate {predicate!r} has no '>' or '<'; write e.g. 'sharp-exact > grpo'")
    if len(set(ops)) > 1:
        raise CardError(f"predicate {predicate!r} mixes '>' and '<'; write the chain in one direction")
    parts = [p.strip() for p in re.split(r"[<>]", predicate)]
    terms = []
    for part in parts:
        m = _TERM.match(part)
        if m is None:
            raise CardError(f"predicate {predicate!r}: {part!r} is not an arm name, optionally @initial "
                            "or @final")
        terms.append(Term(m.group(1), m.group(2)))
    if len(set(terms)) != len(terms):
        raise CardError(f"predicate {predicate!r} repeats a term")
    return terms[::-1] if ops[0] == "<" else terms


def _unknown(d: dict[str, Any], known: set[str], where: str) -> None:
    unknown = sorted(set(d) - known)
    if unknown:
        raise CardError(f"{where}: unknown key(s) {unknown}; known keys are {sorted(known)}")


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CardError(f"{where} must be a positive integer; got {value!r}")
    return value


def _margin(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise CardError(f"{where} must be a number > 0 (the smallest difference that matters, in the "
                        f"metric's units, e.g. 0.05 for 5 points of mean@k); got {value!r}")
    return float(value)


def _strings(value: Any, where: str) -> list[str]:
    """One string or a list of strings."""
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(v, str) and v.strip() for v in items):
        raise CardError(f"{where} must be a string or a list of strings; got {value!r}")
    return [v.strip() for v in items]


def parse_claim(d: Any, card_min_seeds: int, n: int) -> Claim:
    where = f"claims[{n}]"
    if not isinstance(d, dict):
        raise CardError(f"{where} must be a mapping with id, text, predicate, env, margin, margin_why")
    _unknown(d, _CLAIM_KEYS, where)
    for key in ("id", "text", "predicate", "env"):
        if key not in d:
            raise CardError(f"{where} lacks {key!r}")
    for key in ("margin", "margin_why"):
        if key not in d:
            raise CardError(f"{where} ({d['id']}) lacks {key!r}: every claim declares, before its runs, the "
                            "smallest difference that matters (margin, in the metric's units) and one line "
                            "on why (margin_why)")
    envs = d["env"] if isinstance(d["env"], list) else [d["env"]]
    metric = str(d.get("metric", "mean@k"))
    terms = parse_predicate(str(d["predicate"]))
    if metric.startswith(CURVE_PREFIX):
        if any(t.stage for t in terms):
            raise CardError(f"{where} ({d['id']}): @initial/@final apply to eval metrics, not to {metric}")
        window = d.get("window", DEFAULT_WINDOW)
        window = None if window == "all" else _positive_int(window, f"{where}.window")
    else:
        if "window" in d:
            raise CardError(f"{where} ({d['id']}): window applies only to curve: metrics, not to {metric}")
        window = None
        terms = [Term(t.arm, t.stage or "final") for t in terms]
    if len(set(terms)) != len(terms):
        raise CardError(f"{where} ({d['id']}): predicate {d['predicate']!r} compares a term with itself")
    controls = _strings(d["controls"], f"{where}.controls") if "controls" in d else []
    if any(not _TERM.match(c) or "@" in c for c in controls) or set(controls) & {t.arm for t in terms}:
        raise CardError(f"{where} ({d['id']}): controls must be arm names not already in the predicate; "
                        f"got {controls}")
    kind = str(d.get("kind", "replication"))
    if kind not in CLAIM_KINDS:
        raise CardError(f"{where} ({d['id']}): kind must be one of {list(CLAIM_KINDS)}; got {kind!r}")
    return Claim(id=str(d["id"]), text=str(d["text"]), predicate=str(d["predicate"]), terms=terms,
                 envs=[str(e) for e in envs], margin=_margin(d["margin"], f"{where}.margin"),
                 margin_why=" ".join(_strings(d["margin_why"], f"{where}.margin_why")), metric=metric,
                 window=window,
                 min_seeds=_positive_int(d.get("min_seeds", card_min_seeds), f"{where}.min_seeds"),
                 paper=str(d.get("paper", "")), controls=controls,
                 confounds=_strings(d["confounds"], f"{where}.confounds") if "confounds" in d else [],
                 kind=kind)


def parse_card(text: str, path: Path | None = None) -> Card:
    raw, _ = split_front_matter(text)
    try:
        d = yaml.safe_load(raw) or {}
    except yaml.YAMLError as e:
        raise CardError(f"front matter is not valid YAML: {e}") from e
    if not isinstance(d, dict):
        raise CardError("front matter must be a YAML mapping")
    _unknown(d, _CARD_KEYS, "front matter")
    for key in ("method", "title", "paper"):
        if key not in d:
            raise CardError(f"front matter lacks {key!r}")
    min_seeds = _positive_int(d.get("min_seeds", DEFAULT_MIN_SEEDS), "min_seeds")
    confidence = float(d.get("confidence", DEFAULT_CONFIDENCE))
    if not 0 < confidence < 1:
        raise CardError(f"confidence must be in (0, 1); got {confidence}")
    arms = d.get("arms") or {}
    if not isinstance(arms, dict):
        raise CardError("arms must map each arm name to the label the paper uses, e.g. {grpo: GRPO}")
    reported = []
    for n, r in enumerate(d.get("reported") or []):
        if not isinstance(r, dict) or "what" not in r or "value" not in r:
            raise CardError(f"reported[{n}] must be a mapping with what, value (and unit, mark)")
        _unknown(r, _REPORTED_KEYS, f"reported[{n}]")
        reported.append(Reported(str(r["what"]), r["value"], str(r.get("unit", "")), str(r.get("mark", "P"))))
    claims = [parse_claim(c, min_seeds, n) for n, c in enumerate(d.get("claims") or [])]
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise CardError(f"claim ids must be unique; got {ids}")
    envs = d.get("envs")
    preregistered = d.get("margins_preregistered", False)
    if not isinstance(preregistered, bool):
        raise CardError(f"margins_preregistered must be true or false; got {preregistered!r}")
    card = Card(method=str(d["method"]), title=str(d["title"]), paper=str(d["paper"]),
                summary=str(d.get("summary", "")).strip(), arms={str(k): str(v) for k, v in arms.items()},
                main_arm=d.get("main_arm"), envs=[str(e) for e in envs] if envs else None,
                curves=[str(c) for c in d.get("curves") or ["success_rate"]],
                eval_metric=str(d.get("eval_metric", "mean@k")), min_seeds=min_seeds, confidence=confidence,
                margins_preregistered=preregistered, reported=reported, claims=claims, path=path)
    if card.main_arm is not None and card.arms and card.main_arm not in card.arms:
        raise CardError(f"main_arm {card.main_arm!r} is not one of arms {list(card.arms)}")
    return card


def load_cards(dirs: list[Path]) -> tuple[dict[str, Card], dict[str, str]]:
    """Cards from `<dir>/<method>/CARD.md` for each dir; returns (cards, errors by method)."""
    cards: dict[str, Card] = {}
    errors: dict[str, str] = {}
    for root in dirs:
        for path in sorted(Path(root).glob("*/CARD.md")):
            method = path.parent.name
            try:
                card = parse_card(path.read_text(), path)
            except CardError as e:
                errors[method] = f"{path}: {e}"
                continue
            unfilled = placeholders(card)
            if unfilled:  # named by field only: the placeholders' text never reaches the report
                errors[method] = (f"{path}: card not written: template placeholders left in "
                                  f"{', '.join(unfilled)} (write them, then make paper)")
                continue
            if card.method != method:
                errors[method] = (f"{path}: front matter says method {card.method!r} "
                                  f"but the folder is {method!r}")
                continue
            cards[method] = card
    return cards, errors
