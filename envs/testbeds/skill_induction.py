"""The `induction` layout of `skill_families` (`env.layout=induction`): documents a tiny model can follow
and write by copying the next token, issue #41.

The `numbered` layout (the first one) lists a tool's number *before* its step (`1 sort 2 check 3 read`)
and the solver answers a number, so following a document takes two hops a tiny transformer does not
make: the document's k-th word, then the number printed before that word. Here every lookup is an
induction copy, the token that followed an earlier occurrence of the current one:

    skill: read sort check                     <- the document
    tools: sort 1 check 2 read 3 clean 4       <- each step, then its tool's number
    skill:                                     > read 3     (the word after `skill:`, then after `read`)
    ok
    read                                       > sort 1     (the word after `read` in the document ...)
    ok
    sort                                       > check 2

A solve turn's prompt ends with the step last found (`skill:` before any), so the next step is the word
after it in the document and its number the token after that step in the tools line. A call is
`<step> <number>`, a listed pair; anything else is an invalid action (a miss, penalized). After a miss
the prompt repeats (`no` then the same step). The curator sees what was found as two lines, the steps
and the numbers called, so an abstract document copies the first and a concrete one the second:

    skill: read
    tools: sort 1 check 2 read 3 clean 4
    found: read sort
    calls: 3 1
    curate:                                    > <skill> read sort </skill>

Tool numbers are still drawn afresh for every instance, so a concrete document (`3 1`) still fails on the
next task of the chain, and abstract against concrete stays a real test. Tasks, splits and the scripted
demonstrator's choices are those of the numbered layout (the same random draws): only the text differs.

**The `copy` layout** (`env.layout=copy`, issue #41's second attempt): the induction layout measured at
chance on both hops (`replications/skillrise/CARD.md`), and under the suite's tokenizer neither hop was a
copy of one token: digits are pre-tokenized apart from their space (` 1` is ` `, `1`), and the prompt's
last step starts its line without a space (`ok\nread`: `read`, not the document's ` read`). The copy layout
labels tools with letters (`a`, `b`, ...: ` a` is one token, like ` read`; tested on the trained tokenizer)
and ends a solve prompt with the document's line as far as it was followed, `skill:` then the steps found:

    skill: read sort check
    tools: sort a check b read c clean d
    skill:                                     > read c
    ok
    skill: read                                > sort a     (` sort` follows `skill: read` in the document)

Concrete documents are letters (`c a`); the tasks, their draws and what is scored are the induction layout's.
"""

from __future__ import annotations

FIRST = "skill:"  # the prompt before any step is found: the document follows the same token
LETTERS = tuple("abcdefghi")  # the copy layout's tool labels (the numbered and induction layouts: 1..9)


def tools_line(tools: list[list[str]]) -> str:
    """`tools: sort 1 clean 2 ...`: each step, then its tool's number (the token an induction copies)."""
    return "tools: " + " ".join(f"{step} {name}" for name, step in tools)


def call(step: str, name: str) -> str:
    """A solve action: ` <step> <number>` (with the leading space the numbered layout's actions have)."""
    return f" {step} {name}"


def parse_call(action: str, step_of: dict[str, str]) -> str | None:
    """The tool number a solve action calls: the action must be exactly `<step> <number>`, a pair of this
    task's tools line; None otherwise (an invalid action).

    >>> parse_call(" read 3", {"3": "read", "1": "sort"})
    '3'
    >>> [parse_call(a, {"3": "read"}) for a in (" sort 3", " 3", "read 3 3", " read 4")]
    [None, None, None, None]
    """
    parts = action[:200].split()
    if len(parts) != 2 or step_of.get(parts[1]) != parts[0]:
        return None
    return parts[1]


def solve_prompt(found_steps: list[str], copy: bool = False) -> str:
    """The last step found (the word whose successor in the document is the next step), or `skill:`; in the
    copy layout `skill:` and every step found, the document's line as far as it was followed.

    >>> solve_prompt(["read", "sort"]), solve_prompt(["read", "sort"], copy=True), solve_prompt([], True)
    ('sort', 'skill: read sort', 'skill:')
    """
    if copy:
        return " ".join([FIRST, *found_steps])
    return found_steps[-1] if found_steps else FIRST


def solve_start(doc: str, tools: list[list[str]], found_steps: list[str], copy: bool = False) -> str:
    return f"skill: {doc}\n{tools_line(tools)}\n{solve_prompt(found_steps, copy)}"


def curate_start(doc: str, tools: list[list[str]], found: list[str]) -> str:
    """The curate prompt: the old document, the tools, the steps found and the numbers called, in order."""
    step_of = dict((n, s) for n, s in tools)
    steps = " ".join(step_of[n] for n in found)
    return f"skill: {doc}\n{tools_line(tools)}\nfound: {steps}\ncalls: {' '.join(found)}\ncurate:"
