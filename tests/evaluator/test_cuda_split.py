"""Device code apart from torch's headers: what goes where, the launchers, what is left whole; the precompiled header on g++."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kernelzero.gpu_workers import cuda_split, headers, prebuilt_headers

SOURCE = r'''
#include <torch/extension.h>
#include <cuda_fp16.h>
#define BLOCK 256

struct Scale { float a; float b; };  // a type both halves use

__device__ __forceinline__ float gelu(float v) { return 0.5f * v * (1.0f + tanhf(0.79788456f * v)); }

__global__ void __launch_bounds__(BLOCK) gelu_kernel(const float* __restrict__ x, float* y, long n, Scale s) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = s.a * gelu(x[i]) + s.b;  /* a comment with <<<braces>>> { */
}

static cudaStream_t side = nullptr;

torch::Tensor run(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    const char* text = "not a launch <<<1, 2>>>(x)";
    gelu_kernel<<<(n + BLOCK - 1) / BLOCK, BLOCK, 0, side>>>(x.data_ptr<float>(), y.data_ptr<float>(), n,
                                                              Scale{1.0f, 0.0f});
    gelu_kernel<<<dim3(1), dim3(32)>>>(x.data_ptr<float>(), y.data_ptr<float>(), 0, Scale{0.0f, 0.0f});
    return y;
}
'''


def test_kernels_and_device_code_go_to_nvcc_without_torch_and_launches_become_launcher_calls() -> None:
    parts = cuda_split.split(SOURCE)
    assert parts is not None and parts.kernels == ("gelu_kernel",)
    assert "torch" not in parts.device.replace("torch/", "") and "#include <torch" not in parts.device
    assert "__device__ __forceinline__ float gelu" in parts.device and "struct Scale" in parts.device
    assert "gelu_kernel<<<kz_grid, kz_block, kz_shared, kz_stream>>>(x, y, n, s);" in parts.device
    assert "#include <cuda_fp16.h>" in parts.device and "#define BLOCK 256" in parts.device
    assert "__global__" not in parts.host and "__device__" not in parts.host
    assert "struct Scale" in parts.host and "static cudaStream_t side" in parts.host
    assert "kz_launch_gelu_kernel(dim3((n + BLOCK - 1) / BLOCK), dim3(BLOCK), (size_t)(0), (cudaStream_t)(side), " \
           "x.data_ptr<float>(), y.data_ptr<float>(), n,\n" in parts.host
    assert "kz_launch_gelu_kernel(dim3(dim3(1)), dim3(dim3(32)), (size_t)(0), (cudaStream_t)(0), " in parts.host
    assert '"not a launch <<<1, 2>>>(x)"' in parts.host  # strings are not code
    declaration = parts.host.index("void kz_launch_gelu_kernel(")
    assert parts.host.index("struct Scale") < declaration < parts.host.index("torch::Tensor run(")


@pytest.mark.parametrize("source", [
    "template <typename T> __global__ void k(T* x) {}\nvoid f(float* x) { k<float><<<1, 1>>>(x); }",  # templated
    "__global__ void k(float* x) {}\nvoid f(float* x) { AT_DISPATCH(k<<<1, 1>>>); }",  # no argument list
    "__global__ void k(float* x, int n = 4) {}\nvoid f(float* x) { k<<<1, 1>>>(x); }",  # a default argument
    "__global__ void k(float* x) {\nvoid f(float* x) { k<<<1, 1>>>(x); }",  # unbalanced
    "__global__ void k(float* x) {}\nvoid f(float* x) { other<<<1, 1>>>(x); }",  # a kernel it did not see
    "__global__ void k(float* x) {}\nvoid f(float* x) { (void)x; }",  # nothing launched from the host
])
def test_what_cannot_be_split_faithfully_is_left_whole(source: str) -> None:
    assert cuda_split.split(source) is None


def test_split_mode_puts_the_host_half_with_the_bindings_and_the_precompiled_header_on_g_plus_plus() -> None:
    arguments = {"cpp_sources": "torch::Tensor run(torch::Tensor x);", "cuda_sources": SOURCE,
                 "no_implicit_headers": False, "extra_cflags": None}
    built = headers.arguments_for("split", arguments, pch="/kz/pch/h.h")
    assert built["cuda_sources"] == [cuda_split.split(SOURCE).device]
    assert built["cpp_sources"][0] == headers.BINDING_HEADERS
    assert "torch::Tensor run(torch::Tensor x) {" in built["cpp_sources"][-1]
    assert "torch/extension.h" not in "".join(built["cpp_sources"])
    assert built["extra_cflags"] == ["-include", "/kz/pch/h.h"]
    assert headers.arguments_for("slim", arguments)["cuda_sources"][1].startswith("\n#include <torch/types.h>")
    assert headers.arguments_for("full", arguments) is arguments


PCH_BUILD = '''
import os, sys
from kernelzero.gpu_workers import headers
headers.use("slim", sys.argv[2])
os.environ["TORCH_EXTENSIONS_DIR"] = sys.argv[1]
import torch
from torch.utils.cpp_extension import load_inline
ext = load_inline("kz_pch_twice", cpp_sources="#include <torch/extension.h>\\n"
                  "torch::Tensor twice(torch::Tensor x) { return x * 2; }", functions=["twice"], verbose=True)
print("RESULT", ext.twice(torch.tensor([1.5])).tolist())
'''


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which("g++") and shutil.which("ninja")), reason="needs g++ and ninja")
def test_the_precompiled_header_is_made_once_and_read_by_the_bindings_compile(tmp_path: Path) -> None:
    header = prebuilt_headers.build(tmp_path / "pch", with_cuda=False)
    assert header is not None and Path(f"{header}.gch").stat().st_size > 1 << 20
    assert prebuilt_headers.build(tmp_path / "pch", with_cuda=False) == header  # made once
    out = subprocess.run([sys.executable, "-c", PCH_BUILD, str(tmp_path / "ext"), str(header)],
                         capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "RESULT [3.0]" in out.stdout
    ninja = next((tmp_path / "ext").rglob("build.ninja")).read_text()
    assert f"-include {header}" in ninja
    # -H lists headers as g++ reads them: with the precompiled header valid, torch's own headers are not among them
    build_dir = next((tmp_path / "ext").rglob("build.ninja")).parent
    command = subprocess.run(["ninja", "-t", "commands", "main.o"], cwd=build_dir, capture_output=True,
                             text=True).stdout.strip().splitlines()[-1]
    traced = subprocess.run(command.replace(" -c ", " -H -Winvalid-pch -c ", 1), shell=True, cwd=build_dir,
                            capture_output=True, text=True)
    assert traced.returncode == 0, traced.stderr[-2000:]
    assert f"! {header}.gch" in traced.stderr and "ATen/core/TensorBody.h" not in traced.stderr
