"""`chain_tasks`' defective train tasks (`env_pool_with_audit`: the pool River's filter reads; the default
tasks, not the families). How they join the default pool, which stays otherwise unchanged:
`envs/testbeds/audit_pool.py`.

`share_<defect>` (0 by default) is an exact share of the train split; the task carries its label
(`defect`) and its defect's fields. The defects of a generated app-world set, each with what passes it (the
apps, the to-do lines and the demonstrator are the default tasks', `chain_tasks.py`):

- `weak` (Verifier-Too-Weak: `verifier: {"kind": "done"}`): the verifier checks only that the episode
  ended with `done`: any final state passes. The right play passes, and so does the shortcut: `done` at
  once (as the first action);
- `reject` (Instruction-Verifier-Mismatch: `verifier: {"kind": "record", "items": [[item, qty], ...]}`):
  the recorded final cart is not what the to-do lines ask: one item's quantity differs by one (within 1..5;
  +1 from 1, -1 from 5, else +-1 at random), the rest of the record is the task's (paid, the mail, the
  meeting). The right play fails; only the cart nobody asked for, with the rest of the task done, passes;
- `unsolvable` (Instruction-Environment-Mismatch: `missing: <item>`, one of the task's items): the shop
  does not stock it: `add <item> <qty>` answers `error: no item <item>`, as for an item the shop never
  sells (an error: no effect, the to-do line stays on that item). The verifier still wants the task's final
  state, that item in the cart: nothing passes.

`weak` pays the shortcut (`ChainTasksEnv.shortcut_defects`). The scripted demonstrator works from what the
apps show: when the shop has just answered that it does not stock the to-do line's item, it ends (`done`).
River's oracle therefore fails `reject` and `unsolvable` and passes `weak`.

Every episode of an environment whose pool has defects (a share > 0, all splits), and every episode of a
labelled task, also reports `solved` (the task's request met: the default verifier's verdict, whatever the
task's own verifier says), `shortcut` (ended with `done` without the request met: what earns `weak`'s reward
and fails a clean task), River's loop figures `repeat_rate` and `looped` (a turn whose call and observation
repeat an earlier turn's: a look-up made again after a busy refusal, say) and, not a metric, `record`: each
turn's (action, observation without the prompt `\\n> `; "" after the last) pair, which River's repetition
penalty reads. A fault or the turn budget ends an episode with neither `solved` nor `shortcut`.
"""

from __future__ import annotations

import random
from typing import Any

from envs.api.base import parse_int
from envs.testbeds.audit_pool import labelled, loop_info
from envs.testbeds.chain_apps import CALL

DEFECTS = ("weak", "reject", "unsolvable")


def with_defect(task: dict[str, Any], defect: str, rng: random.Random) -> dict[str, Any]:
    """`task` (a default task as drawn) labelled `defect`, with that defect's fields (drawn from `rng`)."""
    out = labelled(task, defect, DEFECTS, "chain_tasks")
    if defect == "weak":
        out["verifier"] = {"kind": "done"}
    elif defect == "reject":
        items = [[item, qty] for item, qty in task["items"]]
        i = rng.randrange(len(items))
        qty = items[i][1]
        items[i][1] = qty + 1 if qty == 1 else qty - 1 if qty == 5 else qty + rng.choice((-1, 1))
        out["verifier"] = {"kind": "record", "items": items}
    elif defect == "unsolvable":
        out["missing"] = rng.choice([item for item, _ in task["items"]])
    return out


class AuditedPlay:
    """Mixin (before `chain_tasks.ChainEpisode`, as `chain_tasks.AuditedEpisode`): a default play in a pool
    with defects: the task's own verifier, the item the shop lacks, and what River reads (the module
    docstring). On a clean task it plays, rewards and demonstrates as the default episode."""

    # the default episode's state this reads
    task: dict[str, Any]
    steps: list[tuple[str, ...]]
    cursor: int
    reply: str

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.pairs: list[tuple[str, str]] = []  # (action, observation) per turn
        self.met: bool | None = None  # the request met, decided when the episode ends with `done`

    def expert_action(self) -> str:
        missing, step = self.task.get("missing"), self.steps[self.cursor]
        if missing and step[:2] == ("buy", missing) and self.reply == f"error: no item {missing}":
            return "done"  # the shop does not stock it: nothing left to do
        action: str = super().expert_action()  # type: ignore[misc]
        return action

    def step(self, action: str) -> Any:
        result = super().step(action)  # type: ignore[misc]
        obs = result.next.text.removesuffix("\n> ") if result.next is not None else ""
        self.pairs.append((action.strip(), obs))
        if result.next is None:
            result.info.update(solved=bool(self.met), shortcut=self.met is False, **loop_info(self.pairs),
                               record={"turns": [list(p) for p in self.pairs],
                                       "defect": self.task.get("defect", "clean")})
        return result

    def apply(self, call: str) -> tuple[str, bool]:
        # the call the missing item changes, exactly as the shop parses it (`chain_apps.apply_call`)
        missing, m = self.task.get("missing"), CALL.match(call)
        if missing and m is not None:
            verb, args = m.group(1), m.group(2).split()
            if verb == "add" and len(args) == 2 and args[0] == missing and parse_int(args[1]) is not None:
                return f"error: no item {missing}", False
        out: tuple[str, bool] = super().apply(call)  # type: ignore[misc]
        return out

    def solved(self, task: dict[str, Any] | None = None) -> bool:
        """The task's own verifier on the final state (called when the episode ends with `done`); the
        request met (the default verdict) is kept as `met`."""
        base = super().solved  # type: ignore[misc]
        if task is not None:
            return bool(base(task))
        self.met = bool(base())
        verifier = self.task.get("verifier")
        if verifier is None:
            return self.met
        if verifier["kind"] == "done":
            return True
        return bool(base({**self.task, "items": verifier["items"]}))
