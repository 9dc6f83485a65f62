"""The one text-generation interface of the Coder and the Proposer, which every backend implements; no sampling logic lives here, nor the choice of a backend (backends.py).

Contract every backend keeps:
- `generate` is a coroutine. Backends that compute on the local machine (transformers, vllm) run
  the work in a worker thread, so the event loop that polls the log keeps running.
- `generate(prompts, n, ...)` returns one list of `n` completions per prompt, in prompt order.
- `seeds` (optional, one per prompt, None for fresh randomness): a prompt sampled twice with the
  same seed, temperature and weights gets the same `n` completions, whatever else is in the call
  (common random numbers: two policies measured on the same draws differ only where they differ).
  The transformers backend keeps it up to the arithmetic of batches of other shapes (float32: about 95%
  of samples identical, bfloat16: none; bench/common_draws.py); vLLM and OpenAI-compatible servers get
  the seed and keep it as far as their batching does.
- `Completion.logprobs[i]` is the log-probability of `token_ids[i]` under the distribution the
  token was sampled from: log-softmax(logits / temperature) of the unprocessed logits, before
  any top-p or top-k truncation (with top_p = 1, the default, exactly the sampling distribution).
  The trainer computes the same quantity (consumers/policy_update.py), so an on-policy
  importance ratio is 1. The openai backend returns what the server reports: vLLM does this
  with `--logprobs-mode processed_logprobs`; other servers may differ (docs/trainer.md).
  Temperature 0 (greedy, for benchmarks) reports log-softmax(logits): there is no sampling
  distribution to report, and such samples are not trainable.
- `load_weights(uri, version)` swaps the policy; callers never call it while a `generate` of the
  same generator is running (the Coder loads weights between groups).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import msgspec


class Completion(msgspec.Struct, kw_only=True):
    text: str  # the decoded generated text, without the stop token
    token_ids: list[int]  # generated tokens, the stop token included when one ended the sequence
    logprobs: list[float]  # one per token_ids entry, under softmax(logits / temperature)
    finish_reason: str  # "stop" (a stop token) or "length" (max_tokens reached)
    prompt_token_ids: list[int] = []  # the prompt as the model saw it (after any chat template)


class GenerationError(RuntimeError):
    """Generation failed for a reason the caller should report (server refused, retries exhausted, bad weights)."""


@runtime_checkable
class Generator(Protocol):
    policy_version: int

    async def generate(
        self, prompts: list[str], n: int, *, temperature: float, top_p: float, max_tokens: int,
        seeds: list[int | None] | None = None,
    ) -> list[list[Completion]]: ...

    async def load_weights(self, uri: str, version: int) -> None: ...

    async def close(self) -> None: ...


class InProcessGenerator:
    """Base of the local backends: `generate` and `load_weights` run their blocking `*_sync` twins in a thread."""

    async def generate(
        self, prompts: list[str], n: int, *, temperature: float, top_p: float, max_tokens: int,
        seeds: list[int | None] | None = None,
    ) -> list[list[Completion]]:
        import anyio

        return await anyio.to_thread.run_sync(lambda: self.generate_sync(
            prompts, n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, seeds=seeds))

    async def load_weights(self, uri: str, version: int) -> None:
        import anyio

        await anyio.to_thread.run_sync(lambda: self.load_weights_sync(uri, version))


def seeds_per_prompt(seeds: list[int | None] | None, prompts: list[str]) -> list[int | None]:
    """`generate`'s seeds, one per prompt: None for all of them where the caller gave none."""
    return seeds or [None] * len(prompts)


def uri_to_path(uri: str) -> str:
    """Weights URIs are local paths (optionally file://); anything else is refused with a clear error."""
    if uri.startswith("file://"):
        return uri.removeprefix("file://")
    if "://" in uri:
        raise GenerationError(f"weights URI {uri!r}: only local paths and file:// URIs are supported")
    return uri
