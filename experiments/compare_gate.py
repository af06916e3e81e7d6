"""What `make compare` does with its design check (experiments/compare_design.py, which writes it): the
cells whose (method, env tag) is void or a design null in `<out root>/compare/design-<scale>.json` do not
run (`design_blocks`), and the launch says which and why (`blocks_text`). Apart from the check itself so
that experiments/compare.py reads it without importing the check (which plans with experiments.compare)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GREY = ("void", "design null")  # the gates of a cell whose testbed cannot tell


def design_blocks(cells: list[Any], scale: str) -> dict[str, str]:
    """{cell name: why} for the cells of `make compare` that would run although their (method, env tag) is
    void or a design null in `<out root>/compare/design-<scale>.json` (where the cells' records go; GRPO's
    cells of a void column too): their runs could not be evidence. No file, or a cell it does not name:
    nothing blocked."""
    if not cells:
        return {}
    path = Path(cells[0].out_dir.split("/compare/")[0]) / "compare" / f"design-{scale}.json"
    if not path.exists():
        return {}
    gates = json.loads(path.read_text()).get("cells", {})
    out = {}
    for c in cells:
        entry = gates.get(c.method, {}).get(c.env)
        if entry and entry.get("gate") in GREY and not c.done:
            out[c.name] = f"{entry['gate']}: {entry['reason']}"
    return out


def blocks_text(blocks: dict[str, str], forced: bool) -> str:
    """What the head to head's design gate does to the cells it blocks (`design_blocks`), as lines that
    follow the dry run's matrix ("" when none)."""
    if not blocks:
        return ""
    head = (f"[compare] FORCE_DESIGN: {len(blocks)} cell(s) run although the design check says they cannot "
            "tell" if forced else f"[compare] {len(blocks)} cell(s) not run: the design check (make "
            "compare-design: results/compare/design-<scale>.json) says they cannot tell; FORCE_DESIGN=1 "
            "runs them")
    return "".join(["\n" + head, *(f"\n  {name}: {why}" for name, why in blocks.items())])
