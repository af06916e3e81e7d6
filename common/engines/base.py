"""The engine interface: batched sampling with exact token ids and behaviour log-probabilities.

An engine turns a batch of requests (prompt token ids + the LoRA adapter to use) into samples.
Log-probabilities are those of the distribution actually sampled from: softmax(logits / T)
(no top-p / top-k truncation during training rollouts, so that they equal what the trainer
recomputes). `sync()` is called after every optimizer step so the engine never serves a stale
policy (a no-op for the HF engine, which samples from the trained module itself).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0  # 0 = greedy (logprobs then are those of softmax(logits))
    top_p: float = 1.0  # < 1 only for evaluation; training rollouts keep 1 so logprobs are exact
    max_new_tokens: int = 32
    stop: tuple[str, ...] = ()  # stop strings; the stop text is kept in the action tokens


@dataclass
class Request:
    prompt_ids: list[int]
    adapter: str | None  # None = the base model (adapters disabled)


@dataclass
class Sample:
    action_ids: list[int]
    logprobs: list[float]
    text: str  # decoded action, with the stop string (if any) removed
    stopped: bool  # ended by a stop string or EOS (False: hit max_new_tokens)
    extra: dict = field(default_factory=dict)


class Engine(ABC):
    """Generation backend. Implementations: `hf` (common/engines/hf.py), `vllm`."""

    @abstractmethod
    def generate(self, requests: list[Request], params: SamplingParams, seed: int) -> list[Sample]:
        """Sample one completion per request. Same seed, same requests -> same samples (on CPU)."""

    def sync(self) -> None:  # noqa: B027 (optional hook: engines sampling from the module itself need nothing)
        """Serve the policy's current weights (called after every optimizer step)."""

    def forget(self) -> None:  # noqa: B027 (optional hook: engines that keep nothing between calls)
        """Drop what was kept for later calls (the HF engine's cached keys and values of finished turns):
        called when a play ends, whose episodes will send no more requests."""

    def ready(self) -> None:  # noqa: B027 (optional hook)
        """Be ready to generate: called by every rank at the start of training, together (an engine whose
        start is collective, as vLLM's external launcher is, starts here rather than at its first call)."""

    def release(self) -> None:  # noqa: B027 (optional hook)
        """Free the device memory generation holds (vLLM's sleep mode) until the next `sync` or `generate`:
        called after the step's rollouts, before the reference pass and the update."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Free resources."""
