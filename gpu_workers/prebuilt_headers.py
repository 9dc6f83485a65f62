"""Torch's binding headers precompiled once per machine, by the evaluator, for the g++ half of candidate builds; not for nvcc.

The bindings' translation unit (`main.cpp`: pybind11 and torch's tensor API) costs g++ most of a
CUDA candidate's host build in header parsing. `build` compiles those headers (gpu_workers/headers.py,
BINDING_HEADERS) into a GCC precompiled header with the exact flags `load_inline` gives `main.cpp`,
read from the ninja file torch writes, and returns the header's path; candidate builds pass
`-include` that path, and GCC reads the `.gch` beside it. It is built by the evaluator outside any
sandbox, where no candidate code runs, into a folder builds see read-only. GCC ignores a
precompiled header whose flags do not match and parses the headers as before: a mismatch costs
time, never correctness. Returns None where it cannot be made (no g++, a torch whose ninja writer
differs); builds then go without it.
"""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

from kernelzero.gpu_workers.headers import BINDING_HEADERS

HEADER = "kz_torch_bindings.h"


def build(folder: Path, with_cuda: bool, timeout_s: float = 600.0) -> Path | None:
    """The precompiled header under `folder` (made if missing), or None where it cannot be made."""
    command = _command(with_cuda)
    if command is None:
        return None
    where = folder / hashlib.sha256(" ".join(command).encode()).hexdigest()[:16]
    header = where / HEADER
    if (where / "done").exists():
        return header
    where.mkdir(parents=True, exist_ok=True)
    header.write_text(BINDING_HEADERS + "\n")
    partial = Path(f"{header}.gch.partial")
    try:
        subprocess.run([*command, "-x", "c++-header", str(header), "-o", str(partial)], check=True,
                       capture_output=True, timeout=timeout_s)
    except (OSError, subprocess.SubprocessError):
        partial.unlink(missing_ok=True)
        return None
    partial.rename(f"{header}.gch")
    (where / "done").write_text(" ".join(command))
    return header


def _command(with_cuda: bool) -> list[str] | None:
    """The compiler and flags `load_inline` would give the bindings' translation unit, less the extension's name."""
    from torch.utils import cpp_extension
    writer = getattr(cpp_extension, "_write_ninja_file_to_build_library", None)
    if writer is None or not shutil.which(os.environ.get("CXX", "c++")):
        return None
    wanted = {"name": "kz_pch", "extra_cflags": [], "extra_cuda_cflags": [], "extra_sycl_cflags": [],
              "extra_ldflags": [], "extra_include_paths": [], "with_cuda": with_cuda, "with_sycl": False,
              "is_standalone": False}
    parameters = inspect.signature(writer).parameters
    with tempfile.TemporaryDirectory(prefix="kz-pch-") as scratch:
        ninja = Path(scratch) / "build.ninja"
        sources = [str(Path(scratch) / "main.cpp")] + ([str(Path(scratch) / "cuda.cu")] if with_cuda else [])
        try:
            writer(path=str(ninja), sources=sources, **{k: v for k, v in wanted.items() if k in parameters})
        except Exception:  # noqa: BLE001  (a torch without CUDA, or a writer of another shape)
            return None
        text = ninja.read_text()
    compiler = re.search(r"^cxx = (.+)$", text, re.M)
    flags = re.search(r"^cflags = (.*)$", text, re.M)
    if compiler is None or flags is None or not _is_gcc(compiler.group(1)):
        return None  # clang and others read GCC's .gch differently or not at all
    return [*shlex.split(compiler.group(1)),
            *[f for f in shlex.split(flags.group(1)) if not f.startswith("-DTORCH_EXTENSION_NAME=")]]


def _is_gcc(compiler: str) -> bool:
    try:
        banner = subprocess.run([*shlex.split(compiler), "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return "Free Software Foundation" in banner and "clang" not in banner.lower()
