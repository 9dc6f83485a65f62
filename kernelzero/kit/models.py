"""Model and tokenizer loading from local Hugging Face directories (Coder, trainer) and tiny random models for tests; downloads nothing unless asked.

Shared by the Coder and the trainer so that both read a checkpoint the same way and hash it the
same way (`weights_sha256`, the hash a `policy.updated` event carries). Random-weight models built
here are for tests, demos and throughput benchmarks: their outputs mean nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Iterable

ADAPTER_CONFIG = "adapter_config.json"
EOS_TOKEN = "<|endoftext|>"
SPECIAL_TOKENS = (EOS_TOKEN, "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# A real architecture's dimensions (Qwen2-0.5B: about 494 M parameters with tied embeddings).
QWEN2_0_5B: dict[str, Any] = dict(
    model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
    num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6,
    rope_theta=1000000.0, tie_word_embeddings=True,
)
# Small enough that a CPU test generates a few hundred tokens in well under a second.
TINY_QWEN2: dict[str, Any] = dict(
    model_type="qwen2", vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=16384, rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)

# From-scratch sizes for `kernelzero init-model`; the vocabulary is the tokenizer's. Llama architecture:
# transformers 5 loads a qwen2 checkpoint's tokenizer as Qwen2Tokenizer, whose word-splitting regex
# would replace ours (build_tokenizer), while a llama checkpoint's tokenizer.json loads as written.
# tiny (~0.5 M parameters) trains on a 2-core CPU in minutes: two layers, where four took 1.6 times as long and
# answered fewer held-out modules (the Coder 30 of 64 at T = 1 against 38 and 40, docs/BENCHMARKS.md); small (~7 M)
# is for one GPU and still small enough for a run directory to travel to and from a GPU machine.
MODEL_SIZES: dict[str, dict[str, Any]] = {
    "tiny": dict(model_type="llama", hidden_size=128, intermediate_size=384, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, rms_norm_eps=1e-6,
                 tie_word_embeddings=True, initializer_range=0.02),
    "small": dict(model_type="llama", hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                  num_attention_heads=8, num_key_value_heads=4, max_position_embeddings=8192, rms_norm_eps=1e-6,
                  tie_word_embeddings=True, initializer_range=0.02),
}
VOCAB_SIZES = {"tiny": 2048, "small": 4096}
MAX_TOKEN_CHARS = 16  # longest token the BPE may learn (build_tokenizer)

# Tokenizer training text: enough Python, PyTorch, CUDA and Triton to give the BPE useful merges.
TOKENIZER_CORPUS = """
import torch
import torch.nn as nn
import triton
import triton.language as tl
from torch.utils.cpp_extension import load_inline

class Model(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * 2.0 + torch.sigmoid(x).sum(dim=self.dim, keepdim=True)

class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        n = x.numel()
        grid = (triton.cdiv(n, 1024),)
        kernel[grid](x, out, n, BLOCK=1024)
        return out

@triton.jit
def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)

__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) { y[i] = x[i] > 0.f ? x[i] : 0.f; }
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    relu_kernel<<<(x.numel() + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), x.numel());
    return y;
}
def get_inputs():
    return [torch.randn(16, 1024, device="cuda")]

def get_init_inputs():
    return [1]
You are given a PyTorch module. Write a faster version with a custom kernel.
The answer is a fenced python block that defines ModelNew. Verdict: correct, incorrect, compile_error.
"""


class ModelLoadError(RuntimeError):
    """A model or tokenizer could not be loaded; the message says what was looked for and how to fix it."""


def resolve_model_dir(name_or_path: str, *, allow_download: bool = False) -> Path:
    """A local directory for `name_or_path`: the path itself, a cached hub snapshot, or (if allowed) a download."""
    if not name_or_path:
        raise ModelLoadError("no model given: set [coder] model (or KERNELZERO_CODER_MODEL) to a local directory")
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists() and not (path / ADAPTER_CONFIG).exists():
            raise ModelLoadError(f"{path} holds no config.json: not a model directory in Hugging Face layout")
        return path
    if path.exists() or name_or_path.startswith((".", "/", "~")) or name_or_path.count("/") != 1:
        raise ModelLoadError(f"model directory {name_or_path!r} does not exist")
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(name_or_path, local_files_only=not allow_download))
    except Exception as exc:  # the hub raises many error types for "not cached" and "no network"
        raise ModelLoadError(
            f"{name_or_path!r} is not a local directory and "
            + ("could not be downloaded" if allow_download else "is not in the local Hugging Face cache")
            + f" ({type(exc).__name__}). Without network (or with HF_HUB_OFFLINE=1), copy the model where there "
            f"is network (`hf download {name_or_path} --local-dir DIR`), bring DIR here and set "
            "[coder] model = \"DIR\" (or KERNELZERO_CODER_MODEL=DIR)"
            + ("" if allow_download else "; or set [coder] allow_download = true to fetch it from the hub")
        ) from exc


def pick_device(device: str = "auto") -> "Any":
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelLoadError("device = \"cuda\" but torch sees no CUDA device")
    return torch.device(device)


def pick_dtype(dtype: str, device: "Any") -> "Any":
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


def is_adapter_dir(path: str | os.PathLike) -> bool:
    return (Path(path) / ADAPTER_CONFIG).exists()


def load_tokenizer(model_dir: str | os.PathLike) -> "Any":
    """The directory's tokenizer, left-padding (batched generation), with a pad token (the EOS if none)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"no usable tokenizer in {model_dir}: {exc}") from exc
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token_id is None:
            raise ModelLoadError(f"the tokenizer in {model_dir} has neither a pad nor an EOS token")
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def adapter_base(adapter_dir: str | os.PathLike) -> str:
    """The base model directory a LoRA adapter names (`base_model_name_or_path`)."""
    base = json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text()).get("base_model_name_or_path") or ""
    if not base:
        raise ModelLoadError(f"the adapter in {adapter_dir} names no base model (base_model_name_or_path)")
    return base


def load_model(
    name_or_path: str,
    *,
    device: str = "auto",
    dtype: str = "auto",
    adapter: str = "",
    allow_download: bool = False,
    trainable: bool = False,
) -> tuple[Any, Any]:
    """(model, tokenizer) from a local HF directory, optionally with a LoRA adapter directory on top (peft).

    `name_or_path` may itself be an adapter directory: its base model is then loaded from the
    adapter's `base_model_name_or_path` and the adapter put on top. The model is in eval mode;
    with `trainable` the adapter's weights require gradients (a learner continuing an SFT adapter).
    """
    from transformers import AutoModelForCausalLM

    path = resolve_model_dir(name_or_path, allow_download=allow_download)
    if is_adapter_dir(path) and not adapter:
        return load_model(adapter_base(path), device=device, dtype=dtype, adapter=str(path),
                          allow_download=allow_download, trainable=trainable)
    torch_device = pick_device(device)
    try:
        # no Hub kernels: with the `kernels` package, transformers would fetch layers' code from the Hub
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=pick_dtype(dtype, torch_device),
                                                     use_kernels=False)
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"cannot load a causal LM from {path}: {exc}") from exc
    tokenizer = load_tokenizer(path)
    model.to(torch_device)
    if adapter:
        model = attach_adapter(model, adapter, trainable=trainable)
    return model.eval(), tokenizer


def attach_adapter(model: Any, adapter_dir: str | os.PathLike, *, trainable: bool = False) -> Any:
    """Put the LoRA adapter in `adapter_dir` on `model`; a model already wearing one has it taken off first."""
    from peft import PeftModel

    if not is_adapter_dir(adapter_dir):
        raise ModelLoadError(f"{adapter_dir} is not a LoRA adapter directory (no {ADAPTER_CONFIG})")
    if isinstance(model, PeftModel):
        model = model.unload()
    return PeftModel.from_pretrained(model, str(adapter_dir), is_trainable=trainable).eval()


def weights_sha256(path: str | os.PathLike) -> str:
    """The content hash a `policy.updated` event carries: sha256 of a file, or of a directory's files.

    For a directory: over every regular file below it in sorted relative-path order, the UTF-8
    relative path, a NUL byte, then the file's own sha256 digest (32 bytes). Names and contents
    both count, so a renamed or edited file changes the hash.
    """
    root = Path(path)
    if root.is_file():
        return _file_digest(root).hex()
    if not root.is_dir():
        raise FileNotFoundError(f"no weights at {root}")
    outer = hashlib.sha256()
    for file in sorted(p for p in root.rglob("*") if p.is_file()):
        outer.update(file.relative_to(root).as_posix().encode() + b"\0" + _file_digest(file))
    return outer.hexdigest()


def _file_digest(file: Path) -> bytes:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.digest()


# Before BPE, text is cut into pieces no merge may cross: each digit alone, a name (dotted: `tl.load`, `F.gelu`)
# with the punctuation, spaces and line breaks before it (`\n    t`, ` = tl.load`), and runs of other
# punctuation. Sizes are written digit by digit and names `t12` as `t`, `1`, `2`, so a size or a name that no
# training answer holds is still made of tokens every answer has; merges across a name and a number
# (`pty((16, 16, 8`, `kernel[(t1`) would not be. Keeping a line's indentation with its first name (rather than a
# token of its own) measured better: on the same 4,035 distilled rows and 3 epochs, the tiny Coder's held-out
# greedy pass rate was 0.59 this way and 0.047 with indentation split off (docs/BENCHMARKS.md, The Coder from zero).
PIECES = r"\d|[^\w]*[A-Za-z_][A-Za-z_.]*|[^\w]+"


def build_tokenizer(out_dir: str | os.PathLike, *, vocab_size: int = 512, texts: Iterable[str] = (TOKENIZER_CORPUS,)) -> Any:
    """Train a byte-level BPE on `texts` (whole documents) over PIECES and save it (HF layout) to `out_dir`; any text encodes, nothing is unknown."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PIECES), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), max_token_length=MAX_TOKEN_CHARS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token=EOS_TOKEN, pad_token=EOS_TOKEN)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(str(out_dir))
    return tokenizer


def build_random_model(
    out_dir: str | os.PathLike,
    config: dict[str, Any] = TINY_QWEN2,
    *,
    seed: int = 0,
    tokenizer_vocab_size: int = 512,
    dtype: str = "float32",
    texts: Iterable[str] = (TOKENIZER_CORPUS,),
) -> Path:
    """Write a random-weight causal LM of `config` plus a tokenizer trained on `texts` to `out_dir` (HF layout).

    Without config["vocab_size"] the model's vocabulary is the tokenizer's. With one, it may be
    larger than the tokenizer's: ids past the tokenizer's end decode to nothing, which is fine for
    benchmarks of a real architecture's size.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(out, vocab_size=min(tokenizer_vocab_size, config.get("vocab_size", 1 << 30)), texts=texts)
    settings = {"vocab_size": len(tokenizer)} | dict(config)
    model_type = settings.pop("model_type")
    settings.update(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, bos_token_id=None)
    model_config = AutoConfig.for_model(model_type, **settings)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(model_config, dtype=pick_dtype(dtype, torch.device("cpu")))
    model.save_pretrained(str(out))
    return out
