"""The layout rules `make lint` enforces, in CI too (#35): 110 columns everywhere ruff looks, no source
file over 400 lines, no method.py over 200."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from check_sizes import too_long  # noqa: E402


def test_no_file_is_over_its_size_limit():
    assert too_long(ROOT) == []


def test_no_line_is_over_110_columns():
    ruff = [sys.executable, "-m", "ruff", "check", "--select", "E501", "--output-format", "concise", "."]
    done = subprocess.run(ruff, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:]
