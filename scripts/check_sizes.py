"""The layout rules `make lint` enforces beside ruff (which checks the 110 columns): no source file over
`MAX_LINES` lines (split a module by responsibility before it grows past that), and no `method.py`
of a method over `MAX_METHOD_LINES` (a method's idea reads in one sitting; helpers go in its own modules).

    python scripts/check_sizes.py        # exit 1 and one line per file over its limit
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
MAX_METHOD_LINES = 200
SOURCES = ("common", "envs", "experiments", "replications", "paper", "slurm", "bench", "scripts", "tests")


def too_long(root: Path = ROOT) -> list[str]:
    """'path: n lines (limit m)' for every tracked or new Python file over its limit."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *SOURCES],
                            cwd=root, capture_output=True, text=True, check=True).stdout.split()
    out = []
    for rel in sorted(p for p in listed if p.endswith(".py") and (root / p).is_file()):
        n = len((root / rel).read_text().splitlines())
        is_method = rel.startswith("replications/") and rel.endswith("/method.py")
        limit = MAX_METHOD_LINES if is_method else MAX_LINES
        if n > limit:
            out.append(f"{rel}: {n} lines (limit {limit})")
    return out


if __name__ == "__main__":
    problems = too_long()
    for line in problems:
        print(line)
    sys.exit(1 if problems else 0)
