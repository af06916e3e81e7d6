"""`make new-method NAME=foo` (scripts/new_method.py): refusals, the scaffold's contents, and, marked
e2e, a scaffolded method run end to end through `make replicate-foo SCALE=smoke` in a copy of the
suite, then joining `make compare SCALE=smoke` on arith. The refusal and content tests scaffold into a
small folder and take about a second.

Nothing is written into this repository: the end-to-end test copies the suite (the files git lists,
tracked or not ignored) into a temporary folder and runs this interpreter there, with the copy first
on PYTHONPATH (the suite is installed in editable mode, pointing here), and `make -o setup` so that
make never installs anything.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from common.method import Method
from paper.cards import load_cards, parse_card

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "new_method.py"
# the scaffold plus a smoke replication, on 2 cores of its own (wall_budget: times the test workers)
BUDGET_S = 120
COMPARE_BUDGET_S = 30  # make compare SCALE=smoke ENVS=arith: GRPO's one smoke cell and the comparison


def scaffold(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), "--root", str(root), *args], capture_output=True,
                          text=True, timeout=60)


@pytest.fixture
def small_suite(tmp_path: Path) -> Path:
    """What the scaffold reads: the registry, the templates, a module and a method to collide with."""
    root = tmp_path / "suite"
    shutil.copytree(ROOT / "replications" / "_template", root / "replications" / "_template")
    shutil.copy2(ROOT / "replications" / "__init__.py", root / "replications" / "__init__.py")
    (root / "replications" / "grpo").mkdir()
    (root / "experiments").mkdir()
    (root / "experiments" / "__init__.py").touch()
    (root / "common").mkdir()
    (root / "common" / "__init__.py").touch()
    return root


def hook_names(cls: type) -> dict[str, list[str]]:
    """Every hook a class defines (and __init__), with its parameter names."""
    return {name: list(inspect.signature(fn).parameters) for name, fn in vars(cls).items()
            if inspect.isfunction(fn) and (not name.startswith("_") or name == "__init__")}


def test_no_name_prints_the_usage(small_suite):
    proc = scaffold(small_suite)
    assert proc.returncode == 2 and proc.stderr.startswith("usage: make new-method NAME=<name>")


@pytest.mark.parametrize(("name", "why"), [
    ("Foo", "is not a lowercase Python identifier"),
    ("foo-bar", "is not a lowercase Python identifier"),
    ("_foo", "is not a lowercase Python identifier"),
    ("2foo", "is not a lowercase Python identifier"),
    ("class", "is a Python keyword"),
    ("grpo", "replications/grpo/ already exists"),
    ("sharp", "'sharp' is already in METHODS"),
    ("experiments", "would shadow the suite's own module experiments"),
    ("common", "would shadow the suite's own module common"),
    ("json", "would shadow the standard library's module json"),
    ("torch", "would shadow the installed module torch"),
    ("method", "its class name Method is already imported"),
])
def test_refused_names_write_nothing(small_suite, name, why):
    registry = (small_suite / "replications" / "__init__.py").read_text()
    before = sorted(p.name for p in (small_suite / "replications").iterdir())
    proc = scaffold(small_suite, name)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1, proc.stderr  # one line
    assert why in proc.stderr
    assert (small_suite / "replications" / "__init__.py").read_text() == registry
    assert sorted(p.name for p in (small_suite / "replications").iterdir()) == before


def test_scaffold_writes_a_short_method_and_a_card_that_parses(small_suite):
    proc = scaffold(small_suite, "in_flow")
    assert proc.returncode == 0, proc.stderr
    folder = small_suite / "replications" / "in_flow"
    expected = {"__init__.py", "method.py", "CARD.md", "conf/__init__.py", "conf/config.yaml",
                "conf/replication.yaml", "conf/scale/smoke.yaml", "conf/scale/cpu.yaml",
                "conf/scale/paper.yaml"}
    assert {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()} == expected
    assert not any("{{" in p.read_text() for p in folder.rglob("*") if p.is_file())
    # only what a new method must write (at most 40 lines): hooks of the base class, with its parameters
    text = (folder / "method.py").read_text()
    assert len(text.splitlines()) <= 40
    tree = ast.parse(text)
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InFlow")
    defined = {f.name: [a.arg for a in f.args.args] for f in cls.body if isinstance(f, ast.FunctionDef)}
    hooks = hook_names(Method)
    assert defined and all(hooks.get(name) == args for name, args in defined.items())
    config = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InFlowConfig")
    assert [ast.unparse(b) for b in config.bases] == ["MethodConfig"]
    assert "name: str = 'in_flow'" in ast.unparse(config)
    # the registry: the import in sorted place and the METHODS entry; ruff-clean like the rest
    registry = (small_suite / "replications" / "__init__.py").read_text()
    imports = [line for line in registry.splitlines() if line.startswith("from replications.")]
    assert "from replications.in_flow.method import InFlow" in imports and imports == sorted(imports)
    assert '    "in_flow": InFlow,\n}' in registry
    lint = subprocess.run([sys.executable, "-m", "ruff", "check", "--config", str(ROOT / "pyproject.toml"),
                           str(folder), str(small_suite / "replications" / "__init__.py")],
                          capture_output=True, text=True, timeout=60)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    # the card's front matter parses as paper/ reads it; until its placeholders are written the report
    # calls it "card not written" (naming the fields, never printing the placeholders); the templates
    # are not a card
    card = parse_card((folder / "CARD.md").read_text())
    assert [c.predicate for c in card.claims] == ["in_flow@final > in_flow@initial"]
    cards, errors = load_cards([small_suite / "replications"])
    assert cards == {} and list(errors) == ["in_flow"] and "card not written" in errors["in_flow"]
    assert "{{" not in errors["in_flow"]
    # a second time: refused, nothing changed
    again = scaffold(small_suite, "in_flow")
    assert again.returncode == 2 and "already exists" in again.stderr


def test_design_page_has_the_hook_table_of_common_method():
    """docs/DESIGN.md shows the hook table as common/method.py has it (the scaffold mirrors it too)."""
    def hook_table(text: str) -> list[str]:
        lines = [line.strip() for line in text.splitlines()]
        start = next(i for i, line in enumerate(lines) if line.startswith("| hook "))
        end = next((i for i in range(start, len(lines)) if not lines[i].startswith("|")), len(lines))
        return lines[start:end]

    expected = hook_table(inspect.getdoc(sys.modules[Method.__module__]) or "")
    assert len(expected) > 5 and hook_table((ROOT / "docs" / "DESIGN.md").read_text()) == expected


def copy_suite(dst: Path) -> None:
    """The suite as git sees it: tracked files and untracked ones that are not ignored (no .venv,
    .cache or runs/); a tracked file deleted in the working tree is left out."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        if (ROOT / rel).is_file():
            (dst / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, dst / rel)


PROBE = """
import json, replications, common.method
from common.config import run_config_errors
from replications import METHODS
from experiments.run import compose
print(json.dumps({"replications": replications.__file__, "common": common.method.__file__,
                  "foo": METHODS["foo"].__module__,
                  "errors": {s: run_config_errors(compose("foo", [f"scale={s}"]))
                             for s in ("smoke", "cpu", "paper")}}))
"""


@pytest.mark.e2e
def test_scaffolded_method_runs_smoke_end_to_end(tmp_path, wall_budget):
    suite = tmp_path / "suite"
    copy_suite(suite)
    assert not (suite / "replications" / "foo").exists(), "the suite already has a method foo"
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    env["PYTHONPATH"] = os.pathsep.join([str(suite), *filter(None, [os.environ.get("PYTHONPATH")])])
    make = ["make", "-o", "setup", f"PY={sys.executable}"]  # -o setup: never install into the copy

    t0 = time.time()
    usage = subprocess.run([*make, "new-method"], cwd=suite, env=env, capture_output=True, text=True,
                           timeout=60)
    assert usage.returncode != 0 and "usage: make new-method NAME=<name>" in usage.stderr
    new = subprocess.run([*make, "new-method", "NAME=foo"], cwd=suite, env=env, capture_output=True,
                         text=True, timeout=60)
    assert new.returncode == 0, new.stderr
    # the copy's modules are the ones imported, and every scale of the new method composes
    probe = subprocess.run([sys.executable, "-c", PROBE], cwd=suite, env=env, capture_output=True, text=True,
                           timeout=120)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["replications"] == str(suite / "replications" / "__init__.py")
    assert found["common"] == str(suite / "common" / "method.py")
    assert found["foo"] == "replications.foo.method"
    assert found["errors"]["smoke"] == [] and found["errors"]["cpu"] == []
    # only the weights are missing
    assert [e for e in found["errors"]["paper"] if "model.path" not in e] == []

    run = subprocess.run([*make, "replicate-foo", "SCALE=smoke"], cwd=suite, env=env, capture_output=True,
                         text=True, timeout=600)
    elapsed = time.time() - t0
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    cell = suite / "runs" / "smoke" / "foo" / "arith" / "foo" / "seed-0"  # smoke runs go to runs/smoke/
    assert (cell / "done").exists(), run.stdout[-2000:]
    assert json.loads((cell / "manifest.json").read_text())["method"] == "foo"
    # the method's section of the report: its card still holds the template's placeholders, so it is
    # named "not written" and none of them is printed
    assert "## foo\n" in run.stdout and "Card not written yet" in run.stdout and "{{" not in run.stdout
    assert elapsed < wall_budget(BUDGET_S), (f"scaffold + smoke replication took {elapsed:.0f} s "
                                             f"(budget: {wall_budget(BUDGET_S)} s)")

    # the new method joins the head-to-head comparison with no other change: on arith beside GRPO, its
    # cell the replication's own finished run (reused, not rerun), GRPO's run here
    t0 = time.time()
    compare = subprocess.run([*make, "compare", "SCALE=smoke", "ENVS=arith", "METHODS=foo", "SEEDS=0"],
                             cwd=suite, env=env, capture_output=True, text=True, timeout=600)
    elapsed = time.time() - t0
    assert compare.returncode == 0, compare.stdout[-2000:] + compare.stderr[-3000:]
    assert "foo/arith/foo/seed-0: reuses runs/smoke/foo/arith/foo/seed-0" in compare.stdout
    steps = suite / "runs" / "smoke" / "compare" / "steps"
    assert (steps / "foo" / "arith" / "foo" / "seed-0").resolve() == cell.resolve()
    assert (steps / "grpo" / "arith" / "grpo" / "seed-0" / "done").exists()
    matrix = next(line for line in compare.stdout.splitlines() if line.startswith("| foo |"))
    # arith is the matrix's first env
    assert "n=1: inconclusive" in matrix and "n/a" not in matrix.split("|")[2]
    assert elapsed < wall_budget(COMPARE_BUDGET_S), (f"make compare took {elapsed:.0f} s "
                                                     f"(budget: {wall_budget(COMPARE_BUDGET_S)} s)")
    assert not (ROOT / "replications" / "foo").exists() and not (ROOT / "runs" / "smoke" / "foo").exists()
