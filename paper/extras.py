"""A method's own tables, beside the ones every method gets (runs, claims, final, tiers).

An analysis that belongs to one method (CCPO's help/hurt rates, SHARP's compute per arm) is
declared in `tables.py` beside the method's card, `replications/<method>/tables.py`:

    EXTRA_TABLES: dict[str, ExtraTable] = {"thinker": thinker_table}

Each entry is a pure function of the method's finished runs (`paper.load.Run`, sorted by env, arm
and seed) that returns a `Table`. `make paper` writes it as `tables/<method>-<name>.{md,tex}` and
shows it, with its caption, in the method's section of REPORT.md; `make replicate-<method>`
prints the same section. The file is found by its place, `<cards>/<method>/tables.py` next to the
`CARD.md` that the build reads (`--cards`, default `replications/`), and loaded from its path under
the module name `method_tables_<method>`: paper/ never imports the `replications` package (the file
itself may import what it needs). A method without `tables.py` has no extra tables.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path

from paper.load import Run
from paper.tables import Table

ExtraTable = Callable[[list[Run]], Table]


def tables_file(method: str, card_dirs: list[Path]) -> Path | None:
    """`<dir>/<method>/tables.py` beside the method's CARD.md, in the last of `card_dirs` that holds
    that card (as `paper.cards.load_cards`, where a later folder's card wins); None without one."""
    found = None
    for root in card_dirs:
        folder = Path(root) / method
        if (folder / "CARD.md").is_file():
            found = folder / "tables.py" if (folder / "tables.py").is_file() else None
    return found


def load_tables(method: str, path: Path) -> dict[str, ExtraTable]:
    """`EXTRA_TABLES` of the file at `path` (loaded once per path as `method_tables_<method>`). Any error
    while importing it, or a file without `EXTRA_TABLES`, propagates (the build reports it as the method's
    error)."""
    name = f"method_tables_{method}"
    module = sys.modules.get(name)
    if module is None or getattr(module, "__file__", None) != str(path):
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path} as a module")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # before running it, as an import would (dataclasses look it up)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[name]
            raise
    declared: dict[str, ExtraTable] = module.EXTRA_TABLES
    return declared


def extra_tables(method: str, card_dirs: list[Path]) -> dict[str, ExtraTable]:
    """The tables `method` declares beside its card in `card_dirs`; {} for none."""
    path = tables_file(method, card_dirs)
    return load_tables(method, path) if path is not None else {}


def build_extra(method: str, name: str, table_fn: ExtraTable, runs: list[Run]) -> Table:
    """One declared table, named `<method>-<name>` whatever the function called it."""
    return dataclasses.replace(table_fn(runs), name=f"{method}-{name}")
