"""`kernelzero sft` on a tiny model and dataset: the loss falls, the output loads, bad data is refused by line."""

import json

import pytest
import torch

from kernelzero.cli import main as cli_main
from kernelzero.consumers.sft import SftError, read_pairs, run_sft
from kernelzero.models import TINY_QWEN2, build_random_model, load_model

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
    report = run_sft(str(data), str(model_dir), str(tmp_path / "out"), epochs=6, batch_size=4, learning_rate=1e-2,
                     lora_rank=8, device="cpu")
    assert report.examples == 8 and report.steps == 12
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
