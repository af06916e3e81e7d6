"""The GPU environment resolves (issue #43, fix 2), checked without network: every pin of
constraints-gpu.txt satisfies the suite's own requirement of that package (pyproject.toml) and vLLM
0.33.0's (its Requires-Dist, recorded in requirements/vllm-0.33.0.requires.txt), and the CPU pins
(constraints.txt) still satisfy the suite's ranges. scripts/check-gpu-resolves.sh asks pip itself."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LINUX = {"platform_machine": "x86_64", "platform_system": "Linux", "sys_platform": "linux",
         "python_version": "3.11", "python_full_version": "3.11.9", "extra": ""}


def _requirements(lines: list[str]) -> dict[str, list[Requirement]]:
    out: dict[str, list[Requirement]] = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(LINUX):
            out.setdefault(canonicalize_name(req.name), []).append(req)
    return out


def _file(name: str) -> dict[str, list[Requirement]]:
    return _requirements((ROOT / name).read_text().splitlines())


def _project(*extras: str) -> dict[str, list[Requirement]]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return _requirements(lines)


def _pin(reqs: list[Requirement]) -> str | None:
    for req in reqs:
        for spec in req.specifier:
            if spec.operator == "==":
                return spec.version
    return None


def _conflicts(pins: dict[str, list[Requirement]], *sources: dict[str, list[Requirement]]) -> list[str]:
    bad = []
    for name, reqs in pins.items():
        version = _pin(reqs)
        if version is None:  # a range in the constraints: it must overlap; checked where pinned
            continue
        for source in sources:
            for req in source.get(name, []):
                if not req.specifier.contains(version, prereleases=True):
                    bad.append(f"{name}=={version} is outside {req}")
    return bad


def test_gpu_pins_satisfy_the_suite_and_vllm():
    pins = _file("constraints-gpu.txt")
    vllm = _file("requirements/vllm-0.33.0.requires.txt")
    assert _pin(pins["vllm"]) == "0.33.0"
    assert _conflicts(pins, _project("gpu", "dev", "gguf", "envs"), vllm) == []
    # every package vLLM pins exactly is pinned the same way here (torch above all)
    for name in ("torch", "torchvision", "torchaudio"):
        assert _pin(vllm[name]) == _pin(pins[name]), name
    # the transformers range of the GPU environment overlaps vLLM's and the suite's
    assert any(Requirement(f"transformers=={v}").specifier.contains(v)
               and all(r.specifier.contains(v) for r in pins["transformers"] + vllm["transformers"]
                       + _project()["transformers"]) for v in ("5.16.1", "5.19.0"))


def test_the_gpu_extra_is_the_vllm_the_pins_name():
    gpu = _project("gpu")["vllm"]
    assert all(r.specifier.contains("0.33.0") for r in gpu)


def test_cpu_pins_still_satisfy_the_suite():
    pins = _file("constraints.txt")
    assert _pin(pins["torch"]) == "2.13.0"
    assert _conflicts(pins, _project("dev", "gguf", "envs")) == []


def test_a_conflict_is_found():
    """The check itself: the old base pin (torch==2.13.0) against vLLM 0.33's torch==2.14.0."""
    old = _requirements(["torch==2.13.0"])
    assert _conflicts(_requirements(["torch==2.14.0"]), old) == ["torch==2.14.0 is outside torch==2.13.0"]
