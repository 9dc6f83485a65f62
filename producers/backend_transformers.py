"""Generation with Hugging Face transformers on a local model (CPU or GPU): left-padded batches, sampling log-probabilities, LoRA via peft; no continuous batching.

Sampling happens inside greedy decoding: a logits processor scales the logits by the temperature,
truncates to top-p and keeps only the token where the distribution function first exceeds a uniform
number that is a hash of the row's key and the step, so a row's draws depend on its key alone (the
generation contract's seeds), not on the rest of the batch, except through the arithmetic of a batch
of another shape (bench/common_draws.py). Log-probabilities come from the very logits each token was
sampled from: a processor that runs first records log-softmax(logits / temperature), the contract's
convention, and gathers the chosen token's entry one step later. This costs one [batch, vocab]
buffer instead of the [steps, batch, vocab] that `output_logits=True` would keep.
"""

from __future__ import annotations

import copy
import hashlib
import math
import random
import threading
from typing import Any

from kernelzero.kit.models import attach_adapter, is_adapter_dir, load_model
from kernelzero.producers.generation import (Completion, GenerationError, InProcessGenerator, seeds_per_prompt,
                                              uri_to_path)


class SampledLogprobRecorder:
    """A logits processor that records log p(chosen token) under softmax(raw logits / temperature) at every step."""

    def __init__(self, temperature: float) -> None:
        self.scale = temperature if temperature > 0 else 1.0  # greedy: plain log-softmax
        self._previous: Any = None  # log-softmax of the last step's scaled logits, [batch, vocab]
        self.steps: list[Any] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch

        if self._previous is not None:
            self.steps.append(self._previous.gather(1, input_ids[:, -1:]).squeeze(1))
        self._previous = torch.log_softmax(scores.float() / self.scale, dim=-1)
        return scores

    def finish(self, sequences: Any) -> Any:
        """[batch, steps] log-probabilities, once generation returned the full `sequences`."""
        import torch

        if self._previous is not None:
            self.steps.append(self._previous.gather(1, sequences[:, -1:]).squeeze(1))
            self._previous = None
        return torch.stack(self.steps, dim=1) if self.steps else torch.empty(sequences.shape[0], 0)


_MASK32 = 0xFFFFFFFF


def _mix32(x: Any) -> Any:
    """A 32-bit integer hash (xorshift-multiply) of each entry of an int64 tensor in [0, 2**32); the constants are
    below 2**31 so that no product leaves int64."""
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x1B873593) & _MASK32
    return x ^ (x >> 16)


def row_key(seed: int, index: int) -> int:
    """The 32-bit key of sample `index` drawn with `seed`."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=4).digest(), "little")


class KeyedSampler:
    """A logits processor that makes greedy decoding draw from softmax(logits / temperature) (top-p truncated) by the
    inverse of its distribution function at one uniform number a row and step, a function of the row's key and the
    step only; the drawn token keeps score 0, every other -inf."""

    def __init__(self, keys: list[int], temperature: float, top_p: float) -> None:
        self.keys, self.temperature, self.top_p = keys, temperature, top_p
        self.step = 0
        self._keys: Any = None  # `keys` on the logits' device, made at the first step

    def uniforms(self, device: Any) -> Any:
        import torch

        if self._keys is None:
            self._keys = torch.tensor(self.keys, dtype=torch.int64, device=device)
        step = _mix32(torch.tensor(self.step, dtype=torch.int64, device=device))
        return (_mix32(_mix32(self._keys ^ step)).double() + 0.5) / 2.0 ** 32

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import torch
        from transformers import TopPLogitsWarper

        scores = scores.float() / self.temperature
        if self.top_p < 1.0:
            scores = TopPLogitsWarper(self.top_p)(input_ids, scores)
        cumulative = torch.softmax(scores, dim=-1).double().cumsum(-1)
        target = self.uniforms(scores.device) * cumulative[:, -1]
        tokens = torch.searchsorted(cumulative, target[:, None], right=True).clamp(max=scores.shape[-1] - 1)
        self.step += 1
        return torch.full_like(scores, -math.inf).scatter_(1, tokens, 0.0)


class TransformersGenerator(InProcessGenerator):
    """Batched sampling with `model.generate`; one instance owns one model and runs one call at a time."""

    def __init__(
        self,
        model: str = "",
        *,
        adapter: str = "",
        device: str = "auto",
        dtype: str = "auto",
        chat: bool = False,
        seed: int = 0,
        allow_download: bool = False,
        ignore_eos: bool = False,
        policy_version: int = 0,
        loaded: tuple[Any, Any] | None = None,
    ) -> None:
        """Load `model` (a directory), or sample from `loaded` = (model, tokenizer) already in memory (SFT's checks)."""
        if loaded is not None:
            self.model, tokenizer = loaded
            self.tokenizer = copy.copy(tokenizer)
            self.tokenizer.padding_side = "left"  # the owner may train with right padding
        else:
            self.model, self.tokenizer = load_model(
                model, device=device, dtype=dtype, adapter=adapter, allow_download=allow_download,
            )
        self._device, self._dtype, self._allow_download = device, dtype, allow_download
        self.chat = chat
        self.ignore_eos = ignore_eos  # benchmarks: always generate max_tokens
        self.policy_version = policy_version
        self._seed = seed
        self._calls = 0
        self._lock = threading.Lock()  # generate and load_weights never overlap on one model
        self._stop_ids = self._stop_token_ids()
        self._clear_generation_defaults()

    def _stop_token_ids(self) -> list[int]:
        eos = self.model.generation_config.eos_token_id
        ids = eos if isinstance(eos, list) else [eos] if eos is not None else []
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in ids:
            ids.append(self.tokenizer.eos_token_id)
        return ids

    def _clear_generation_defaults(self) -> None:
        """Forget the checkpoint's generation_config.json (its top_k, repetition_penalty, eos, ...).

        generate() replaces every field we pass at its library default (repetition_penalty=1.0,
        eos_token_id=None) by the checkpoint's value; with a blank config there is nothing to
        replace it with, so what `_generation_config` says is what runs.
        """
        from transformers import GenerationConfig

        model = self.model.get_base_model() if hasattr(self.model, "get_base_model") else self.model
        model.generation_config = GenerationConfig()

    def render(self, prompt: str) -> str:
        if not self.chat:
            return prompt
        return self.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True,
        )

    def generate_sync(
        self, prompts: list[str], n: int, *, temperature: float, top_p: float, max_tokens: int,
        seeds: list[int | None] | None = None,
    ) -> list[list[Completion]]:
        """All prompts x n samples as one left-padded batch; temperature 0 is greedy. A prompt's seed fixes its
        samples' random numbers (None: fresh ones, from this generator's seed and call count)."""
        import torch
        from transformers import LogitsProcessorList

        if not prompts or n < 1 or max_tokens < 1:
            raise GenerationError(f"nothing to generate: {len(prompts)} prompts, n={n}, max_tokens={max_tokens}")
        with self._lock:
            batch = self.tokenizer([self.render(p) for p in prompts], return_tensors="pt", padding=True)
            input_ids = batch["input_ids"].repeat_interleave(n, dim=0).to(self.model.device)
            attention_mask = batch["attention_mask"].repeat_interleave(n, dim=0).to(self.model.device)
            recorder = SampledLogprobRecorder(temperature)
            processors = [recorder]
            self._calls += 1
            if temperature > 0:
                fresh = random.Random(self._seed * 1_000_003 + self._calls)
                chosen = [fresh.getrandbits(63) if s is None else s for s in seeds_per_prompt(seeds, prompts)]
                keys = [row_key(seed, j) for seed in chosen for j in range(n)]
                processors.append(KeyedSampler(keys, temperature, top_p))
            with torch.inference_mode():
                sequences = self.model.generate(
                    input_ids=input_ids, attention_mask=attention_mask,
                    generation_config=self._generation_config(max_tokens),
                    logits_processor=LogitsProcessorList(processors),
                )
                logprobs = recorder.finish(sequences).cpu()
            new_tokens = sequences[:, input_ids.shape[1]:].cpu()
            prompt_ids = [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]
            flat = [self._completion(new_tokens[i], logprobs[i], prompt_ids[i // n]) for i in range(len(new_tokens))]
        return [flat[i * n:(i + 1) * n] for i in range(len(prompts))]

    def _generation_config(self, max_tokens: int) -> Any:
        from transformers import GenerationConfig

        # Every knob is explicit: generate() otherwise fills "default" values (top_k=50, a model's
        # repetition_penalty) from the checkpoint's generation_config.json behind our back. Decoding is
        # greedy: KeyedSampler draws the tokens.
        return GenerationConfig(
            do_sample=False, repetition_penalty=1.0, max_new_tokens=max_tokens, min_new_tokens=0,
            eos_token_id=None if self.ignore_eos else self._stop_ids, pad_token_id=self.tokenizer.pad_token_id,
            bos_token_id=self.tokenizer.bos_token_id,
        )

    def _completion(self, tokens: Any, logprobs: Any, prompt_ids: list[int]) -> Completion:
        ids = tokens.tolist()
        stop = next((i for i, t in enumerate(ids) if t in self._stop_ids), None) if not self.ignore_eos else None
        kept = ids if stop is None else ids[: stop + 1]
        return Completion(
            text=self.tokenizer.decode(kept if stop is None else kept[:-1], skip_special_tokens=True),
            token_ids=kept,
            logprobs=logprobs[: len(kept)].tolist(),
            finish_reason="length" if stop is None else "stop",
            prompt_token_ids=prompt_ids,
        )

    def load_weights_sync(self, uri: str, version: int) -> None:
        """A LoRA adapter directory goes on the current base model; a full model directory replaces it."""
        path = uri_to_path(uri)
        with self._lock:
            if is_adapter_dir(path):
                self.model = attach_adapter(self.model, path)
            else:
                self.model, _ = load_model(
                    path, device=self._device, dtype=self._dtype, allow_download=self._allow_download,
                )
            self._clear_generation_defaults()
            self.policy_version = version

    async def close(self) -> None:
        with self._lock:
            self.model = None
