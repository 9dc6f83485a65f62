"""The generation backend a [coder] or [proposer] section names, built from its settings; backends are imported only when chosen (vllm is optional), and none is validated beyond what its constructor checks."""

from __future__ import annotations

from kernelzero.config import GenerationConfig
from kernelzero.producers.generation import GenerationError, Generator


def make_generator(settings: GenerationConfig) -> Generator:
    """The backend named by `settings.backend` (transformers, vllm or openai) of a [coder] or [proposer] section."""
    if settings.backend == "transformers":
        from kernelzero.producers.backend_transformers import TransformersGenerator

        return TransformersGenerator(
            settings.model, adapter=settings.adapter, device=settings.device, dtype=settings.dtype,
            chat=settings.chat, seed=settings.seed, allow_download=settings.allow_download,
        )
    if settings.backend == "vllm":
        from kernelzero.producers.backend_vllm import VLLMGenerator

        return VLLMGenerator(
            settings.model, adapter=settings.adapter, dtype=settings.dtype, chat=settings.chat, seed=settings.seed,
            gpu_memory_utilization=settings.vllm_gpu_memory_utilization,
        )
    if settings.backend == "openai":
        from kernelzero.producers.backend_openai import OpenAIGenerator

        return OpenAIGenerator(
            settings.openai_base_url, settings.model, api_key=settings.openai_api_key,
            timeout_s=settings.request_timeout_s, max_retries=settings.max_retries,
            concurrency=settings.concurrency, chat=settings.chat, token_ids=settings.openai_token_ids,
        )
    raise GenerationError(f"unknown generation backend {settings.backend!r} (transformers, vllm or openai)")
