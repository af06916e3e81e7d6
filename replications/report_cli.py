"""The command line every method report shares (`replications/<method>/report.py` or `claims.py`):
build the text from `--results` at `--scale`, write it to `results/<method>/<name>-<scale>.md`,
print it. `make replicate-<method>` calls the module's `main` after the summary table."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path


def report_main(argv: list[str] | None, module: str, doc: str | None, build: Callable[[Path, str], str]) -> int:
    """`module` is e.g. "replications.ccpo.report"; the output is named after its method and file."""
    p = argparse.ArgumentParser(prog=f"python -m {module}", description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default="results")
    p.add_argument("--scale", default="cpu")
    args = p.parse_args(argv)
    _, method, name = module.split(".")
    text = build(Path(args.results), args.scale)
    out = Path(args.results) / method / f"{name}-{args.scale}.md"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    return 0
