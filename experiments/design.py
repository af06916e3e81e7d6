"""Can the testbed tell? The design check of every claim of a method, run before its arms (#36).

    python -m experiments.design --method ccpo           # = make design-ccpo; writes results/ccpo/design.json
    python -m experiments.design --method ccpo --no-pilots   # the shared-batch figures only (minutes)
    python -m experiments.design --method skillrise --claims -ind$   # only the claims whose id matches

For each claim of the method's card (`predicate: "a > b"`, or `"a@final > a@initial"`), three gates, each
on the **dev** split, never the held-out one:

1. *learnable*: the claim's control arm (`b`; for a claim about one arm's own gain, that arm) improves
   on dev by at least the margin in a pilot (one seed, the arm's own budget, `eval.split=dev`):
   final minus initial of the card's `eval_metric` (mean@k). Fails: the claim is **void**.
2. *positive control*: where `conf/design.yaml` names an oracle arm for the claim (the mechanism's ideal
   signal, built from hidden ground truth), its pilot beats the control's on dev by the margin, on the
   claim's own metric (a curve metric over the claim's window: a learning-speed claim is gated on
   learning speed; an eval metric at the final evaluation). Fails: **void**. No oracle: `null`.
3. *separation*, on **one shared batch** of dev episodes played by the warm start with the claim's first
   arm's play (its extra plays included), every arm's credit and advantages computed on those same
   episodes (`common.credit.to_advantages`):
   - arms that differ in credit: the correlation of their per-turn advantages, and the ratio of their
     signal-to-noise: the credit gap of the claim's behaviour (mean advantage of the turns that show
     it minus of the turns that do not; by default the turns of successful against failed episodes),
     its mean over its standard deviation across `RESAMPLES` batches resampled from the groups. A
     correlation above 0.95 with a signal-to-noise within 10% of the control's is a **design null**.
     Beside them (figures, not gates): the share of one group's rollout pairs of one agent that the
     treated arm orders against the control (`reversals`), and where the oracle arm differs in credit
     too, the same two figures against the oracle (`oracle_correlation`, `oracle_reversals`; #37).
   - arms that differ in the update schedule (`trainer.ppo_epochs`, `trainer.minibatches`): one real
     update of the shared batch with that schedule; a second pass that clips under 1% of its tokens is
     a **design null** (its KL to the sampling policy is reported beside it).
   - arms that differ in what they sample (group size, tasks per step, a task pool): the share of
     groups with a learning signal under each arm's own play; a ratio within 10% is a **design null**.
4. *the method's own check*, where `conf/design.yaml` names one for the claim (`check: {name, arm}`): a
   function of `replications/<m>/design.py` CHECKS on that arm's pilot (e.g. River: hacking under the
   full set, loops for the penalty to act on). Fails: **void**.
   A claim whose gates all pass is `pass`; with `--no-pilots` (learnable and positive control not
   measured) one whose separation passes is `partial`, never `pass`.

`results/<method>/design.json` keeps one shape for every method (`DESIGN_KEYS`). Claims about another
setting than the one the arms play at `--scale` are not checked (`other_env`); their entries from the file
being replaced are kept, marked `checked_at` (scale and code). Pilots run in
`<work_dir>/design/` (finished ones are reused; their figures, config hash and code are recorded).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from common.util import atomic_write_json, flatten
from experiments.design_pilots import CURVE_WINDOW, claim_metric_value, metric_gain, pilot_gain  # noqa: F401
from experiments.shared_batch import (
    advantages_of,
    arm_config,
    build,
    cells_of,
    correlation,
    credit_gap,
    labels,
    reversal_share,
    second_pass,
    shared_batch,
    signal_fraction,
    signal_to_noise,
)

CORRELATION_MAX = 0.95  # above (with the signal-to-noise within SNR_BAND): a design null
SNR_BAND = 0.10
CLIP_MIN = 0.01  # a second pass that clips less: a design null
SAMPLING_BAND = 0.10
SCHEDULE_KEYS = ("trainer.ppo_epochs", "trainer.minibatches")
SAMPLING_KEYS = ("trainer.group_size", "trainer.tasks_per_step", "method.pool", "method.coverage",
                 "method.drop_hardest_tier", "method.min_group", "method.update", "method.demonstrator_env",
                 "method.dynamic")
IGNORED_KEYS = ("arm", "seed", "eval.", "out_dir", "work_dir", "progress", "force", "loggers", "log.",
                "trainer.threads", "trainer.checkpoint_every", "trainer.steps")
DESIGN_KEYS = ("claims", "episodes", "code")


@dataclass
class ClaimSpec:
    """What the design check needs of one claim (from the card and `conf/design.yaml`)."""

    id: str
    arms: list[str]  # the claimed order, best first; one arm for a claim about its own gain
    control: str  # the arm that must learn (and that the oracle must beat)
    margin: float
    oracle: str | None = None
    # a labeler of replications/<m>/design.py BEHAVIOURS; None: the turns of successes vs of failures
    behaviour: str | None = None
    play_arm: str | None = None  # the arm whose play makes the shared batch (default: the first arm)
    envs: list[str] | None = None  # the env tags the claim is about (None: any)
    # the metric the learnable gate reads (default: the card's eval_metric); `curve:<key>` reads the pilot's
    # training curve (first against last `CURVE_WINDOW` steps): a claim that an arm's held-out metric
    # falls needs the arm to learn its training reward, not its held-out metric
    learn_metric: str | None = None
    # a method's own gate (`replications/<m>/design.py` CHECKS[name], on the pilot of `arm`): what the
    # claim needs of the testbed beyond learning (e.g. that hacking happens where a filter should stop it)
    check: dict[str, Any] | None = None
    # the claim's own metric and window (paper/cards.py): what the positive control compares
    metric: str = "mean@k"
    window: int | None = None


# ---- the claims -----------------------------------------------------------------------------------
def claim_specs(method: str) -> list[ClaimSpec]:
    """Every claim of the method's card, with the design settings of `conf/design.yaml` (optional:
    `claims: {<id>: {oracle: <arm>, behaviour: <name>, play_arm: <arm>, learn_metric: <metric>,
    check: {name: <CHECKS key>, arm: <arm>, ...}}}`)."""
    from experiments.run import conf_dir
    from paper.cards import parse_card

    card = parse_card((conf_dir(method).parent / "CARD.md").read_text())
    extra_path = conf_dir(method) / "design.yaml"
    extra = (yaml.safe_load(extra_path.read_text()) or {}).get("claims", {}) if extra_path.exists() else {}
    unknown = sorted(set(extra) - {c.id for c in card.claims})
    if unknown:
        raise ValueError(f"{extra_path}: claims {unknown} are not in the card")
    specs = []
    for claim in card.claims:
        arms = list(dict.fromkeys(t.arm for t in claim.terms))
        control = arms[-1]
        d = extra.get(claim.id) or {}
        specs.append(ClaimSpec(claim.id, arms, control, claim.margin, d.get("oracle"), d.get("behaviour"),
                               d.get("play_arm"), list(claim.envs), d.get("learn_metric"), d.get("check"),
                               claim.metric, claim.window))
    return specs


def env_tag(cfg: Any) -> str:
    """The env tag a run of `cfg` writes its results under (common.fit: the env's tag, else its name)."""
    env = cfg.env if isinstance(cfg.env, dict) else vars(cfg.env)
    return str(env.get("tag") or env["name"])


def difference_kind(a: dict[str, Any], b: dict[str, Any]) -> str:
    """What two arms' configs differ in: `schedule`, `sampling`, `credit` (method settings only) or
    `objective` (anything else, e.g. the KL term or the loss aggregation)."""
    fa, fb = flatten(a), flatten(b)
    keys = {k for k in fa.keys() | fb.keys() if fa.get(k) != fb.get(k) and not k.startswith(IGNORED_KEYS)}
    if any(k in SCHEDULE_KEYS for k in keys):
        return "schedule"
    if any(k in SAMPLING_KEYS for k in keys):
        return "sampling"
    if keys and all(k.startswith("method.") for k in keys):
        return "credit"
    return "objective" if keys else "same"


def method_check(method: str, spec: ClaimSpec, pilots: dict[str, dict[str, Any]]) -> dict[str, Any] | None:
    """The claim's own gate (`ClaimSpec.check`) on its arm's pilot; None where the claim has none,
    `pass: None` where the pilot was not run (--no-pilots)."""
    if spec.check is None:
        return None
    import importlib

    settings = dict(spec.check)
    name, arm = settings.pop("name"), settings.pop("arm", spec.control)
    if arm not in pilots:
        return {"name": name, "arm": arm, "pass": None}
    checker = importlib.import_module(f"replications.{method}.design").CHECKS[name]
    return {"name": name, "arm": arm, **checker(pilots[arm], spec.margin, **settings)}


# ---- the gates ------------------------------------------------------------------------------------
def gate(learnable: dict[str, Any], positive: dict[str, Any] | None, separation: dict[str, Any],
         check: dict[str, Any] | None = None) -> str:
    """void, design null, `partial` (no gate failed, but one was not measured: --no-pilots, or a
    separation figure that came out undefined), or pass. A gate that does not apply (training-free: its
    `why`; arms that differ in the objective: no same-batch figure) is no failure and no gap."""
    if learnable.get("pass") is False or (positive is not None and positive.get("pass") is False) or \
            (check is not None and check.get("pass") is False):
        return "void"
    if separation.get("pass") is False:
        return "design null"
    unmeasured = (learnable.get("pass") is None and "why" not in learnable) or \
        (positive is not None and positive.get("pass") is None) or \
        (check is not None and check.get("pass") is None) or \
        (separation.get("pass") is None and separation.get("kind") in ("credit", "schedule", "sampling"))
    return "partial" if unmeasured else "pass"


def separation_of(spec: ClaimSpec, method: str, scale: str, cache: dict[str, Any],
                  work: Path) -> dict[str, Any]:
    """The third gate's figures for one claim (see the module docstring)."""
    if len(spec.arms) < 2:  # a claim about one arm's own gain: nothing to separate it from
        return {"kind": "gain", "correlation": None, "snr_ratio": None, "clip_fraction": None, "pass": None}
    if arm_config(method, spec.arms[0], scale).trainer.steps == 0:  # training-free: no update to separate
        return {"kind": "training-free", "correlation": None, "snr_ratio": None, "clip_fraction": None,
                "pass": None}
    play = spec.play_arm or spec.arms[0]
    if play not in cache:
        pieces = build(method, play, scale, work)
        cache[play] = (pieces, shared_batch(pieces))
    pieces, batch = cache[play]
    treated, control = spec.arms[0], spec.control
    cfgs = {arm: asdict(arm_config(method, arm, scale)) for arm in (treated, control)}
    kind = difference_kind(cfgs[treated], cfgs[control])
    out: dict[str, Any] = {"kind": kind, "correlation": None, "snr_ratio": None, "clip_fraction": None}
    if kind == "credit":
        label = labels(spec.behaviour, method, batch)
        compared, oracle = [treated, control], spec.oracle
        if oracle and difference_kind(cfgs[treated], asdict(arm_config(method, oracle, scale))) == "credit":
            compared.append(oracle)  # figures only: is the treated credit more than the oracle's signal?
        methods = {arm: arm_method(method, arm, scale) for arm in compared}
        n = pieces.cfg.trainer.tasks_per_step
        out.update(credit_separation(methods, treated, control, label, batch, n))
        if oracle in methods:
            out["oracle_correlation"], out["oracle_reversals"] = out.pop("_vs")[oracle]
        out.pop("_vs", None)
    elif kind == "schedule":  # the update is made with the multi-pass arm's schedule, whichever side it is on
        multi = schedule_arm({arm: cfgs[arm] for arm in (treated, control)})
        out["arm"] = multi
        multi_pieces = build(method, multi, scale, work)
        out.update(second_pass(multi_pieces, arm_method(method, multi, scale), batch, work))
        clip = out["clip_fraction"]  # NaN: no later pass was measured, which is no evidence either way
        out["pass"] = None if clip != clip else not clip < CLIP_MIN
    elif kind == "sampling":
        fractions = {}
        for arm in (treated, control):
            arm_pieces = pieces if arm == play else build(method, arm, scale, work)
            fractions[arm] = signal_fraction(shared_batch(arm_pieces).groups, arm_pieces.method)
        out["signal_fraction"] = fractions
        ratio = fractions[treated] / fractions[control] if fractions[control] else float("nan")
        out["pass"] = not abs(ratio - 1) < SAMPLING_BAND
    else:
        out["pass"] = None  # the arms differ in the objective (KL, aggregation): no same-batch figure
    return out


def credit_separation(methods: dict[str, Any], treated: str, control: str, label: np.ndarray, batch: Any,
                      n: int) -> dict[str, Any]:
    """The credit figures of `treated` against `control` on one shared batch (`methods`: name -> the
    Method whose credit each uses; more names: figures against them too, under `_vs`): correlation,
    reversals, credit gaps, signal-to-noise and its ratio, and the gate (`pass`: not a design null)."""
    values = {}
    for name, m in methods.items():
        adv = advantages_of(m, batch)  # once per arm (it was once per turn: SHARP's check never ended)
        values[name] = np.array([adv.scalar(k) for k in batch.keys])
    snr = {name: signal_to_noise(values[name], label, batch, n) for name in values}
    cells = cells_of(batch, methods[treated].agent_of)  # a pair: one group's rollouts of one agent
    out: dict[str, Any] = {"correlation": correlation(values[treated], values[control]),
                           "reversals": reversal_share(values[treated], values[control], cells),
                           "credit_gap": {name: credit_gap(values[name], label) for name in values},
                           "snr": snr}
    out["snr_ratio"] = snr[treated] / snr[control] if snr[control] not in (0, None) else float("nan")
    out["_vs"] = {name: (correlation(values[treated], values[name]),
                         reversal_share(values[treated], values[name], cells))
                  for name in values if name not in (treated, control)}
    out["pass"] = not (out["correlation"] > CORRELATION_MAX and abs(out["snr_ratio"] - 1) < SNR_BAND)
    return out


def schedule_arm(cfgs: dict[str, dict[str, Any]]) -> str:
    """Of two arms that differ in the update schedule, the one with more passes over a batch (PPO epochs
    x minibatches): the one whose later passes are off-policy. (CANOPY's `full > two-epochs` names the
    single-pass arm first; updating with it measured one pass and no clip fraction at all.)"""
    def passes(arm: str) -> int:
        t = cfgs[arm]["trainer"]
        return int(t.get("ppo_epochs", 1)) * int(t.get("minibatches", 1))

    return max(cfgs, key=passes)


def arm_method(method: str, arm: str, scale: str) -> Any:
    from common.fit import resolve
    from replications import METHODS

    return resolve(arm_config(method, arm, scale), METHODS).method


def design(method: str, scale: str = "cpu", pilots: bool = True, only: str | None = None) -> dict[str, Any]:
    """Every claim's gates and figures (the shape of `DESIGN_KEYS`); `only`: the claims whose id matches
    this regular expression (`re.search`), the others left out of the result."""
    from common.provenance import git_state
    from experiments.run import conf_dir
    from paper.cards import parse_card

    card = parse_card((conf_dir(method).parent / "CARD.md").read_text())
    metric = card.eval_metric or "mean@k"
    main_arm = card.main_arm or next(iter(card.arms))
    work = Path(arm_config(method, main_arm, scale).work_dir) / "design" / method
    cache: dict[str, Any] = {}
    gains: dict[str, dict[str, Any]] = {}
    claims: dict[str, Any] = {}
    other_env: dict[str, str] = {}
    for spec in [s for s in claim_specs(method) if only is None or re.search(only, s.id)]:
        # a claim about another setting than the one its arms play at this scale is not checked here
        # (CCPO's scales each play one thinker_solver setting; SHARP's arms pick their env themselves)
        tag = env_tag(arm_config(method, spec.arms[0], scale))
        if spec.envs is not None and tag not in spec.envs:
            other_env[spec.id] = f"its arms play {tag} at scale {scale}; the claim is about {spec.envs}"
            continue
        if pilots:
            check_arm = (spec.check or {}).get("arm", spec.control) if spec.check else None
            for arm in filter(None, (spec.control, spec.oracle, check_arm)):
                if arm not in gains:
                    gains[arm] = pilot_gain(method, arm, scale, metric, work / "pilots")
        learn = gains.get(spec.control)
        if learn and spec.learn_metric:
            learn = {**learn, **metric_gain(learn, spec.learn_metric)}
        learnable = {"arm": spec.control, "gain": learn["gain"] if learn else None,
                     "metric": spec.learn_metric or metric,
                     "pass": (learn["gain"] >= spec.margin) if learn else None}
        if arm_config(method, spec.control, scale).trainer.steps == 0:  # training-free: nothing to learn
            learnable.update({"pass": None, "why": "training-free (trainer.steps=0): nothing to learn"})
        positive = None
        if spec.oracle is not None:
            o, c = gains.get(spec.oracle), gains.get(spec.control)
            m, w = spec.metric, spec.window
            diff = claim_metric_value(o, m, w) - claim_metric_value(c, m, w) if o and c else None
            passed = None if diff is None else diff >= spec.margin
            positive = {"arm": spec.oracle, "gain": diff, "pass": passed, "metric": spec.metric}
        separation = separation_of(spec, method, scale, cache, work)
        check = method_check(method, spec, gains)
        claims[spec.id] = {"learnable": learnable, "positive_control": positive, "separation": separation,
                           "gate": gate(learnable, positive, separation, check), "margin": spec.margin,
                           "arms": spec.arms, "check": check}
    episodes = sum(len(b.episodes) for _, b in cache.values())
    return {"claims": claims, "episodes": episodes, "code": git_state(), "scale": scale, "metric": metric,
            "pilots": gains, "split": "dev", "other_env": other_env, "only": only}


def keep_other_settings(result: dict[str, Any], previous: dict[str, Any] | None) -> dict[str, Any]:
    """`result` plus `previous`'s (the replaced file's) entries of the claims it did not check: another
    setting's (`other_env`) or left out by `--claims` (`only`), and the pilots of arms it did not pilot, each
    marked `checked_at` (scale, code)."""
    if not previous:
        return result
    claims = dict(result["claims"])
    only = result.get("only")
    skipped = set(result.get("other_env", {})) | {cid for cid in previous.get("claims", {})
                                                    if only is not None and not re.search(only, cid)}
    for cid in sorted(skipped):
        entry = previous.get("claims", {}).get(cid)
        if entry is not None and cid not in claims:
            at = entry.get("checked_at") or {"scale": previous.get("scale"), "code": previous.get("code")}
            claims[cid] = {**entry, "checked_at": at}
    pilots = dict(result.get("pilots", {}))
    for arm, entry in previous.get("pilots", {}).items():  # the pilots the kept claims read
        if arm not in pilots:
            at = entry.get("checked_at") or {"scale": previous.get("scale"), "code": previous.get("code")}
            pilots[arm] = {**entry, "checked_at": at}
    return {**result, "claims": claims, "pilots": pilots}


def main(argv: list[str] | None = None) -> int:
    from replications import METHODS

    p = argparse.ArgumentParser(prog="python -m experiments.design", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--method", required=True, choices=sorted(METHODS))
    p.add_argument("--scale", default="cpu")
    p.add_argument("--no-pilots", action="store_true", help="the shared-batch figures only (learnable: null)")
    p.add_argument("--claims", default=None, help="only the claims whose id matches this regex (re.search)")
    p.add_argument("--out", default="results", help="results/<method>/design.json under this folder")
    args = p.parse_args(argv)
    t0 = time.time()
    try:
        result = design(args.method, args.scale, pilots=not args.no_pilots, only=args.claims)
    except (ValueError, RuntimeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    path = Path(args.out) / args.method / "design.json"
    result = keep_other_settings(result, json.loads(path.read_text()) if path.exists() else None)
    atomic_write_json(path, result)
    for cid, c in result["claims"].items():
        print(f"[design] {cid}: {c['gate']}  (learnable {c['learnable']['gain']}, {c['separation']})")
    print(f"[design] wrote {path} in {time.time() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    from experiments.design import main as design_main
    sys.exit(design_main())
