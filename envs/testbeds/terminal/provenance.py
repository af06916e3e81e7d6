"""`terminal`'s provenance events (#46): which earlier turn's output each command used, for IAPO's influence
graph (`replications/iapo/graph.py`, `provenance_annotator`), read from the text of the episode alone.

**Names.** The names in a text are its maximal runs of ASCII letters, digits, `_`, `.` and `-` that hold a
letter or a digit (`grep k3 a` names `grep`, `k3`, `a`; `echo 47 > out`: `echo`, `47`, `out`; `wc -l b`:
`wc`, `-l`, `b`), compared exactly (case included).

**Where a name comes from.** The episode is read in the order the agent saw and wrote it: the task prompt
(the first observation, `task: <instruction>`), action 0, the output shown after it, action 1, its output,
and so on. A name's origin is where it first appears in that order:

- the prompt: the user input, source -1;
- the output shown after action i: turn i (the output is the observation without the environment's own
  `error: <why>` in front of a failed command's output; an invalid action and `submit` show none);
- an action: the agent's own name, no source (`echo 99 > out` then `cat out` showing `99` does not make
  `99` the `cat`'s: the agent wrote it first).

**Events.** Turn j is the action's index in the episode (every action counts: commands, invalid actions,
`submit`). Each command j that ran and worked gets one `Event("provenance", j, {"source": s, "kind": k})`
per distinct origin s of the names it writes: `input` for s = -1 (the task prompt, IAPO's direct user
input), `success_utilization` for an earlier turn s (j used what s's output showed). A failed action j (a
command that failed, an `error` event, or an invalid one, `invalid_action`) right after a failed action
j - 1 gets `failed_utilization` from j - 1 (it repeats that error or falls back on it and fails too:
`chain_tasks`' convention for the call after an error, kept to the failed ones: a command that works
after an error recovered from it, so the error was not carried on), and nothing else. `submit` runs no
command and gets none. So every (turn, source) pair has one event at most.

    task: find k3 in a, then that key in b; write its value to out
    0 $ grep k3 a      -> k3 k7     source -1 (k3, a)
    1 $ grep k7 b      -> k7 52     source -1 (b), turn 0 (k7)
    2 $ echo 52 > out               source -1 (out), turn 1 (52)
    3 $ submit                      none

The events change no observation, reward, info, split or the demonstrator's plays (pinned by
tests/envs/testbeds/test_terminal_pins.py).
"""

from __future__ import annotations

import re

from common.episode import Event

USER = -1  # the provenance source of the task prompt (graph.py's direct user input)
_NAME = re.compile(r"[A-Za-z0-9_.\-]+")


def names(text: str) -> list[str]:
    """The names in `text`, in order (see the module docstring).

    >>> names("grep k3 a; wc -l /task/b.txt >> out 2>&1 . -- ..")
    ['grep', 'k3', 'a', 'wc', '-l', 'task', 'b.txt', 'out', '2', '1']
    """
    return [n for n in _NAME.findall(text) if any(c.isalnum() for c in n)]


class Provenance:
    """One episode's origins of names and the events of each action, in order of play."""

    def __init__(self, prompt: str):
        self.origin: dict[str, int | None] = dict.fromkeys(names(prompt), USER)
        self.failed_last = False  # whether the previous action failed

    def step(self, turn: int, action: str, ran: bool, failed: bool, output: str) -> list[Event]:
        """The events of action `turn`: `ran` (a command the shell ran; not an invalid action or `submit`),
        `failed` (it failed, or it is invalid), `output` (the output shown after it, the `error: <why>` in
        front of a failed command's left out); then the action's and its output's new names get their
        origin."""
        written = names(action)
        events: list[Event] = []
        if failed and self.failed_last:
            events.append(Event("provenance", turn, {"source": turn - 1, "kind": "failed_utilization"}))
        elif ran and not failed:
            sources = sorted({s for n in written if (s := self.origin.get(n)) is not None})
            events += [Event("provenance", turn, {"source": s, "kind": "input" if s == USER
                                                  else "success_utilization"}) for s in sources]
        for n in written:
            self.origin.setdefault(n, None)
        for n in names(output):
            self.origin.setdefault(n, turn)
        self.failed_last = failed
        return events
