"""`python -m envs check [NAME ...] [--tasks N] [--seed S] [--json]`: the environments' oracle
and random-policy check (`envs.api.check`); all of `ENVS` without a name. Exit 1 when any fails."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys

from envs.api.check import CheckResult, check_env, table


def main(argv: list[str] | None = None) -> int:
    from envs.registry import ENVS

    parser = argparse.ArgumentParser(prog="python -m envs", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check",
                           help="play each environment's oracle and a random policy; compare their rewards")
    check.add_argument("names", nargs="*", metavar="NAME",
                       help=f"environments (default: all of {', '.join(ENVS)})")
    check.add_argument("--tasks", type=int, default=64,
                       help="tasks played per environment, half train, half held-out")
    check.add_argument("--seed", type=int, default=0, help="seed of the task sample and of both policies")
    check.add_argument("--json", action="store_true",
                       help='print [{"env", "tasks", "oracle", "random"}, ...]')
    args = parser.parse_args(argv)
    if args.tasks < 2:
        parser.error(f"--tasks must be >= 2 (one train and one held-out task at least); got {args.tasks}")
    unknown = [n for n in args.names if n not in ENVS]
    if unknown:
        parser.error(f"unknown environment(s) {unknown}; choose from {list(ENVS)}")

    results: list[CheckResult] = []
    errors: list[str] = []
    for name in args.names or list(ENVS):
        try:
            results.append(check_env(name, args.tasks, args.seed))
        except Exception as e:  # a missing package or sandbox: that environment fails, the others still run
            errors.append(f"{name}: cannot run ({type(e).__name__}: {e})")
        if not args.json:
            print(f"checked {name}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in results]))
    else:
        print(table(results))
    problems = errors + [p for r in results for p in r.problems()]
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
