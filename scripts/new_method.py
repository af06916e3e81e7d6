"""Scaffold a new method: `make new-method NAME=foo` (= python scripts/new_method.py foo).

Writes `replications/foo/` from the templates in `replications/_template/`: every `*.tmpl` file,
at the same path without the suffix, with `{{name}}` (foo) and `{{Class}}` (Foo) filled in:

    __init__.py
    method.py            Foo(Method) and FooConfig(MethodConfig): a credit hook that calls the base class
    conf/config.yaml     conf/scale/{smoke,cpu,paper}.yaml, conf/replication.yaml (arm foo, env arith)
    CARD.md              the card, with its front matter and one example claim

and registers it in `replications/__init__.py` (the import, in sorted place, and `"foo": Foo` in
METHODS). Until a hook is edited the method is GRPO, so `make replicate-foo SCALE=smoke` runs at once.

A NAME that is not a lowercase Python identifier, that exists already, or that would shadow a
module is refused with one line `error: ...` and exit status 2, and nothing is written; no NAME
prints the usage (exit status 2).
"""

from __future__ import annotations

import importlib.machinery
import keyword
import re
import sys
from pathlib import Path

from common.util import atomic_write_text

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = Path("replications") / "_template"
REGISTRY = Path("replications") / "__init__.py"
SUFFIX = ".tmpl"
USAGE = ("usage: make new-method NAME=<name>   (or: python scripts/new_method.py <name>)\n"
         "  <name>: a lowercase Python identifier, e.g. iapo or in_flow_op; writes replications/<name>/\n"
         "  and registers it in replications/__init__.py")
_IMPORT = re.compile(r"from replications\.(\w+)\.method import (\w+)")


class Refused(Exception):
    """What the scaffold will not do (a NAME it refuses, a registry it cannot edit); the message
    says why and what to do instead."""


def class_name(name: str) -> str:
    """`in_flow_op` -> `InFlowOp` (the method's class; its config is `<Class>Config`)."""
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def _shadowed_module(name: str, root: Path) -> str | None:
    """Where a module called `name` already is, if anywhere: the suite's own top-level packages,
    the standard library, or anything importable from this interpreter's path."""
    if (root / name / "__init__.py").exists() or (root / f"{name}.py").exists():
        return f"the suite's own module {name} ({name}/)"
    if name in sys.stdlib_module_names:
        return f"the standard library's module {name}"
    script_dir = str(Path(__file__).resolve().parent)
    path = [p for p in sys.path if p and Path(p).resolve() != Path(script_dir)]
    spec = importlib.machinery.PathFinder.find_spec(name, path)
    if spec is not None:
        return (f"the installed module {name} "
                f"({spec.origin or next(iter(spec.submodule_search_locations or []), '?')})")
    return None


def check_name(name: str, root: Path) -> None:
    """Raise Refused when `name` cannot be a new method of the suite at `root`."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise Refused(f"NAME={name!r} is not a lowercase Python identifier (a letter, then letters, digits "
                      "or _), e.g. NAME=iapo or NAME=in_flow_op")
    if keyword.iskeyword(name):
        raise Refused(f"NAME={name!r} is a Python keyword (`import replications.{name}` cannot be written); "
                      "pick another NAME")
    folder = root / "replications" / name
    registry = (root / REGISTRY).read_text()
    if folder.exists():
        raise Refused(f"replications/{name}/ already exists; pick another NAME or edit that method")
    if re.search(rf"""^\s*["']{name}["']\s*:""", registry, re.MULTILINE):
        raise Refused(f"{name!r} is already in METHODS (replications/__init__.py); pick another NAME")
    if (root / "replications" / f"{name}.py").exists():
        raise Refused(f"NAME={name!r} would shadow the module replications.{name} (replications/{name}.py); "
                      "pick another NAME")
    where = _shadowed_module(name, root)
    if where is not None:
        raise Refused(f"NAME={name!r} would shadow {where}; pick another NAME, e.g. {name}_rl")
    cls = class_name(name)
    if re.search(rf"\bimport .*\b{cls}\b", registry):
        raise Refused(f"NAME={name!r}: its class name {cls} is already imported in replications/__init__.py; "
                      "pick another NAME")


def render(name: str, root: Path) -> dict[Path, str]:
    """Every file of the new method (path relative to `root`) -> its text."""
    template = root / TEMPLATE
    files = sorted(p for p in template.rglob(f"*{SUFFIX}") if p.is_file())
    if not files:
        raise Refused(f"no templates (*{SUFFIX}) under {TEMPLATE}/; is this the suite's repository?")
    out = {}
    for src in files:
        rel = src.relative_to(template)
        text = src.read_text().replace("{{name}}", name).replace("{{Class}}", class_name(name))
        out[Path("replications") / name / rel.with_name(rel.name[: -len(SUFFIX)])] = text
    return out


def register(registry: str, name: str) -> str:
    """`replications/__init__.py` with `name` imported (in sorted place) and added to METHODS."""
    cls = class_name(name)
    lines = registry.splitlines(keepends=True)
    imports = [i for i, line in enumerate(lines) if _IMPORT.match(line)]
    methods = next((i for i, line in enumerate(lines) if re.match(r"METHODS\b.*=\s*\{\s*$", line)), None)
    if not imports or methods is None:
        raise Refused(f"{REGISTRY} has no `from replications.<m>.method import <M>` lines or no multi-line "
                      "`METHODS = {` dict to add to; add the two lines by hand")
    after = [i for i in imports if _IMPORT.match(lines[i]).group(1) > name]  # type: ignore[union-attr]
    lines.insert(after[0] if after else imports[-1] + 1, f"from replications.{name}.method import {cls}\n")
    close = next(i for i in range(methods + 1, len(lines)) if lines[i].strip() == "}")
    lines.insert(close, f'    "{name}": {cls},\n')
    return "".join(lines)


def check_rendered(files: dict[Path, str], name: str, root: Path) -> None:
    """The scaffold's own output must be valid: Python compiles, the card parses (paper/cards.py)."""
    sys.path.insert(0, str(root))
    from paper.cards import CardError, parse_card

    try:
        for path, text in files.items():
            if path.suffix == ".py":
                compile(text, str(path), "exec")
        card = parse_card(files[Path("replications") / name / "CARD.md"])
    except (SyntaxError, CardError) as e:
        raise Refused(f"the templates in {TEMPLATE}/ are broken, fix them first: {e}") from e
    if card.method != name or not card.claims:
        raise Refused(f"{TEMPLATE}/CARD.md{SUFFIX} must name the method ({{{{name}}}}) and hold at least "
                      "one claim")


def scaffold(name: str, root: Path = ROOT) -> list[Path]:
    """Write the new method under `root` and register it; returns the files written."""
    check_name(name, root)
    files = render(name, root)
    registry = register((root / REGISTRY).read_text(), name)
    check_rendered(files, name, root)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    atomic_write_text(root / REGISTRY, registry)
    return [*files, REGISTRY]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    root = ROOT
    if len(args) >= 2 and args[0] == "--root":  # tests scaffold into a copy of the suite
        root, args = Path(args[1]).resolve(), args[2:]
    if len(args) != 1 or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 2
    name = args[0]
    try:
        written = scaffold(name, root)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    cls = class_name(name)
    print(f"wrote replications/{name}/ ({len(written) - 1} files) and registered {cls} in {REGISTRY}:")
    for rel in written:
        print(f"  {rel}")
    print(f"""next:
  1. replications/{name}/method.py: the paper's idea in the hooks it changes (delete the others)
  2. replications/{name}/CARD.md: the paper, its numbers and the claims, before any run
  3. make replicate-{name} SCALE=smoke   # the pipeline end to end, about a minute
  4. make replicate-{name}               # cpu scale: arms x seeds, then the card's claims""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
