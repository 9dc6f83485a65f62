"""`kernelzero init-model`: a from-scratch causal LM (random init, Qwen2 architecture) with a tokenizer trained on the project's own corpus, in Hugging Face layout; downloads nothing.

The corpus is what the model will read and write: the SFT sets `kernelzero distill` writes (JSON
lines; each row's prompt and completion are one document) or plain text files. The result loads
with every generation backend, `kernelzero sft` and the trainer. Its weights mean nothing yet.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from kernelzero.kit.models import MODEL_SIZES, TOKENIZER_CORPUS, VOCAB_SIZES


class InitModelError(ValueError):
    """The corpus or the output directory is unusable; the message names the file or path."""


def add_arguments(parser) -> None:
    parser.add_argument("--size", choices=sorted(MODEL_SIZES), default="tiny",
                        help="tiny: a 2-core CPU trains it in minutes; small: for one GPU (default tiny)")
    parser.add_argument("--out", required=True, metavar="DIR", help="the model directory to write (must not exist)")
    parser.add_argument("--corpus", action="append", default=[], metavar="FILE",
                        help="tokenizer training text: JSON lines with prompt/completion, or plain text (repeatable)")
    parser.add_argument("--vocab-size", type=int, default=None, help="tokenizer vocabulary (default: by --size)")
    parser.add_argument("--seed", type=int, default=0)


def corpus_texts(paths: list[str]) -> list[str]:
    """One document per JSON-lines row (prompt + completion) or per plain text file; the built-in sample without paths."""
    texts: list[str] = []
    for path in map(Path, paths):
        try:
            text = path.read_text()
        except OSError as exc:
            raise InitModelError(f"cannot read corpus {path}: {exc}") from exc
        if path.suffix != ".jsonl":
            texts.append(text)
            continue
        for number, line in enumerate(text.splitlines(), 1):
            try:
                row = json.loads(line) if line.strip() else {}
            except json.JSONDecodeError as exc:
                raise InitModelError(f"{path}:{number}: not JSON ({exc})") from None
            texts.append(str(row.get("prompt", "")) + str(row.get("completion", "")))
    return texts or [TOKENIZER_CORPUS]


def init_model(out: str, size: str, corpus: list[str], *, vocab_size: int | None = None, seed: int = 0) -> Path:
    """Write the model and tokenizer to `out` (refused when it holds anything); returns the directory."""
    from kernelzero.kit.models import build_random_model

    target = Path(out)
    if target.exists() and any(target.iterdir()):
        raise InitModelError(f"{target} exists and is not empty; choose a new --out")
    return build_random_model(target, MODEL_SIZES[size], seed=seed, texts=corpus_texts(corpus),
                              tokenizer_vocab_size=vocab_size or VOCAB_SIZES[size])


def main(args, config) -> int:
    try:
        out = init_model(args.out, args.size, args.corpus, vocab_size=args.vocab_size, seed=args.seed)
    except InitModelError as exc:
        print(f"kernelzero init-model: {exc}", file=sys.stderr)
        return 2
    from transformers import AutoConfig

    settings = AutoConfig.from_pretrained(out)
    print(f"init-model {args.size}: {settings.num_hidden_layers} layers, hidden {settings.hidden_size}, "
          f"vocabulary {settings.vocab_size}, written to {out}")
    return 0
