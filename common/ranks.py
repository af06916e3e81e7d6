"""Several processes (Lightning's DDP): who this process is, and the collectives the trainer uses
to make one run of its ranks (`common.trainer` says how the ranks share a step). Every function is
a no-op in a single process, so the trainer calls them unconditionally where it can.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

import numpy as np
import torch
import torch.distributed as dist

from common.episode import Episode, Group

T = TypeVar("T")


def rank_and_world() -> tuple[int, int]:
    """(this process's rank, the number of processes); (0, 1) in a single-process run."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def gather(obj: T) -> list[T]:
    """Every rank's `obj`, in rank order, on every rank (a collective: every rank calls it)."""
    world = rank_and_world()[1]
    if world == 1:
        return [obj]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, obj)
    return out


def sum_over_ranks(x: torch.Tensor) -> torch.Tensor:
    """`x` summed over the ranks (on the default process group's device: the GPU under NCCL)."""
    device = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
              else torch.device("cpu"))
    y = x.to(device)
    dist.all_reduce(y)
    return y.to(x.device)


def sum_gradients_over_ranks(params: list[torch.nn.Parameter], loss: float) -> float:
    """Sum every rank's gradients of `params` in place (one all-reduce); returns `loss` summed too.

    A parameter no rank gave a gradient keeps none (AdamW then leaves it alone, as in one process);
    one that some rank did not reach counts zero from that rank.
    """
    ref = next((p.grad for p in params if p.grad is not None), None)
    dtype, device = (ref.dtype, ref.device) if ref is not None else (torch.float32, params[0].device)
    flat_N = torch.cat([p.grad.reshape(-1).to(dtype) if p.grad is not None
                        else torch.zeros(p.numel(), dtype=dtype, device=device)
                        for p in params]
                       + [torch.tensor([float(p.grad is not None) for p in params] + [loss], dtype=dtype,
                                       device=device)])
    flat_N = sum_over_ranks(flat_N)
    offset, has_grad = 0, flat_N[-len(params) - 1 : -1]
    for i, p in enumerate(params):
        n = p.numel()
        p.grad = flat_N[offset : offset + n].view_as(p).to(p.dtype).clone() if has_grad[i] > 0 else None
        offset += n
    return float(flat_N[-1])


def sum_counts(parts: list[dict[str, int]]) -> dict[str, int]:
    """Counters (compute per tag) of every rank, added up key by key."""
    out: dict[str, int] = {}
    for part in parts:
        for key, value in part.items():
            out[key] = out.get(key, 0) + value
    return out


SUMMED_METRICS = ("rows", "generated_tokens", "model_calls")


def combine_rank_metrics(parts: list[tuple[dict[str, Any], int]]) -> dict[str, Any]:
    """One step's metrics from every rank's own (metrics, number of its episodes).

    Counts add up (`rows`, `generated_tokens`, `model_calls`, the cumulative `*_total` counters);
    maxima (`*_max`) and times (`time_*`: the step lasts as long as its slowest rank) take the
    largest; a value every rank reports alike (the summed loss, the gradient norm after the sum)
    stays as it is; any other number is a mean over the ranks weighted by their episodes (exact for
    the per-episode rates and means; per-turn and per-group ones are weighted the same way).
    """
    keys = dict.fromkeys(k for metrics, _ in parts for k in metrics)
    out: dict[str, Any] = {}
    for key in keys:
        reported = [(metrics[key], n) for metrics, n in parts if key in metrics]
        values = [v for v, _ in reported]
        if not all(isinstance(v, int | float) for v in values):
            out[key] = values[0]
        elif key in SUMMED_METRICS or key.split("/")[0].endswith("_total"):
            out[key] = sum(values)
        elif key.startswith("time_") or key.endswith("_max"):
            out[key] = max(values)
        elif all(v == values[0] for v in values[1:]):
            out[key] = values[0]
        else:
            episodes = sum(n for _, n in reported)
            out[key] = (sum(v * n for v, n in reported) / episodes) if episodes else float(np.mean(values))
    return out


def light(group: Group) -> Group:
    """The group without what evaluation does not read (prompt ids, log-probs, prompt texts): cheap to
    gather."""
    def strip(episodes: list[Episode]) -> list[Episode]:
        return [dataclasses.replace(e, turns=[dataclasses.replace(t, prompt_ids=[], logprobs=[],
                                                                  prompt_text="")
                                              for t in e.turns]) for e in episodes]

    return dataclasses.replace(group, episodes=strip(group.episodes),
                               extra={k: strip(v) for k, v in group.extra.items()})


def interleave(parts: list[list[T]]) -> list[T]:
    """Rank r's items were `items[r::world]`: back in their order."""
    return [part[i] for i in range(max(map(len, parts), default=0)) for part in parts if i < len(part)]
