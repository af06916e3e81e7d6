"""SkillRise's gates before RL (issue #41) that the generic design check cannot measure: what the warm start
does with documents, on the **dev** split, before any arm trains.

    flock /tmp/cpu-heavy.lock nice python -m replications.skillrise.gates   # -> results/skillrise/gates.json
    python -m replications.skillrise.gates --setting prior   # -> results/skillrise/gates-prior.json

One warm start (the `skillrise-ind` arm's, shared by every arm of the setting) plays the dev families'
chains, `K_CHAINS` per family at the evaluation's temperature, three ways:

- `own`: chains as SkillRise plays them, each task reading the document the warm start's own curator wrote
  after the task before;
- `none`: the same tasks without a document (the grpo arm's evaluation);
- `oracle`: chains reading the right abstract document (the first steps of the hidden order that the task
  before asked for; the `oracle` arm).

Gates (thresholds of the issue, fixed before this script first ran):

1. `solver_follows`: with the right document (`oracle`) success at plans 3 and 4 is >= 0.8 each;
2. `curator_writes`: the share of the warm start's curate turns (`own`) that write a right abstract document
   (an abstract prefix of the true order) is >= 0.2;
3. `own_documents_help`: success at the later positions (plans 3 and 4, pooled) with the warm start's own
   documents minus without a document is >= 0.1.

The fourth gate, the oracle arm beating GRPO by the claim's margin after RL, is the design check's positive
control (`conf/design.yaml`, `results/skillrise/design.json`). Intervals: 95% bootstrap over families.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import numpy as np

K_CHAINS = 16  # chains per dev family for each way of playing (16 families x 16 = 256 chains)
SETTINGS = ("ind", "prior")  # the arms' suffix: the induction layout, or it with a prior over orders


def arms(setting: str = "ind") -> dict[str, str]:
    """The arm of each way of playing in a setting."""
    if setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS}; got {setting!r}")
    return {"own": f"skillrise-{setting}", "none": f"grpo-{setting}", "oracle": f"oracle-{setting}"}


FOLLOW_MIN, RIGHT_MIN, HELP_MIN = 0.8, 0.2, 0.1
LATER = (3, 4)  # the plans of chain positions 1 and 2


def bootstrap(per_family: list[float], seed: int = 0, n: int = 2000) -> list[float]:
    """The mean of family-level values and its 95% bootstrap interval over families."""
    x = np.array(per_family, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(n, len(x)))].mean(1)
    return [float(x.mean()), float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))]


def summarize(groups: list[Any], families: dict[str, str]) -> dict[str, Any]:
    """Per plan: success (with its interval over families); later positions pooled; the curate turns'
    document shares where there are curate turns."""
    by_family: dict[str, dict[int, list[float]]] = {}
    for g in groups:
        by_family.setdefault(families[g.task_id], {}).setdefault(g.tier, []).extend(
            float(e.success) for e in g.episodes)
    out: dict[str, Any] = {"families": len(by_family), "plays": sum(len(g.episodes) for g in groups)}
    for plan in sorted({g.tier for g in groups}):
        out[f"plan{plan}"] = bootstrap([float(np.mean(v[plan])) for v in by_family.values()])
    out["later"] = bootstrap([float(np.mean([s for p in LATER for s in v[p]])) for v in by_family.values()])
    curate = [e for g in groups for e in g.extra.get("curate", [])]
    if curate:
        out["curate_turns"] = len(curate)
        for kind in ("abstract", "right", "concrete", "empty", "other"):
            out[f"doc_{kind}"] = float(np.mean([bool(e.info.get(f"doc_{kind}")) for e in curate]))
        out["invalid_curate"] = float(np.mean([any(ev.kind == "invalid_action" for ev in e.events)
                                               for e in curate]))
    solves = [e for g in groups for e in g.episodes]
    out["invalid_solve_turns"] = float(np.mean([any(ev.kind == "invalid_action" for ev in e.events)
                                                for e in solves]))
    out["tokens_per_solve_turn"] = float(np.mean([len(t.action_ids) for e in solves for t in e.turns]))
    return out


def paired_later(own: list[Any], none: list[Any], families: dict[str, str]) -> list[float]:
    """own - none at the later positions: the per-family difference, bootstrapped over families."""
    def per_family(groups: list[Any]) -> dict[str, float]:
        acc: dict[str, list[float]] = {}
        for g in groups:
            if g.tier in LATER:
                acc.setdefault(families[g.task_id], []).extend(float(e.success) for e in g.episodes)
        return {f: float(np.mean(v)) for f, v in acc.items()}

    a, b = per_family(own), per_family(none)
    return bootstrap([a[f] - b[f] for f in sorted(a)])


def measure(scale: str = "cpu", setting: str = "ind") -> dict[str, Any]:
    from common.episode import tasks_of
    from common.fit import resolve
    from experiments.shared_batch import arm_config, build
    from replications import METHODS

    t0 = time.time()
    ways = arms(setting)
    work = Path(arm_config("skillrise", ways["own"], scale).work_dir) / "design" / "skillrise"
    pieces = build("skillrise", ways["own"], scale, work)  # the warm start of the setting (cached)
    dev = tasks_of(pieces.env.task_set()["dev"])
    families = {t.id: t.data["family"] for t in dev}
    plays: dict[str, list[Any]] = {}
    for way, arm in ways.items():
        m = resolve(arm_config("skillrise", arm, scale, f"eval.k={K_CHAINS}"), METHODS).method
        random.seed(0)
        plays[way] = m.play(pieces.rollout, dev, 0, mode="eval")
    out: dict[str, Any] = {way: summarize(groups, families) for way, groups in plays.items()}
    out["own_minus_none_later"] = paired_later(plays["own"], plays["none"], families)
    out["oracle_minus_none_later"] = paired_later(plays["oracle"], plays["none"], families)
    follows = min(out["oracle"][f"plan{p}"][0] for p in LATER)
    out["gates"] = {
        "solver_follows": {"value": follows, "min": FOLLOW_MIN, "pass": follows >= FOLLOW_MIN},
        "curator_writes": {"value": out["own"]["doc_right"], "min": RIGHT_MIN,
                           "pass": out["own"]["doc_right"] >= RIGHT_MIN},
        "own_documents_help": {"value": out["own_minus_none_later"][0], "min": HELP_MIN,
                               "pass": out["own_minus_none_later"][0] >= HELP_MIN},
    }
    from common.provenance import git_state

    out.update({"split": "dev", "scale": scale, "chains_per_family": K_CHAINS, "arms": ways,
                "temperature": float(pieces.cfg.eval.temperature), "seconds": round(time.time() - t0),
                "code": git_state()})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m replications.skillrise.gates", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", default="cpu")
    p.add_argument("--setting", default="ind", choices=SETTINGS)
    p.add_argument("--out", default=None, help="results/skillrise/gates.json (ind), gates-<setting>.json")
    args = p.parse_args(argv)
    args.out = args.out or ("results/skillrise/gates.json" if args.setting == "ind"
                            else f"results/skillrise/gates-{args.setting}.json")
    result = measure(args.scale, args.setting)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    for name, g in result["gates"].items():
        print(f"[gates] {name}: {g['value']:.3f} (min {g['min']}) {'pass' if g['pass'] else 'FAIL'}")
    for way in result["arms"]:
        r = result[way]
        print(f"[gates] {way}: " + " ".join(f"plan{p} {r[f'plan{p}'][0]:.3f}" for p in (2, 3, 4))
              + (f" right {r['doc_right']:.3f} abstract {r['doc_abstract']:.3f}" if "doc_right" in r else ""))
    print(f"[gates] wrote {args.out} in {result['seconds']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
