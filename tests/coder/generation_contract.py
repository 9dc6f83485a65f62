"""The generation contract (producers/generation.py) as one suite, subclassed per backend as the event log's contract suite is.

A subclass provides the `subject` fixture: the backend's Generator over the tiny model, and a
TransformersGenerator `reference` holding the weights the backend samples from (after every
adapter it loads too), through which the trainer's own code scores the samples.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest
import torch

from kernelzero.config import TrainerConfig
from kernelzero.consumers.policy_update import Batch, token_logprobs
from kernelzero.producers.generation import Completion, Generator
from kernelzero.schemas.messages import TrainingSample

PROMPTS = ["import torch\nclass Model(nn.Module):", "def forward(self, x):\n    return torch.relu(x)"]


class Subject(msgspec.Struct):
    generator: Generator
    reference: object  # a TransformersGenerator with the same weights
    mirror_loads: bool = False  # the suite loads each adapter into the reference too (else it follows by itself)


def on_policy_ratios(model, completions: list[Completion], temperature: float) -> torch.Tensor:
    """exp(trainer log-prob - generator log-prob) for every generated token, through the trainer's own code."""
    samples = [TrainingSample(sample_id=str(i), prompt_token_ids=c.prompt_token_ids, token_ids=c.token_ids,
                              logprobs=c.logprobs, advantage=1.0, temperature=temperature)
               for i, c in enumerate(completions)]
    batch = Batch(samples, model.device, 0, TrainerConfig())
    with torch.no_grad():
        logp = token_logprobs(model, batch)
    return torch.exp(logp - batch.old_logprobs)[batch.completion_mask.bool()]


def lora_adapter(base_dir: Path, out: Path) -> str:
    """A LoRA adapter over the tiny model whose weights are not zero, so that it changes what the model says."""
    from peft import LoraConfig, get_peft_model

    from kernelzero.kit.models import load_model

    if not (out / "adapter_config.json").exists():
        base, _ = load_model(str(base_dir), device="cpu")
        config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        get_peft_model(base, config).save_pretrained(str(out))
    return str(out)


@pytest.mark.anyio
class GenerationContract:
    @pytest.fixture
    def subject(self):
        raise NotImplementedError("a backend's suite provides its generator and reference")

    async def test_groups_come_back_in_prompt_order_with_one_logprob_per_token(self, subject):
        out = await subject.generator.generate(PROMPTS, 3, temperature=1.0, top_p=1.0, max_tokens=12)
        assert [len(group) for group in out] == [3, 3]
        tokenizer = subject.reference.tokenizer
        for group, prompt in zip(out, PROMPTS):
            for completion in group:
                assert completion.prompt_token_ids == tokenizer(prompt)["input_ids"]
                assert 0 < len(completion.token_ids) == len(completion.logprobs) <= 12
                assert all(lp <= 0 for lp in completion.logprobs)
                assert completion.finish_reason in ("stop", "length")

    @pytest.mark.parametrize("temperature", [0.7, 1.3])
    async def test_the_trainer_sees_its_own_samples_on_policy(self, subject, temperature):
        groups = await subject.generator.generate(PROMPTS, 3, temperature=temperature, top_p=1.0, max_tokens=24)
        ratios = on_policy_ratios(subject.reference.model, [c for g in groups for c in g], temperature)
        assert ratios.numel() > 50 and (ratios - 1).abs().max().item() < 1e-3

    async def test_a_seed_fixes_a_prompts_samples_whatever_is_sampled_beside_it(self, subject):
        options = dict(temperature=1.0, top_p=1.0, max_tokens=16)
        [alone] = await subject.generator.generate(PROMPTS[:1], 3, seeds=[7], **options)
        [beside, _] = await subject.generator.generate(PROMPTS, 3, seeds=[7, None], **options)
        [other] = await subject.generator.generate(PROMPTS[:1], 3, seeds=[8], **options)
        assert [c.token_ids for c in beside] == [c.token_ids for c in alone]
        assert [lp for c in beside for lp in c.logprobs] == pytest.approx([lp for c in alone for lp in c.logprobs],
                                                                          abs=1e-4)
        assert len({tuple(c.token_ids) for c in alone}) > 1, "the samples of one seed differ from each other"
        assert [c.token_ids for c in other] != [c.token_ids for c in alone], "another seed, other samples"

    async def test_greedy_is_deterministic(self, subject):
        [first] = await subject.generator.generate(PROMPTS[:1], 2, temperature=0.0, top_p=1.0, max_tokens=12)
        [again] = await subject.generator.generate(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=12)
        assert first[0].token_ids == first[1].token_ids == again[0].token_ids

    async def test_loaded_weights_are_sampled_from_and_named_by_their_version(self, subject, tiny_model_dir, tmp_path):
        [[before]] = await subject.generator.generate(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=8)
        adapter = lora_adapter(tiny_model_dir, tmp_path / "adapter")
        await subject.generator.load_weights(adapter, 5)
        if subject.mirror_loads:
            subject.reference.load_weights_sync(adapter, 5)
        assert subject.generator.policy_version == 5
        [[after]] = await subject.generator.generate(PROMPTS[:1], 1, temperature=1.0, top_p=1.0, max_tokens=16)
        ratios = on_policy_ratios(subject.reference.model, [after], 1.0)
        assert (ratios - 1).abs().max().item() < 1e-3, "sampled from the adapter the reference holds too"
        [[greedy]] = await subject.generator.generate(PROMPTS[:1], 1, temperature=0.0, top_p=1.0, max_tokens=8)
        assert greedy.logprobs[0] != pytest.approx(before.logprobs[0], abs=1e-4), "the new weights answer"
