"""Which profiled CUDA kernel names belong to libraries (ATen, cuBLAS, cuDNN, CUTLASS, ...); a name heuristic only.

A candidate that names its kernel like a library kernel loses the credit for it (it is then
rejected as having no custom kernel), so a wrong guess here never lets a hack through.
"""

from __future__ import annotations

import re

_LIBRARY = re.compile(
    r"(^|[^A-Za-z0-9])(at::|at_cuda_detail|c10::|cutlass|cublas|cublasLt|cudnn|nvjet|cub::|xmma|gemm|gemv|"
    r"sm\d\d_|ampere_|hopper_|volta_|turing_|Memcpy|Memset|splitKreduce|fmha|flash_fwd|cask_|"
    r"elementwise_kernel|reduce_kernel|implicit_convolve|triton_(poi|red|per|tem)_)",
    re.IGNORECASE,
)


def is_library_kernel(name: str) -> bool:
    return bool(_LIBRARY.search(name))
