"""`kernelzero sft` on a tiny model and dataset: the loss falls, the output loads, bad data is refused by line."""

import json

import pytest
import torch

from kernelzero.app.cli import main as cli_main
from kernelzero.bootstrap.sft import SftError, precision, read_pairs, run_sft
from kernelzero.kit.models import TINY_QWEN2, build_random_model, load_model

PAIRS = [
    {"prompt": f"def f{i}(x):\n", "completion": f"    return torch.relu(x) * {i}\n"} for i in range(8)
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    # initial weights larger than the default 0.02, so that a LoRA can move the tied output logits
    return build_random_model(tmp_path_factory.mktemp("tiny"), dict(TINY_QWEN2, initializer_range=0.3), seed=0)


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_sft_reduces_loss_and_writes_a_loadable_adapter(model_dir, tmp_path):
    data = write(tmp_path / "sft.jsonl", PAIRS)
    steps = []
    report = run_sft(str(data), str(model_dir), str(tmp_path / "out"), epochs=6, batch_size=4, learning_rate=1e-2,
                     lora_rank=8, device="cpu", progress=lambda step, total: steps.append((step, total)))
    assert report.examples == 8 and report.steps == 12
    assert steps == [(n, 12) for n in range(1, 13)]  # the progress of every step, against the whole
    assert report.last_loss < 0.7 * report.first_loss, report
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "sft.jsonl"]  # no temporary directory left
    model, tokenizer = load_model(str(tmp_path / "out"), device="cpu")  # adapter over its base model
    ids = tokenizer(PAIRS[0]["prompt"] + PAIRS[0]["completion"], return_tensors="pt")["input_ids"]
    with torch.no_grad():
        assert torch.isfinite(model(input_ids=ids).logits).all()


def test_cli_runs_full_fine_tuning(model_dir, tmp_path, capsys):
    data = write(tmp_path / "sft.jsonl", PAIRS[:4])
    code = cli_main(["sft", "--data", str(data), "--model", str(model_dir), "--out", str(tmp_path / "full"),
                     "--lora-rank", "0", "--epochs", "1", "--device", "cpu"])
    assert code == 0 and "4 examples" in capsys.readouterr().out
    assert (tmp_path / "full" / "config.json").exists() and (tmp_path / "full" / "tokenizer.json").exists()
    assert cli_main(["sft", "--data", str(data), "--model", str(model_dir), "--out", str(tmp_path / "full")]) == 2


def test_bad_lines_are_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(PAIRS[0]) + "\n" + json.dumps({"prompt": "p"}) + "\n")
    with pytest.raises(SftError, match="bad.jsonl:2: needs non-empty"):
        read_pairs(path)
    path.write_text("{not json\n")
    with pytest.raises(SftError, match=":1: not JSON"):
        read_pairs(path)


@pytest.mark.parametrize("lora_rank", [8, 0])
def test_the_sft_result_starts_rl_as_it_is(model_dir, tmp_path, lora_rank):
    from kernelzero.config import TrainerConfig
    from kernelzero.schemas.messages import TrainingSample
    from kernelzero.consumers.policy_update import PolicyLearner
    from kernelzero.producers.backend_transformers import TransformersGenerator

    data = write(tmp_path / "sft.jsonl", PAIRS)
    run_sft(str(data), str(model_dir), str(tmp_path / "sft"), epochs=2, batch_size=4, learning_rate=1e-2,
            lora_rank=lora_rank, device="cpu")
    coder = TransformersGenerator(str(tmp_path / "sft"), device="cpu")
    [[sample]] = coder.generate_sync([PAIRS[0]["prompt"]], 1, temperature=1.0, top_p=1.0, max_tokens=8)
    config = TrainerConfig(lora_rank=4, lora_learning_rate=1e-2, device="cpu", checkpoint_dir=str(tmp_path / "ckpt"))
    learner = PolicyLearner.from_directory(str(tmp_path / "sft"), config, role="coder", device="cpu")
    trainable = [p for p in learner.model.parameters() if p.requires_grad]
    assert trainable, "the SFT weights load trainable (an adapter is continued, a full model gets a new one)"
    with torch.no_grad():
        ids = torch.tensor([sample.prompt_token_ids + sample.token_ids])
        start = len(sample.prompt_token_ids) - 1
        logp = torch.log_softmax(learner.model(ids).logits[0].float(), -1)
    assert [logp[start + i, t].item() for i, t in enumerate(sample.token_ids)] == pytest.approx(sample.logprobs, abs=1e-4)
    step = TrainingSample(sample_id="s", prompt_token_ids=sample.prompt_token_ids, token_ids=sample.token_ids,
                          logprobs=sample.logprobs, advantage=1.0, temperature=1.0)
    metrics = learner.step([step])
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-3)  # the learner starts where the Coder samples
    path, sha = learner.save(config.checkpoint_dir)
    coder.load_weights_sync(str(path), learner.version)  # the Coder follows the continued policy
    [[after]] = coder.generate_sync([PAIRS[0]["prompt"]], 1, temperature=1.0, top_p=1.0, max_tokens=8)
    with torch.no_grad():
        ids = torch.tensor([after.prompt_token_ids + after.token_ids])
        logp = torch.log_softmax(learner.model(ids).logits[0].float(), -1)
    assert [logp[start + i, t].item() for i, t in enumerate(after.token_ids)] == pytest.approx(after.logprobs, abs=1e-4)


def test_prompt_and_completion_are_tokenized_apart_as_a_generator_sees_them(tmp_path):
    from kernelzero.bootstrap.sft import tokenized
    from kernelzero.kit.models import build_tokenizer

    # the tokenizer merges a dotted name with the punctuation before it: " = tl.load" is one token
    texts = ["y = tl.load(x)\n"] * 50
    tokenizer = build_tokenizer(tmp_path, vocab_size=300, texts=texts)
    pair = {"prompt": "y = tl", "completion": ".load(x)\n"}
    joint = tokenizer(pair["prompt"] + pair["completion"])["input_ids"]
    prompt = tokenizer(pair["prompt"])["input_ids"]
    assert joint[:len(prompt)] != prompt, "this corpus merges across the boundary"
    [row] = tokenized([pair], tokenizer, max_length=64)
    assert row["input_ids"][:len(prompt)] == prompt and row["input_ids"][-1] == tokenizer.eos_token_id
    assert row["completion_mask"] == [0] * len(prompt) + [1] * (len(row["input_ids"]) - len(prompt))
    assert tokenizer.decode(row["input_ids"][len(prompt):-1]) == pair["completion"]


def test_a_model_served_in_float32_trains_without_bfloat16_autocast_on_cuda():
    assert precision("cuda", "float32") == {"bf16": False, "tf32": True}
    assert precision("cuda", "auto") == precision("cuda", "bfloat16") == {"bf16": True, "tf32": None}
    assert precision("cpu", "bfloat16") == {"bf16": False, "tf32": None}
