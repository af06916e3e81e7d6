"""The imports every benchmark worker needs, paid once: worker processes are forked from a server
process that imported this module (`worker_context`), not started from a fresh interpreter.

A fresh interpreter spent 9-12 s of every cell's start-up importing torch, Lightning, transformers,
peft and TRL (measured on the 2-core machine, the workers of a cell importing side by side); forked
from the server, a worker starts with them loaded and only builds its model and trainer. The server
imports modules and runs nothing: no torch thread pool, no CUDA context and no other thread exists
when it forks (fork copies one thread only), so each worker starts as a fresh process would, with
its own memory and its own peak RSS.
"""

from __future__ import annotations

import importlib
import importlib.util
import multiprocessing as mp
import warnings
from typing import Any

# what bench/workers.py imports lazily (trl only where it is installed: the `bench` extra)
MODULES = ("torch", "lightning", "peft", "datasets", "transformers",
           "transformers.models.llama.modeling_llama",
           "common.trainer", "common.policy", "common.models", "common.warmstart", "common.engines",
           "common.engines.hf", "common.method", "common.records",
           "bench.work", "bench.minimal", "bench.workers", "trl", "trl.trainer.grpo_trainer")


def load() -> list[str]:
    """Import MODULES (the ones installed); the names imported."""
    done = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TRL warns about the installed vLLM version on import
        for name in MODULES:
            if importlib.util.find_spec(name.split(".")[0]) is None:
                continue
            importlib.import_module(name)
            done.append(name)
    return done


def report_loaded(conn: Any) -> None:
    """Process target: send back which of MODULES this process had imported when it started
    (all the installed ones, forked from the server; none, spawned)."""
    import sys

    conn.send(sorted(name for name in MODULES if name in sys.modules))
    conn.close()


def worker_context(start_method: str = "forkserver") -> Any:
    """The multiprocessing context of the benchmark's workers: `forkserver` with this module
    preloaded (the default), or `spawn` (a fresh interpreter per worker, as before)."""
    if start_method == "spawn":
        return mp.get_context("spawn")
    if start_method != "forkserver":
        raise ValueError(f"unknown start method {start_method!r}: forkserver | spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(["bench.forkserver_imports"])
    return ctx
