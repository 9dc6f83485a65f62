"""Failure classes read from real-looking nvcc, g++, ptxas, Triton and CUDA runtime messages."""

import pytest

from kernelzero.analytics.taxonomy import classify_failure

COMPILE = [
    ('kernel.cu(41): error: identifier "blockDimx" is undefined', "undefined_identifier"),
    ("main.cpp:7:5: error: 'at' was not declared in this scope", "undefined_identifier"),
    ("error: no instance of overloaded function \"atomicAdd\" matches the argument list", "no_matching_overload"),
    ('error: class "at::Tensor" has no member "data_ptrx"', "no_member"),
    ("ptxas error   : Entry function uses too much shared data (0x12000 bytes, 0xc000 max)", "shared_memory_exceeded"),
    ("triton.compiler.errors.CompilationError: at 12:8: arange's range must be a power of 2", "non_power_of_2"),
    ("ValueError: BLOCK_SIZE must be a constexpr", "constexpr_required"),
    ("kernel.cu(3): error: expected a \";\"", "syntax_error"),
    ("ImportError: /tmp/ext.so: undefined symbol: _Z6kernelPf", "link_error"),
    ("fatal error: cutlass/gemm.h: No such file or directory", "missing_header"),
    ("ninja: build stopped: subcommand failed.", "build_failed"),
    ("something else entirely", "other"),
]

RUNTIME = [
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "illegal_memory_access"),
    ("CUDA error: misaligned address", "misaligned_address"),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "out_of_memory"),
    ("CUDA error: too many resources requested for launch", "launch_resources"),
    ("RuntimeError: expected scalar type Float but found Half", "dtype_error"),
    ("RuntimeError: The size of tensor a (4) must match the size of tensor b (5)", "shape_error"),
]


@pytest.mark.parametrize("text,expected", COMPILE)
def test_compile_errors(text, expected):
    assert classify_failure("compile_error", "compile_failed", {"log": text}) == expected


@pytest.mark.parametrize("text,expected", RUNTIME)
def test_runtime_errors(text, expected):
    assert classify_failure("runtime_error", "exception", {"traceback": text}) == expected


def test_other_verdicts_keep_their_reason():
    assert classify_failure("rejected", "inputs_mutated", {}) == "inputs_mutated"
    assert classify_failure("incorrect", "", {}) == "incorrect"
    assert classify_failure("correct", "ok", {"log": "error: x"}) is None
