"""A method's own tables, beside the ones every method gets (runs, claims, final, tiers).

An analysis that belongs to one method (CCPO's help/hurt rates, SHARP's compute per arm) is
declared in `replications/<method>/tables.py`:

    EXTRA_TABLES: dict[str, ExtraTable] = {"thinker": thinker_table}

Each entry is a pure function of the method's finished runs (`paper.load.Run`, sorted by env, arm
and seed) that returns a `Table`. `make paper` writes it as `tables/<method>-<name>.{md,tex}` and
shows it, with its caption, in the method's section of REPORT.md; `make replicate-<method>`
prints the same section. Methods are the names of the `replications.METHODS` registry; a method
without `tables.py` has no extra tables.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable

from paper.load import Run
from paper.tables import Table

ExtraTable = Callable[[list[Run]], Table]


def extra_tables(method: str) -> dict[str, ExtraTable]:
    """`replications.<method>.tables.EXTRA_TABLES`; {} for a method that is not in the registry or
    declares none. An import error propagates (the build reports it as the method's error)."""
    from replications import METHODS

    module = f"replications.{method}.tables"
    if method not in METHODS or importlib.util.find_spec(module) is None:
        return {}
    declared: dict[str, ExtraTable] = importlib.import_module(module).EXTRA_TABLES
    return declared


def build_extra(method: str, name: str, table_fn: ExtraTable, runs: list[Run]) -> Table:
    """One declared table, named `<method>-<name>` whatever the function called it."""
    return dataclasses.replace(table_fn(runs), name=f"{method}-{name}")
