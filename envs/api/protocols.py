"""Environment features a method may need, as runtime-checkable protocols.

A method names the protocols it needs with its settings (`Method.env_protocols()`); the run's
checks (`common.fit.resolve`) refuse an environment that lacks one before anything starts, with
the method, the protocol and the environment named.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable


class ReplayValue(Protocol):
    value: float  # the re-scored outcome of the episode with some agents masked


@runtime_checkable
class CounterfactualReplay(Protocol):
    """Re-scores a finished episode with some agents' contributions masked, without sampling
    (SHARP's coalition value v(S)): `replay(record, masked).value`, with `record` the episode's
    `info["record"]` and `masked` the 0-based indices of the masked agents."""

    def replay(self, record: dict[str, Any], masked: frozenset[int]) -> ReplayValue: ...


@runtime_checkable
class AuditLabels(Protocol):
    """Train tasks carry audit labels of their defects (`env_pool_with_audit`; River's filter reads them):
    `defect_of(task)` is a task's label, "clean" or the kind of its defect, and `shortcut_defects()` the
    kinds whose reward a shortcut earns (a behaviour that fails on clean tasks)."""

    def defect_of(self, task: dict[str, Any]) -> str: ...

    def shortcut_defects(self) -> frozenset[str]: ...


def describe(protocol: type) -> str:
    """The protocol's name and first docstring line, for error messages."""
    doc = (protocol.__doc__ or "").strip().splitlines()
    return f"{protocol.__name__} ({doc[0].rstrip(',')})" if doc else protocol.__name__
