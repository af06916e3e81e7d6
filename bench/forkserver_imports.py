"""Imported by the benchmark's fork server only (`bench.preload.worker_context`): loads every module
its workers need, once, before it forks them."""

from bench.preload import load

LOADED = load()
