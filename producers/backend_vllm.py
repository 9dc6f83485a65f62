"""Generation with vLLM's offline engine (vllm.LLM) on local GPUs; a thin adapter, untested where vLLM is not installed.

vLLM is an optional extra (`pip install kernelzero[vllm]`, vLLM >= 0.10.2 for `logprobs_mode`); it
is imported only when this backend is built. Log-probabilities are those of the distribution
sampled from (`logprobs_mode="processed_logprobs"`: after temperature; with top_p < 1 also after
vLLM's truncation, which the trainer does not model: keep top_p = 1 for training). Weight updates: a LoRA
adapter directory becomes a new LoRARequest (cheap, the engine keeps running; the engine is
always started with LoRA enabled, which costs some speed); a full model directory rebuilds the
engine (slow, but uses only the public API).
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from kernelzero.kit.models import is_adapter_dir, resolve_model_dir
from kernelzero.producers.generation import (Completion, GenerationError, InProcessGenerator, seeds_per_prompt,
                                              uri_to_path)

MAX_LORA_RANK = 64


class VLLMGenerator(InProcessGenerator):
    def __init__(
        self,
        model: str,
        *,
        adapter: str = "",
        dtype: str = "auto",
        chat: bool = False,
        seed: int = 0,
        gpu_memory_utilization: float = 0.85,
        policy_version: int = 0,
    ) -> None:
        try:
            import vllm  # noqa: F401
        except ImportError as exc:
            raise GenerationError("backend = \"vllm\" needs vLLM: pip install 'kernelzero[vllm]'") from exc
        self._options = dict(dtype=dtype, seed=seed, gpu_memory_utilization=gpu_memory_utilization)
        self.chat = chat
        self.policy_version = policy_version
        self._lock = threading.Lock()
        self._lora: Any = None
        self._llm = self._engine(str(resolve_model_dir(model)))
        if adapter:
            self._lora = self._lora_request(adapter, policy_version)

    def _engine(self, model_dir: str) -> Any:
        import vllm

        return vllm.LLM(
            model=model_dir, logprobs_mode="processed_logprobs", enable_lora=True,
            max_lora_rank=MAX_LORA_RANK, **self._options,
        )

    @staticmethod
    def _lora_request(adapter_dir: str, version: int) -> Any:
        from vllm.lora.request import LoRARequest

        return LoRARequest(f"policy-v{version}", version + 1, adapter_dir)

    def generate_sync(
        self, prompts: list[str], n: int, *, temperature: float, top_p: float, max_tokens: int,
        seeds: list[int | None] | None = None,
    ) -> list[list[Completion]]:
        import vllm

        params = [vllm.SamplingParams(n=n, temperature=temperature, top_p=top_p, max_tokens=max_tokens, logprobs=0,
                                      seed=seed) for seed in seeds_per_prompt(seeds, prompts)]
        with self._lock:
            if self.chat:
                conversations = [[{"role": "user", "content": p}] for p in prompts]
                outputs = self._llm.chat(conversations, params, lora_request=self._lora, use_tqdm=False)
            else:
                outputs = self._llm.generate(prompts, params, lora_request=self._lora, use_tqdm=False)
        return [[self._completion(out, sample) for sample in out.outputs] for out in outputs]

    @staticmethod
    def _completion(out: Any, sample: Any) -> Completion:
        ids = list(sample.token_ids)
        return Completion(
            text=sample.text, token_ids=ids,
            logprobs=[step[token].logprob for step, token in zip(sample.logprobs or [], ids)],
            finish_reason=sample.finish_reason or "stop", prompt_token_ids=list(out.prompt_token_ids or []),
        )

    def load_weights_sync(self, uri: str, version: int) -> None:
        path = uri_to_path(uri)
        with self._lock:
            if is_adapter_dir(path):
                self._lora = self._lora_request(path, version)
            else:
                self._llm = None
                gc.collect()  # the old engine must give its GPU memory back before the new one starts
                self._llm = self._engine(path)
                self._lora = None
            self.policy_version = version

    async def close(self) -> None:
        with self._lock:
            self._llm = None
            gc.collect()

