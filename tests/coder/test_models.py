"""Model loading shared by the Coder and the trainer: local directories, clear errors, content hashes, adapters."""

from __future__ import annotations

import json

import pytest

from kernelzero.kit.models import ModelLoadError, is_adapter_dir, load_model, resolve_model_dir, weights_sha256


def test_a_hub_id_without_a_local_copy_says_how_to_point_at_one():
    with pytest.raises(ModelLoadError) as error:
        resolve_model_dir("kernelzero-test/no-such-model")
    message = str(error.value)
    assert "not in the local Hugging Face cache" in message and "--local-dir DIR" in message
    assert "[coder] model" in message and "allow_download" in message


def test_missing_and_non_model_directories_are_named(tmp_path):
    with pytest.raises(ModelLoadError, match="does not exist"):
        resolve_model_dir(str(tmp_path / "absent"))
    with pytest.raises(ModelLoadError, match="no config.json"):
        resolve_model_dir(str(tmp_path))
    with pytest.raises(ModelLoadError, match="no model given"):
        resolve_model_dir("")


def test_tiny_model_round_trips_through_the_real_loader(tiny_model_dir):
    model, tokenizer = load_model(str(tiny_model_dir), device="cpu")
    assert model.config.vocab_size == 512 and not model.training
    assert tokenizer.padding_side == "left" and tokenizer.pad_token_id == tokenizer.eos_token_id
    text = "def forward(self, x): return x * 2  # é ü 中"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text, "byte-level BPE encodes any text"


def test_content_hash_covers_names_and_bytes(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "w.bin").write_bytes(b"weights")
    (tmp_path / "a" / "config.json").write_text("{}")
    first = weights_sha256(tmp_path / "a")
    assert first == weights_sha256(tmp_path / "a") and len(first) == 64
    (tmp_path / "a" / "w.bin").write_bytes(b"weightz")
    edited = weights_sha256(tmp_path / "a")
    (tmp_path / "a" / "w.bin").rename(tmp_path / "a" / "v.bin")
    assert len({first, edited, weights_sha256(tmp_path / "a")}) == 3
    with pytest.raises(FileNotFoundError):
        weights_sha256(tmp_path / "missing")


def test_an_adapter_directory_loads_its_base_and_wears_the_adapter(tiny_model_dir, tmp_path):
    from peft import LoraConfig, PeftModel, get_peft_model

    base, _ = load_model(str(tiny_model_dir), device="cpu")
    get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained(str(tmp_path / "adapter"))
    config = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert is_adapter_dir(tmp_path / "adapter") and config["base_model_name_or_path"] == str(tiny_model_dir)
    model, tokenizer = load_model(str(tmp_path / "adapter"), device="cpu")
    assert isinstance(model, PeftModel) and tokenizer.eos_token == "<|endoftext|>"


def test_a_loaded_model_takes_no_kernels_from_the_hub(tiny_model_dir):
    """transformers 5.2x with the `kernels` package swaps layers for Hub kernels by default when a model trains, which
    fetches code from the Hub: on a GPU machine without a network the SFT failed at its first step (H100, 2026-12-07)."""
    model, _ = load_model(str(tiny_model_dir), device="cpu")
    model.train()
    assert not model.use_kernels
