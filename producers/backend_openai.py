"""Generation through any OpenAI-compatible HTTP server (vLLM, SGLang, hosted): retries, timeouts, a concurrency cap; trusts the server's log-probabilities.

The generation contract wants log-probabilities of the distribution sampled from (temperature
applied): start vLLM with `--logprobs-mode processed_logprobs`. A server reporting raw (T = 1)
log-probabilities gives importance ratios off by the temperature, which nothing here can detect.

Uses /v1/completions (or /v1/chat/completions with `chat`), one request per prompt asking for
`n` choices. Retried with exponential backoff and full jitter: HTTP 429 and 5xx, timeouts and
connection errors; a Retry-After header sets the wait instead. Other 4xx fail at once.
Token ids come from vLLM's extensions (`return_token_ids`, `return_tokens_as_token_ids`) when
`token_ids` is on; servers without them give empty id lists, and the trainer cannot use such
samples for importance ratios. The HTTP client is httpx2 (what huggingface_hub >= 2 brings) or
httpx (huggingface_hub 1.x): no dependency of our own.
"""

from __future__ import annotations

import email.utils
import random
import time
from pathlib import Path
from typing import Any

import anyio

from kernelzero.producers.generation import Completion, GenerationError, seeds_per_prompt, uri_to_path

try:
    import httpx2 as httpx
except ImportError:  # huggingface_hub 1.x ships httpx; one of the two is always present with transformers 5
    import httpx

RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 120.0


def retry_after_s(header: str | None) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date); None when absent or unreadable."""
    if not header:
        return None
    try:
        return max(0.0, min(float(header), MAX_RETRY_AFTER_S))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(header).timestamp()
    except (TypeError, ValueError):
        return None
    return max(0.0, min(when - time.time(), MAX_RETRY_AFTER_S))


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**attempt)] so that retrying clients spread out."""
    return random.uniform(0.0, min(cap_s, base_s * 2 ** attempt))


def _token_id(token: str) -> int | None:
    return int(token.removeprefix("token_id:")) if token.startswith("token_id:") else None


def parse_completion_choice(choice: dict[str, Any]) -> Completion:
    """A /v1/completions choice with logprobs into a Completion (token ids from the vLLM extensions when present)."""
    logprobs = choice.get("logprobs") or {}
    tokens = logprobs.get("tokens") or []
    token_ids = choice.get("token_ids") or [t for t in map(_token_id, tokens) if t is not None]
    return Completion(
        text=choice.get("text") or "",
        token_ids=list(token_ids),
        logprobs=[float(x) for x in logprobs.get("token_logprobs") or [] if x is not None],
        finish_reason=choice.get("finish_reason") or "stop",
        prompt_token_ids=list(choice.get("prompt_token_ids") or []),
    )


def parse_chat_choice(choice: dict[str, Any]) -> Completion:
    content = (choice.get("logprobs") or {}).get("content") or []
    token_ids = choice.get("token_ids") or [t for t in (_token_id(c.get("token", "")) for c in content) if t is not None]
    return Completion(
        text=(choice.get("message") or {}).get("content") or "",
        token_ids=list(token_ids),
        logprobs=[float(c["logprob"]) for c in content],
        finish_reason=choice.get("finish_reason") or "stop",
        prompt_token_ids=list(choice.get("prompt_token_ids") or []),
    )


class OpenAIGenerator:
    """Talks to one OpenAI-compatible endpoint; `concurrency` caps requests in flight across all calls."""

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str = "",
        timeout_s: float = 120.0,
        max_retries: int = 4,
        concurrency: int = 8,
        chat: bool = False,
        token_ids: bool = True,
        backoff_base_s: float = 0.5,
        backoff_cap_s: float = 30.0,
        policy_version: int = 0,
    ) -> None:
        if not model:
            raise GenerationError("the openai backend needs [coder] model: the model name the server serves")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.chat = chat
        self.token_ids = token_ids
        self.max_retries = max_retries
        self.backoff_base_s, self.backoff_cap_s = backoff_base_s, backoff_cap_s
        self.policy_version = policy_version
        self._limit = anyio.Semaphore(concurrency)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(timeout=httpx.Timeout(timeout_s), headers=headers)

    async def generate(
        self, prompts: list[str], n: int, *, temperature: float, top_p: float, max_tokens: int,
        seeds: list[int | None] | None = None,
    ) -> list[list[Completion]]:
        results: list[list[Completion]] = [[] for _ in prompts]
        errors: list[GenerationError] = []
        chosen = seeds_per_prompt(seeds, prompts)

        async def one(index: int, prompt: str) -> None:
            try:
                results[index] = await self._request(prompt, n, temperature, top_p, max_tokens, chosen[index])
            except GenerationError as exc:  # one failed prompt fails the call: stop the others
                errors.append(exc)
                group.cancel_scope.cancel()

        async with anyio.create_task_group() as group:
            for index, prompt in enumerate(prompts):
                group.start_soon(one, index, prompt)
        if errors:
            raise errors[0]
        return results

    def _body(self, prompt: str, n: int, temperature: float, top_p: float, max_tokens: int,
              seed: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model, "n": n, "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
        }
        if seed is not None:
            body["seed"] = seed
        if self.chat:
            body.update(messages=[{"role": "user", "content": prompt}], logprobs=True, top_logprobs=0)
        else:
            body.update(prompt=prompt, logprobs=0)
        if self.token_ids:
            body.update(return_token_ids=True, return_tokens_as_token_ids=True)
        return body

    async def _request(self, prompt: str, n: int, temperature: float, top_p: float, max_tokens: int,
                       seed: int | None = None) -> list[Completion]:
        url = f"{self.base_url}/{'chat/completions' if self.chat else 'completions'}"
        body = self._body(prompt, n, temperature, top_p, max_tokens, seed)
        problem = ""
        for attempt in range(self.max_retries + 1):
            wait: float | None = None
            try:
                async with self._limit:
                    response = await self._client.post(url, json=body)
            except httpx.TimeoutException:
                problem = "timed out"
            except httpx.TransportError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code == 200:
                    return self._parse(response, n)
                problem = f"HTTP {response.status_code}: {response.text[:500]}"
                if response.status_code not in RETRY_STATUS:
                    raise GenerationError(f"{url} refused the request: {problem}")
                wait = retry_after_s(response.headers.get("retry-after"))
            if attempt < self.max_retries:
                await anyio.sleep(wait if wait is not None else backoff_s(attempt, self.backoff_base_s, self.backoff_cap_s))
        raise GenerationError(f"{url}: gave up after {self.max_retries + 1} attempts, last: {problem}")

    def _parse(self, response: Any, n: int) -> list[Completion]:
        try:
            choices = sorted(response.json()["choices"], key=lambda c: c.get("index", 0))
        except (ValueError, KeyError, TypeError) as exc:
            raise GenerationError(f"the server's answer is not a completions response: {exc}") from exc
        if len(choices) != n:
            raise GenerationError(f"asked the server for {n} choices, got {len(choices)}")
        parse = parse_chat_choice if self.chat else parse_completion_choice
        return [parse(c) for c in choices]

    async def load_weights(self, uri: str, version: int) -> None:
        """Load a LoRA adapter into the server (vLLM's /v1/load_lora_adapter) and sample from it from now on.

        Full weights cannot be pushed through this API: restart or reload the server itself.
        """
        path = uri_to_path(uri)
        if not (Path(path) / "adapter_config.json").exists():
            raise GenerationError(
                f"{uri} is a full model: the openai backend can only load LoRA adapters into the server; "
                "reload the server with the new weights instead")
        name = f"policy-v{version}"
        response = await self._client.post(
            f"{self.base_url}/load_lora_adapter", json={"lora_name": name, "lora_path": str(Path(path).resolve())},
        )
        if response.status_code != 200:
            raise GenerationError(f"the server did not load adapter {path}: HTTP {response.status_code} {response.text[:300]}")
        self.model = name
        self.policy_version = version

    async def close(self) -> None:
        await self._client.aclose()
