"""Follow launches made with `--cluster slurm --no-wait` (or ones you stopped waiting for).

    python -m slurm status  [LAUNCH] [--all]        # make status: per cell SLURM state + run dir
    python -m slurm collect [LAUNCH] [--no-wait]    # make collect: wait, report failures, print the tables

LAUNCH is a launch id (or a unique part of one) under `<work_dir>/launches/`; default: the latest.
The work folder is `.cache` unless --work-dir or REPLICATE_WORK_DIR says otherwise. `collect`
prints the tables with the function the launch recorded (`experiments.replicate:collect_tables`
for `make replicate-*`), or with `--entry module:function`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from slurm.jobs import Launch, launches, sacct, tail
from slurm.monitor import snapshot, summary


def find_launch(work_dir: Path, query: str | None) -> Launch:
    paths = launches(work_dir)
    if not paths:
        raise SystemExit(f"no launches under {work_dir / 'launches'}: submit one with "
                         "make replicate-<method> CLUSTER=slurm (or pass --work-dir)")
    if query is None:
        return Launch.load(paths[-1])
    matches = [p for p in paths if query in p.stem]
    if len(matches) != 1:
        known = ", ".join(p.stem for p in paths[-10:])
        raise SystemExit(f"{'no' if not matches else 'more than one'} launch matches {query!r}; "
                         f"recent: {known}")
    return Launch.load(matches[0])


def print_status(record: Launch) -> None:
    states = snapshot(record.entries, sacct([e.job_id for e in record.entries if e.job_id]))
    print(f"launch {record.id}: {record.method} scale={record.scale}, profile {record.profile.get('name')}, "
          f"job array {record.array_job_id or '-'}, submitted {record.created} from {record.cwd}")
    width = max(len(s.entry.label) for s in states)
    print(f"  {'cell':<{width}}  {'job':<12} {'slurm':<13} {'cell state':<10} detail")
    for s in states:
        print(f"  {s.entry.label:<{width}}  {s.entry.job_id or '-':<12} {s.slurm:<13} {s.outcome:<10} "
              f"{s.detail}")
        if s.outcome == "failed" and s.entry.job_id:
            log = tail(s.entry.paths().stderr, 3) or tail(s.entry.paths().stdout, 3)
            print("\n".join(f"  {'':<{width}}  | {line}" for line in log))
    print(f"  {summary(states)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["status", "collect"])
    parser.add_argument("launch", nargs="?", default=None,
                        help="launch id or part of it (default: the latest)")
    parser.add_argument("--work-dir", default=os.environ.get("REPLICATE_WORK_DIR", ".cache"))
    parser.add_argument("--all", action="store_true", help="status: every launch, not only the latest")
    parser.add_argument("--no-wait", action="store_true",
                        help="collect: print the tables of what finished, do not wait")
    parser.add_argument("--entry", default=None,
                        help="collect: the tables function, module:function(method, scale, cells) -> str "
                             "(default: the one the launch recorded)")
    args = parser.parse_intermixed_args(sys.argv[1:] if argv is None else argv)
    work_dir = Path(args.work_dir)

    if args.command == "status":
        records = ([Launch.load(p) for p in launches(work_dir)] if args.all
                   else [find_launch(work_dir, args.launch)])
        for record in records:
            print_status(record)
        return 0

    from slurm.launch import collect

    record = find_launch(work_dir, args.launch)
    if args.entry:
        record.aggregate = args.entry
    print(f"[slurm] collecting launch {record.id} ({record.method} scale={record.scale})", file=sys.stderr)
    return collect(record, wait=not args.no_wait)


if __name__ == "__main__":
    sys.exit(main())
