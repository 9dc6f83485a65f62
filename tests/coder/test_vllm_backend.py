"""The vLLM backend (GPU only): the generation contract and full reloads; runs only where vllm is importable and a CUDA device exists (vLLM's wheels do not travel to the GPU machine: never run by us)."""

from __future__ import annotations

import pytest

vllm = pytest.importorskip("vllm")
torch = pytest.importorskip("torch")
from tests.coder.generation_contract import GenerationContract, Subject  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="vLLM needs a CUDA device")]


def test_vllm_samples_groups_with_logprobs_and_reloads(tiny_model_dir, other_model_dir):
    from kernelzero.producers.backend_vllm import VLLMGenerator

    generator = VLLMGenerator(str(tiny_model_dir), dtype="float32", gpu_memory_utilization=0.3)
    [group] = generator.generate_sync(["def f(x):"], 4, temperature=0.8, top_p=0.9, max_tokens=8)
    assert len(group) == 4 and all(len(c.logprobs) == len(c.token_ids) > 0 for c in group)
    assert all(c.prompt_token_ids for c in group)
    generator.load_weights_sync(str(other_model_dir), 1)
    assert generator.policy_version == 1


class TestVLLMContract(GenerationContract):
    @pytest.fixture
    def subject(self, tiny_model_dir):
        from kernelzero.producers.backend_transformers import TransformersGenerator
        from kernelzero.producers.backend_vllm import VLLMGenerator

        generator = VLLMGenerator(str(tiny_model_dir), dtype="float32", gpu_memory_utilization=0.3)
        reference = TransformersGenerator(str(tiny_model_dir), device="cuda", dtype="float32")
        return Subject(generator, reference, mirror_loads=True)

