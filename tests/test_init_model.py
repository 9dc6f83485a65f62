"""`kernelzero init-model`: a from-scratch model with a tokenizer trained on our corpus, loadable by every local path."""

import json
import re

import pytest

from kernelzero.app.cli import main as cli_main
from kernelzero.kit.codeblocks import answer
from kernelzero.kit.models import load_model

KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)
'''


def corpus(tmp_path):
    path = tmp_path / "coder_sft.jsonl"
    rows = [{"prompt": f"Reference:\nclass Model{i}:\n    pass\nAnswer:\n", "completion": answer(KERNEL)} for i in range(20)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_tokenizer_round_trips_code_and_any_text(tmp_path):
    assert cli_main(["init-model", "--size", "tiny", "--out", str(tmp_path / "m"), "--corpus", str(corpus(tmp_path)),
                     "--vocab-size", "1000"]) == 0
    model, tokenizer = load_model(str(tmp_path / "m"), device="cpu")
    for text in (answer(KERNEL), "\t  mixed   whitespace\n\n", "ünïcödé → 💡 and bytes \x00\x7f"):
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert tokenizer.decode(ids) == text
    assert len(tokenizer(answer(KERNEL))["input_ids"]) < len(answer(KERNEL)) / 4, "merges learned from the corpus compress code"
    assert model.config.vocab_size == len(tokenizer) and model.config.num_hidden_layers == 2


def test_the_model_generates_and_refuses_to_overwrite(tmp_path, capsys):
    from kernelzero.producers.backend_transformers import TransformersGenerator

    out = tmp_path / "m"
    assert cli_main(["init-model", "--out", str(out), "--corpus", str(corpus(tmp_path))]) == 0
    assert "init-model tiny" in capsys.readouterr().out
    [[completion]] = TransformersGenerator(str(out), device="cpu").generate_sync(
        ["Reference:\n"], 1, temperature=1.0, top_p=1.0, max_tokens=8)
    assert len(completion.token_ids) == len(completion.logprobs) > 0
    assert cli_main(["init-model", "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    assert cli_main(["init-model", "--out", str(tmp_path / "n"), "--corpus", str(bad)]) == 2
    assert "bad.jsonl:1: not JSON" in capsys.readouterr().err and not (tmp_path / "n").exists()


def test_no_token_crosses_a_digit_or_the_end_of_a_name(tmp_path):
    # the corpus repeats these lines often enough that an unrestricted BPE would merge whole lines
    line = "\n        t12 = torch.empty((16, 16, 8), device=x.device)\n    kernel[(t1.numel(),)](x, t1, 64, BLOCK=64)"
    assert cli_main(["init-model", "--size", "tiny", "--out", str(tmp_path / "m"), "--corpus",
                     str(_text(tmp_path, line * 200)), "--vocab-size", "600"]) == 0
    _, tokenizer = load_model(str(tmp_path / "m"), device="cpu")
    tokens = [tokenizer.convert_tokens_to_string([t]) for t in tokenizer.tokenize(line)]
    assert "".join(tokens) == line
    assert [t for t in tokens if any(c.isdigit() for c in t)] == [c for c in line if c.isdigit()]  # one digit each
    names = re.findall(r"[A-Za-z_][A-Za-z_.]*", line)
    # a name is never split by a merge and never runs into what follows it: t12 is t, 1, 2
    assert [n for t in tokens for n in re.findall(r"[A-Za-z_][A-Za-z_.]*$", t)] == names
    # a line's indentation goes with its first name, never with a digit
    assert "\n        t" in tokens and any(t.endswith("\n    kernel") for t in tokens)


def _text(tmp_path, text: str):
    path = tmp_path / "corpus.txt"
    path.write_text(text)
    return path
