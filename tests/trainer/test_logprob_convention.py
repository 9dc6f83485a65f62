"""One log-prob convention from generator to trainer: on-policy importance ratios are 1 for every backend, at any temperature."""

from __future__ import annotations

import pytest
import torch

from kernelzero.config import TrainerConfig
from kernelzero.consumers.ca_grpo import TrainingSample
from kernelzero.consumers.policy_update import Batch, token_logprobs
from kernelzero.producers.backend_openai import OpenAIGenerator
from kernelzero.producers.generation import Completion
from tests.coder.openai_server import OpenAITestServer, model_answer

PROMPTS = ["import torch\nclass Model(nn.Module):", "def forward(self, x):\n    return torch.relu(x)"]


def on_policy_ratios(model, completions: list[Completion], temperature: float) -> torch.Tensor:
    """exp(trainer log-prob - generator log-prob) for every generated token, through the trainer's own code."""
    samples = [TrainingSample(sample_id=str(i), prompt_token_ids=c.prompt_token_ids, token_ids=c.token_ids,
                              logprobs=c.logprobs, advantage=1.0, temperature=temperature)
               for i, c in enumerate(completions)]
    batch = Batch(samples, model.device, 0, TrainerConfig())
    with torch.no_grad():
        logp = token_logprobs(model, batch)
    return torch.exp(logp - batch.old_logprobs)[batch.completion_mask.bool()]


@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_transformers_backend_is_on_policy(tiny_generator, temperature):
    groups = tiny_generator.generate_sync(PROMPTS, 3, temperature=temperature, top_p=1.0, max_tokens=24)
    ratios = on_policy_ratios(tiny_generator.model, [c for g in groups for c in g], temperature)
    assert ratios.numel() > 50 and (ratios - 1).abs().max().item() < 1e-3


@pytest.mark.anyio
@pytest.mark.parametrize("temperature", [0.7, 1.3])
async def test_openai_backend_against_the_test_server_is_on_policy(tiny_generator, temperature):
    with OpenAITestServer(model_answer(tiny_generator)) as server:
        generator = OpenAIGenerator(server.base_url, "tiny")
        groups = await generator.generate(PROMPTS, 3, temperature=temperature, top_p=1.0, max_tokens=24)
        await generator.close()
    ratios = on_policy_ratios(tiny_generator.model, [c for g in groups for c in g], temperature)
    assert ratios.numel() > 50 and (ratios - 1).abs().max().item() < 1e-3


@pytest.mark.gpu
@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_vllm_backend_is_on_policy(tiny_model_dir, temperature):
    pytest.importorskip("vllm")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA device")
    from kernelzero.models import load_model
    from kernelzero.producers.backend_vllm import VLLMGenerator

    generator = VLLMGenerator(str(tiny_model_dir), dtype="float32", gpu_memory_utilization=0.3)
    groups = generator.generate_sync(PROMPTS, 3, temperature=temperature, top_p=1.0, max_tokens=24)
    model, _ = load_model(str(tiny_model_dir), device="cuda", dtype="float32")
    ratios = on_policy_ratios(model, [c for g in groups for c in g], temperature)
    assert (ratios - 1).abs().max().item() < 1e-3
