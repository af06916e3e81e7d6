"""`make test` keeps each xdist group (the SLURM cluster's tests, vLLM's, the multi-rank runs) on one
worker: a small suite run with `-n 2 --dist loadgroup` through tests/conftest.py's group suffixing."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CONFTEST = f'''
import importlib.util, pytest
spec = importlib.util.spec_from_file_location("repo_conftest", {str(REPO / "tests" / "conftest.py")!r})
repo = importlib.util.module_from_spec(spec)
spec.loader.exec_module(repo)

@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "grouped" in item.name:
            item.add_marker(pytest.mark.xdist_group("g"))
    if getattr(config.option, "loadgroup", False):
        for item in items:
            repo._suffix_group(item)
'''

TESTS = '''
import os, time, pytest

@pytest.mark.parametrize("i", range(6))
def test_grouped(i, tmp_path_factory):
    time.sleep(0.2)
    with open(os.environ["WORKER_LOG"], "a") as f:
        f.write(os.environ["PYTEST_XDIST_WORKER"] + "\\n")

@pytest.mark.parametrize("i", range(6))
def test_free(i):
    time.sleep(0.2)
'''


def test_a_group_runs_on_one_worker(tmp_path):
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_groups.py").write_text(TESTS)
    log = tmp_path / "workers.log"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup", str(tmp_path)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120, env={**__import__("os").environ, "WORKER_LOG": str(log)})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    workers = Counter(log.read_text().split())
    assert sum(workers.values()) == 6
    assert len(workers) == 1, f"the group ran on several workers: {dict(workers)}"
