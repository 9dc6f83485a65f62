"""Lighter torch headers for candidate builds: sources rewritten as stated, the fallback to full headers, no rebuild on load."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool, headers
from kernelzero.schemas.messages import Built

needs_compiler = pytest.mark.skipif(not (shutil.which("g++") and shutil.which("ninja")),
                                    reason="load_inline needs g++ and ninja on PATH")

# C++-only extensions: they build with g++ on a machine without CUDA, through the same build process as CUDA ones
KERNEL_ONLY = '''
from torch.utils.cpp_extension import load_inline
ext = load_inline("kz_twice", cpp_sources="#include <torch/extension.h>\\n"
                  "torch::Tensor twice(torch::Tensor x) { return x * 2; }", functions=["twice"])
'''
NEEDS_FRONTEND = '''
from torch.utils.cpp_extension import load_inline
ext = load_inline("kz_frontend", cpp_sources="#include <torch/extension.h>\\n"
                  "torch::Tensor act(torch::Tensor x) { return torch::nn::functional::relu(x); }", functions=["act"])
'''
LOAD_AND_CALL = '''
import importlib.util, os, sys, torch
from kernelzero.gpu_workers import headers
headers.use(sys.argv[2])
os.environ["TORCH_EXTENSIONS_DIR"] = sys.argv[1]
spec = importlib.util.spec_from_file_location("kz_candidate", os.path.join(sys.argv[1], "kz_candidate.py"))
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
fn = getattr(module.ext, sys.argv[3])
print("RESULT", fn(torch.tensor([-1.0, 2.0])).tolist())
'''


def test_explicit_and_implicit_full_headers_are_replaced() -> None:
    args = {"cpp_sources": '#include "torch/extension.h"\nint f();', "no_implicit_headers": False,
            "cuda_sources": ["#include <torch/extension.h>\n#include <cuda_fp16.h>\n__global__ void k() {}"]}
    slim = headers.slim_arguments(args)
    assert slim["no_implicit_headers"] is True
    assert slim["cpp_sources"] == [headers.BINDING_HEADERS, "#include <torch/types.h>\nint f();"]
    assert slim["cuda_sources"] == [headers.CUDA_IMPLICIT,
                                    "#include <torch/types.h>\n#include <cuda_fp16.h>\n__global__ void k() {}"]
    assert args["cpp_sources"].startswith('#include "torch/extension.h"')  # the caller's arguments untouched


def test_a_caller_that_drops_the_implicit_headers_keeps_that_choice() -> None:
    slim = headers.slim_arguments({"cpp_sources": ["int f();"], "cuda_sources": None, "no_implicit_headers": True})
    assert slim == {"cpp_sources": ["int f();"], "cuda_sources": None, "no_implicit_headers": True}


def _build(tmp_path: Path, source: str) -> tuple[str, Built, float, object]:
    # uncontained: these tests load the build outside any sandbox, at its host path (test_sandbox.py builds contained)
    config = EvaluatorConfig(cache_dir=str(tmp_path / "cache"), sandbox=False, require_sandbox=False)
    pool = EvaluatorPool(config, device="cpu")
    (tmp_path / "cache" / "builds").mkdir(parents=True, exist_ok=True)
    return asyncio.run(pool._build(source))


def _load_and_call(ext_dir: str, mode: str, function: str) -> tuple[str, int]:
    """Import the built candidate in a fresh process as a worker would; (its output, how many libraries there are)."""
    before = {p: p.stat().st_mtime for p in Path(ext_dir).rglob("*.so")}
    out = subprocess.run([sys.executable, "-c", LOAD_AND_CALL, ext_dir, mode, function],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    after = {p: p.stat().st_mtime for p in Path(ext_dir).rglob("*.so")}
    assert before and after == before, "loading rebuilt the extension"
    return out.stdout.split("RESULT", 1)[1].strip(), len(after)


@needs_compiler
def test_a_kernel_only_source_builds_slim_and_loads_without_rebuilding(tmp_path: Path) -> None:
    ext_dir, built, compile_s, failure = _build(tmp_path, KERNEL_ONLY)
    assert failure is None and compile_s > 0
    assert (built.mode, built.headers) == ("split", "slim")  # no CUDA source to split: built as slim
    main_cpp = (Path(ext_dir) / "kz_twice" / "main.cpp").read_text()
    assert "torch/extension.h" not in main_cpp and "torch/python.h" in main_cpp
    assert _load_and_call(ext_dir, built.mode, "twice") == ("[-2.0, 4.0]", 1)


@needs_compiler
def test_a_source_needing_the_whole_frontend_falls_back_to_full_headers(tmp_path: Path) -> None:
    ext_dir, built, compile_s, failure = _build(tmp_path, NEEDS_FRONTEND)
    assert failure is None and (built.mode, built.headers) == ("full", "full") and built.cpu_s > 0
    assert Path(ext_dir + ".ok").exists()  # the signed mark beside the build
    assert _load_and_call(ext_dir, built.mode, "act") == ("[0.0, 2.0]", 1)
    assert _build(tmp_path, NEEDS_FRONTEND)[:3] == (ext_dir, built, 0.0)  # cached, headers remembered


@pytest.mark.parametrize("message, missing", [
    ("main.cpp:3:51: error: 'functional' is not a member of 'torch::nn'", True),
    ("main.cpp:3:12: error: 'py' has not been declared", True),
    ('cuda.cu(12): error: namespace "torch::nn" has no member "Linear"', True),
    ('cuda.cu(9): error: identifier "kz_undeclared" is undefined', True),
    ("main.cpp:4:1: error: expected ';' before '}' token", False),
    ('cuda.cu(7): error: a value of type "float *" cannot be used to initialize an entity of type "int *"', False),
])
def test_only_a_missing_declaration_is_worth_a_build_with_full_headers(message: str, missing: bool) -> None:
    assert headers.may_need_full_headers(message) is missing


@needs_compiler
def test_a_missing_name_is_retried_with_full_headers_and_then_reported(tmp_path: Path) -> None:
    _, _, _, failure = _build(tmp_path, NEEDS_FRONTEND.replace("relu(x)", "relu(x) + kz_undeclared"))
    assert (failure.verdict, failure.reason) == ("compile_error", "build_failed")
    assert failure.evidence["headers"] == "full"
    assert "kz_undeclared" in failure.evidence["error"] + failure.evidence["log"]


@needs_compiler
def test_a_syntax_error_is_built_once(tmp_path: Path) -> None:
    _, _, _, failure = _build(tmp_path, KERNEL_ONLY.replace("return x * 2;", "return x * 2"))
    assert (failure.verdict, failure.reason) == ("compile_error", "build_failed")
    assert failure.evidence["headers"] == "slim"
