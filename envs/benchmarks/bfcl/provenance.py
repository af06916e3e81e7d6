"""`bfcl`'s provenance events (#46): which earlier turn's output each call step used, for IAPO's influence
graph (`replications/iapo/graph.py`, `provenance_annotator`), read from the text of the episode alone.

**Values.** The values an action writes are the literal argument values of its calls as `calls.py` decodes
them (refused calls' included): strings and finite numbers, nested ones included (in lists, tuples, sets and
dict values; dict keys, like keyword and function names, are the agent's vocabulary, not data; booleans
and None are left out), and strings without a letter or a digit (`''`, `'..'`) are left out.

**Tokens and matching.** The tokens of a text are its maximal runs of letters, digits, `_`, `.` and `-`, a
trailing `.` removed (a sentence's full stop), that hold a letter or a digit (`Move 'final_report.pdf' to
temp.` has `Move`, `final_report.pdf`, `to`, `temp`; `/alex/workspace`: `alex`, `workspace`). A value
appears in a text when:

- a string that is one token (`temp`, `final_report.pdf`, `USR002`, `-5`) is one of the text's tokens;
- another string (`budget analysis`, `@Julia`, `a/b`) occurs in the text as a plain substring;
- a number equals a token that is a numeral (digits, an optional `-` in front and an optional fraction:
  36, 36.0 and the token `36.00` are all equal; the string `'36'` is a string, matched as one).

Case counts everywhere.

**Where a value comes from.** The episode is read in the order the agent saw and wrote it: the first
observation (BFCL's system prompt and the first user turn), action 0, what was shown after it, action 1,
and so on. A value's origin is the first of these texts it appears in:

- the first observation or a later user turn (the observation after an action that ends the turn, without
  the environment's note on an invalid action in front; on a `miss_func` turn BFCL's added-functions
  message): the user input, source -1;
- the tool results shown after call step i (their `content`s, as shown; not the echoed call in `name`):
  turn i;
- an action (its text as written; any action: call steps, text replies, `[]`, invalid ones): the agent's
  own, no source (`[mkdir(dir_name='x7')]` then `[ls()]` showing `x7` does not make `x7` the `ls`'s).

**Events.** Turn j is the action's index in the episode (every action is one turn). A call step j is
failed when one of its calls was refused (not run), raised (`Error during execution: ...`) or returned an
error (a dict with an `"error"` key, BFCL's apps' convention); an invalid action (malformed calls) is
failed too. A call step that is not failed gets one `Event("provenance", j, {"source": s, "kind": k})` per
distinct origin s of its values: `input` for s = -1, `success_utilization` for an earlier turn s. A failed
action j right after a failed action j - 1 (whether or not a user turn came between) gets
`failed_utilization` from j - 1, and nothing else. A text reply or `[]` (the end of the turn) gets none and
is not failed. So every (turn, source) pair has one event at most.

    user: Move 'final_report.pdf' within document directory to 'temp' directory in document. ...
    0 [cd(folder='document')]  -> {"current_working_directory": "document"}        source -1 (document)
    1 [ls()]  -> {"current_directory_content": ["final_report.pdf", "previous_report.pdf"]}   none
    2 [cat(file_name='previous_report.pdf')]  -> {"file_content": "Year203 This is ..."}       turn 1
    3 [mkdir(dir_name='temp'), mv(source='final_report.pdf', destination='temp')]         source -1
    4 [cd(folder='nowhere')]  -> {"error": "cd: 'nowhere': No such file or directory"}  none (failed)
    5 [cd(folder='Year203')]  -> {"error": ...}              turn 4 (failed_utilization; not turn 2)
    6 []                                                                               none

The events change no observation, reward, info, split or the demonstrator's plays (pinned by
tests/envs/benchmarks/test_bfcl_pins.py). The machinery (values, tokens, matching, origins, events) is
shared with `tau2`: `envs/api/provenance.py`.
"""

from __future__ import annotations

from envs.api.provenance import USER, Provenance, tokens, values

__all__ = ["USER", "Provenance", "tokens", "values"]
