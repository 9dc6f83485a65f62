"""The transformers backend on a tiny random model: the generation contract, then its own ways: left padding, top-p, stop tokens, chat template, full reloads."""

from __future__ import annotations

import pytest
import torch

from kernelzero.producers.backend_transformers import TransformersGenerator
from kernelzero.producers.backends import make_generator
from kernelzero.producers.generation import Completion, GenerationError
from tests.coder.generation_contract import GenerationContract, Subject

PROMPTS = ["import torch\nclass Model(nn.Module):", "def forward(self, x):\n    return torch.relu(x) * 2.0 + 1"]


def recomputed_logprobs(model, completion: Completion, temperature: float = 1.0) -> list[float]:
    """log p(token) under softmax(logits / temperature), by one forward pass over prompt + completion, without padding."""
    ids = torch.tensor([completion.prompt_token_ids + completion.token_ids], device=model.device)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].float() / temperature, dim=-1)
    start = len(completion.prompt_token_ids) - 1
    return [logp[start + i, t].item() for i, t in enumerate(completion.token_ids)]


def test_batched_groups_have_sampling_logprobs_that_match_a_forward_pass(tiny_generator):
    # under top_p 0.9 truncated tokens would get -inf: matching the untruncated T = 0.7 log-softmax proves the convention
    out = tiny_generator.generate_sync(PROMPTS, 3, temperature=0.7, top_p=0.9, max_tokens=24)
    assert [len(group) for group in out] == [3, 3]
    lengths = {len(c.prompt_token_ids) for c in (out[0][0], out[1][0])}
    assert len(lengths) == 2, "prompts of different length exercise left padding"
    for group, prompt in zip(out, PROMPTS):
        for completion in group:
            assert completion.prompt_token_ids == tiny_generator.tokenizer(prompt)["input_ids"]
            assert len(completion.logprobs) == len(completion.token_ids) > 0
            assert all(lp <= 0 for lp in completion.logprobs)
            expected = recomputed_logprobs(tiny_generator.model, completion, 0.7)
            assert completion.logprobs == pytest.approx(expected, abs=1e-4)
            assert completion.logprobs != pytest.approx(recomputed_logprobs(tiny_generator.model, completion), abs=1e-3)
    assert len({tuple(c.token_ids) for c in out[0]}) > 1, "samples of one group differ"


@pytest.mark.parametrize("top_p", [1.0, 0.8])
def test_keyed_draws_follow_the_tempered_distribution(top_p):
    from transformers import TopPLogitsWarper

    from kernelzero.producers.backend_transformers import KeyedSampler, row_key

    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, 0.5]])
    draws = 40_000
    sampler = KeyedSampler([row_key(3, j) for j in range(draws)], temperature=0.7, top_p=top_p)
    tokens = sampler(None, logits.expand(draws, -1)).argmax(-1)
    frequencies = torch.bincount(tokens, minlength=5).double() / draws
    expected = torch.softmax(TopPLogitsWarper(top_p)(None, logits / 0.7), -1)[0].double()
    assert (frequencies - expected).abs().max().item() < 0.01
    assert (frequencies[expected == 0] == 0).all(), "top-p's truncated tokens are never drawn"


def test_a_stop_token_ends_the_completion_and_is_kept(tiny_model_dir):
    generator = TransformersGenerator(str(tiny_model_dir), device="cpu")
    greedy_first = generator.generate_sync(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=4)[0][0].token_ids[0]
    generator._stop_ids = [greedy_first]  # make the model's first greedy token a stop token
    [[completion]] = generator.generate_sync(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=8)
    assert completion.finish_reason == "stop"
    assert completion.token_ids == [greedy_first] and len(completion.logprobs) == 1
    assert completion.text == ""


def test_chat_template_wraps_the_prompt(tiny_model_dir):
    generator = TransformersGenerator(str(tiny_model_dir), device="cpu", chat=True)
    [[completion]] = generator.generate_sync(["hello"], 1, temperature=1.0, top_p=1.0, max_tokens=4)
    shown = generator.tokenizer.decode(completion.prompt_token_ids)
    assert shown.startswith("<|im_start|>user\nhello<|im_end|>") and shown.endswith("<|im_start|>assistant\n")


def test_full_weight_reload_changes_logprobs_and_version(tiny_model_dir, other_model_dir):
    generator = TransformersGenerator(str(tiny_model_dir), device="cpu")
    [[before]] = generator.generate_sync(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=8)
    generator.load_weights_sync(f"file://{other_model_dir}", 1)
    assert generator.policy_version == 1
    assert recomputed_logprobs(generator.model, before) != pytest.approx(before.logprobs, abs=1e-3)
    [[after]] = generator.generate_sync(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=8)
    assert after.logprobs == pytest.approx(recomputed_logprobs(generator.model, after), abs=1e-4)


def test_factory_reads_a_config_section_and_refuses_unknown_backends(tiny_model_dir):
    from kernelzero.config import CoderConfig, ProposerConfig

    generator = make_generator(CoderConfig(model=str(tiny_model_dir), device="cpu"))
    assert isinstance(generator, TransformersGenerator) and generator.policy_version == 0
    with pytest.raises(GenerationError, match="unknown generation backend 'synth'"):
        make_generator(ProposerConfig(backend="synth"))
    with pytest.raises(GenerationError, match="only local paths"):
        generator.load_weights_sync("s3://bucket/weights", 1)


class TestTransformersContract(GenerationContract):
    @pytest.fixture
    def subject(self, tiny_model_dir):
        generator = TransformersGenerator(str(tiny_model_dir), device="cpu", seed=0)
        return Subject(generator, generator)


def test_a_second_adapter_replaces_the_first(tiny_model_dir, tmp_path):
    from tests.coder.generation_contract import lora_adapter

    generator = TransformersGenerator(str(tiny_model_dir), device="cpu")
    adapter = lora_adapter(tiny_model_dir, tmp_path / "adapter")
    generator.load_weights_sync(adapter, 3)
    assert type(generator.model).__name__.startswith("Peft")
    [[first]] = generator.generate_sync(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=6)
    generator.load_weights_sync(adapter, 4)
    [[again]] = generator.generate_sync(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=6)
    assert again.logprobs == pytest.approx(first.logprobs, abs=1e-5), "not stacked on the first"
