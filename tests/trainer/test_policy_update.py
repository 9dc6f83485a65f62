"""The policy update on the CPU: loss pieces by hand, a learning signal on a tiny model, atomic checkpoints."""

import math

import msgspec
import pytest
import torch

from kernelzero.config import TrainerConfig
from kernelzero.consumers.ca_grpo import group_advantages
from kernelzero.consumers.policy_update import Batch, PolicyLearner, latest_checkpoint, policy_loss_terms
from kernelzero.kit.models import TINY_QWEN2, build_random_model, load_model, weights_sha256
from kernelzero.schemas import PolicyUpdated, decode, encode
from kernelzero.schemas.messages import TrainingSample

TARGET_IDS = 64  # the verifiable reward: share of completion tokens whose id is below this (1/8 of the vocabulary)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # Larger initial weights than the default 0.02: with tiny embeddings a LoRA on the layers can barely
    # move the (normalised, tied) output logits, and no learning signal could show.
    return build_random_model(tmp_path_factory.mktemp("tiny"), dict(TINY_QWEN2, initializer_range=0.3), seed=0)


def sample(i, advantage, *, old=(0.0, 0.0), version=0, weight=1.0):
    return TrainingSample(sample_id=f"s{i}", prompt_token_ids=[1, 2], token_ids=[3, 4], logprobs=list(old),
                          advantage=advantage, weight=weight, policy_version=version)


def test_clipped_loss_by_hand():
    config = TrainerConfig(clip_eps=0.2, staleness_k=4, stale="importance_weight", is_cap=2.0)
    samples = [sample(0, 1.0), sample(1, -2.0), sample(2, 1.0, version=-10)]  # the third is stale at version 0
    batch = Batch(samples, torch.device("cpu"), 0, config)
    assert batch.stale.tolist() == [False, False, True]
    # log-ratios: ratio 1.5 (clipped to 1.2 for A > 0), 0.5 (clipped to 0.8 for A < 0), stale ratio e^1 (cap 2)
    logp = torch.tensor([[math.log(1.5)] * 2, [math.log(0.5)] * 2, [1.0] * 2], requires_grad=True)
    per_token, sums = policy_loss_terms(logp, batch, config)
    expected = [[-1.2, -1.2], [1.6, 1.6], [-2.0, -2.0]]
    torch.testing.assert_close(per_token.detach(), torch.tensor(expected))
    assert sums["clip_fraction"].item() == 4  # both fresh rows clipped on both tokens
    per_token.sum().backward()
    # clipped fresh tokens carry no gradient; the stale one gets -w * A = -2 per token
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0, 0.0], [0.0, 0.0], [-2.0, -2.0]]))


def test_unclipped_gradient_is_minus_advantage_and_weights_scale_it():
    config = TrainerConfig()
    batch = Batch([sample(0, 0.5), sample(1, 0.5, weight=0.0)], torch.device("cpu"), 0, config)
    logp = torch.zeros(2, 2, requires_grad=True)
    per_token, _ = policy_loss_terms(logp, batch, config)
    per_token.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-0.5, -0.5], [0.0, 0.0]]))


def test_k3_kl_term_is_zero_at_the_reference_and_positive_elsewhere():
    config = TrainerConfig(kl_beta=0.1)
    batch = Batch([sample(0, 0.0)], torch.device("cpu"), 0, config)
    logp = torch.tensor([[0.0, -1.0]])
    per_token, sums = policy_loss_terms(logp, batch, config, ref_logp=torch.tensor([[0.0, 0.0]]))
    assert per_token[0, 0].item() == 0.0
    assert per_token[0, 1].item() == pytest.approx(0.1 * (math.e - 1 - 1))  # exp(1) - 1 - 1


def draw(model, n, length, generator):
    """Sample n completions of `length` tokens after the prompt [1]; returns (ids, behaviour logprobs)."""
    ids = torch.ones(n, 1, dtype=torch.long)
    logprobs = []
    with torch.no_grad():
        for _ in range(length):
            logits = model(input_ids=ids).logits[:, -1].float()
            dist = torch.log_softmax(logits, -1)
            nxt = torch.multinomial(dist.exp(), 1, generator=generator)
            logprobs.append(dist.gather(1, nxt))
            ids = torch.cat([ids, nxt], 1)
    return ids[:, 1:], torch.cat(logprobs, 1)


def reward_of(ids):
    return (ids < TARGET_IDS).float().mean(1)


@pytest.mark.parametrize("lora_rank, learning_rate", [(8, 2e-2), (0, 1e-2)], ids=["lora", "full"])
def test_updates_raise_a_verifiable_reward(model_dir, lora_rank, learning_rate):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: more threads only fight over the shared cores
    try:
        torch.manual_seed(0)
        generator = torch.Generator().manual_seed(0)
        model, _ = load_model(str(model_dir), device="cpu")
        config = TrainerConfig(lora_rank=lora_rank, lora_alpha=16, learning_rate=learning_rate,
                               lora_learning_rate=learning_rate, micro_batch_size=32)
        learner = PolicyLearner(model, config)
        before = reward_of(draw(learner.model, 256, 8, generator)[0]).mean().item()
        for step in range(12):
            ids, logprobs = draw(learner.model, 32, 8, generator)  # 4 groups of 8 completions
            rewards = reward_of(ids).tolist()
            advantages = [a for g in range(4) for a in group_advantages(rewards[8 * g:8 * g + 8], True, 1e-4)]
            batch = [
                TrainingSample(sample_id=f"{step}-{i}", prompt_token_ids=[1], token_ids=ids[i].tolist(),
                               logprobs=logprobs[i].tolist(), advantage=advantages[i], reward=rewards[i],
                               policy_version=learner.version)
                for i in range(32)
            ]
            metrics = learner.step(batch)
            assert math.isfinite(metrics["loss"]) and metrics["tokens"] == 32 * 8
            assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # on-policy: stored logprobs match
        after = reward_of(draw(learner.model, 256, 8, generator)[0]).mean().item()
    finally:
        torch.set_num_threads(threads)
    assert learner.version == 12
    assert after > before + 0.15, (before, after)


def test_checkpoint_is_atomic_hashed_loadable_and_resumable(model_dir, tmp_path):
    model, tokenizer = load_model(str(model_dir.resolve()), device="cpu")
    config = TrainerConfig(lora_rank=4, micro_batch_size=2)
    learner = PolicyLearner(model, config, role="coder", tokenizer=tokenizer)
    metrics = learner.step([sample(0, 1.0, old=(-6.0, -6.0)), sample(1, -1.0, old=(-6.0, -6.0))])
    path, sha = learner.save(tmp_path / "coder")
    assert path.name == "v000001" and sorted(p.name for p in (tmp_path / "coder").iterdir()) == ["v000001"]
    assert sha == weights_sha256(path)
    with pytest.raises(FileExistsError):
        learner.save(tmp_path / "coder")
    event = decode(encode(learner.update_event(path, sha, metrics)))
    assert isinstance(event.payload, PolicyUpdated)
    assert (event.payload.version, event.payload.sha256, event.payload.role) == (1, sha, "coder")
    assert event.envelope.policy_version == 1 and event.payload.metrics["samples"] == 2.0
    loaded, _ = load_model(str(path), device="cpu")  # the Coder's way: an adapter directory over its base
    ids = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        learner.model.eval()
        assert torch.allclose(loaded(input_ids=ids).logits, learner.model(input_ids=ids).logits, atol=1e-5)
    resumed = PolicyLearner.from_directory(str(model_dir), config, role="coder", device="cpu",
                                           checkpoint_root=tmp_path / "coder")
    assert resumed.version == 1 and latest_checkpoint(tmp_path / "coder") == path
    assert any(p.requires_grad for p in resumed.model.parameters())


def test_step_refuses_a_batch_with_nothing_to_train(model_dir):
    model, _ = load_model(str(model_dir), device="cpu")
    learner = PolicyLearner(model, TrainerConfig(lora_rank=4), version=10)
    with pytest.raises(ValueError, match="no trainable samples"):
        learner.step([sample(0, 1.0, version=0)])  # stale (age 10 > 4) and stale = drop


@pytest.mark.parametrize("lora_rank", [4, 0], ids=["lora-adapter-off", "frozen-copy"])
def test_kl_to_the_reference_starts_at_zero_and_grows(model_dir, lora_rank):
    model, _ = load_model(str(model_dir), device="cpu")
    learner = PolicyLearner(model, TrainerConfig(lora_rank=lora_rank, kl_beta=0.1, learning_rate=5e-2,
                                                lora_learning_rate=5e-2))
    batch = [sample(0, 1.0, old=(-6.0, -6.0)), sample(1, -1.0, old=(-6.0, -6.0))]
    first = learner.step(batch)
    second = learner.step([msgspec.structs.replace(s, policy_version=1) for s in batch])
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # the policy is the reference before any update
    assert second["kl"] > 1e-6


def _learner_after_one_step(model_dir, advantage: float, **settings) -> dict:
    torch.manual_seed(0)
    model, _ = load_model(str(model_dir), device="cpu")
    learner = PolicyLearner(model, TrainerConfig(lora_rank=0, learning_rate=0.5, **settings))
    batch = [sample(0, advantage, old=(-6.0, -6.0)), sample(1, -advantage, old=(-6.0, -6.0))]
    return learner.step(batch)


def test_the_trust_region_bounds_how_far_one_step_moves_the_policy(model_dir):
    # a huge learning rate and advantages: unbounded, the step lands far from the start policy
    free = _learner_after_one_step(model_dir, 1000.0, kl_beta=1e-6)
    assert free["kl_to_start"] > 0.05 and free["trust_region_halvings"] == 0
    bounded = _learner_after_one_step(model_dir, 1000.0, kl_max=0.05)
    assert bounded["kl_to_start"] <= 0.05 and bounded["trust_region_halvings"] >= 1
    # the bound does not depend on how large the advantage is
    small = _learner_after_one_step(model_dir, 1.0, kl_max=0.05)
    assert small["kl_to_start"] <= 0.05


def test_resuming_keeps_the_kl_reference_at_the_policy_rl_started_from(model_dir, tmp_path):
    config = TrainerConfig(lora_rank=0, learning_rate=5e-2, kl_beta=0.1, checkpoint_dir=str(tmp_path / "ckpt"))
    learner = PolicyLearner.from_directory(str(model_dir), config, role="coder", device="cpu")
    batch = [sample(0, 1.0, old=(-6.0, -6.0)), sample(1, -1.0, old=(-6.0, -6.0))]
    learner.step(batch)
    learner.save(config.checkpoint_dir)
    moved = learner.step([msgspec.structs.replace(s, policy_version=1) for s in batch])["kl"]
    resumed = PolicyLearner.from_directory(str(model_dir), config, role="coder", device="cpu",
                                           checkpoint_root=config.checkpoint_dir)
    assert resumed.version == 1
    # measured against the start, the resumed policy (version 1) is as far from it as before the save
    again = resumed.step([msgspec.structs.replace(s, policy_version=1) for s in batch])["kl"]
    assert again == pytest.approx(moved, rel=1e-4) and again > 1e-6
