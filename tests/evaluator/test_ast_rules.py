"""The AST rules: each forbidden construct is found with its rule; ordinary kernel code passes clean."""

from __future__ import annotations

import pytest

from kernelzero.gpu_workers.ast_rules import check_source

CLEAN = '''
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl
try:
    import numpy as np
except ImportError:
    np = None

@triton.jit
def k(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = math.sqrt(2.0)
        setattr(self, "extra", 1)
        self.cache = {}

    def forward(self, x):
        y = torch.empty_like(x)
        self.cache["last"] = x.shape
        k[(1,)](y, y.numel(), BLOCK=128)
        return F.pad(y, (0, 0)) * getattr(self, "scale")
'''

CASES = [
    ("def f():\n    try:\n        return 1\n    except Exception:\n        return 2\n", "try_except_fallback"),
    ("try:\n    x = 1\nexcept Exception:\n    x = 2\n", "try_except_fallback"),
    ("import contextlib\nwith contextlib.suppress(Exception):\n    pass\n", "try_except_fallback"),
    ("import torch\ntorch.relu = abs\n", "monkey_patch"),
    ("import torch.nn.functional as F\nF.relu = abs\n", "monkey_patch"),
    ("from torch import Tensor\nTensor.add = None\n", "monkey_patch"),
    ("import torch\nsetattr(torch, 'allclose', None)\n", "monkey_patch"),
    ("import time\ntime.perf_counter = lambda: 0.0\n", "monkey_patch"),
    ("import torch\ntorch.backends.cuda.matmul.allow_tf32 = True\n", "monkey_patch"),
    ("import torch\nlib = torch.library.Library('aten', 'IMPL')\n", "monkey_patch"),
    ("import torch\ntorch.library.impl('aten::relu', 'CPU')\n", "monkey_patch"),
    ("class A:\n    pass\nA.__eq__ = None\n", "monkey_patch"),
    ("import threading\n", "threading"),
    ("from concurrent.futures import ThreadPoolExecutor\n", "threading"),
    ("import multiprocessing as mp\n", "threading"),
    ("import subprocess\n", "subprocess"),
    ("import os\nos.system('ls')\n", "subprocess"),
    ("import gc\n", "introspection"),
    ("import inspect\n", "introspection"),
    ("import ctypes\n", "introspection"),
    ("import sys\nf = sys._getframe(1)\n", "introspection"),
    ("import sys\nm = sys.modules['torch']\n", "introspection"),
    ("def f(g):\n    return g.f_back\n", "introspection"),
    ("x = eval('1')\n", "introspection"),
    ("m = __import__('g' + 'c')\n", "introspection"),
    ("g = globals()\n", "introspection"),
    ("import torch\nfn = getattr(torch, 'rel' + 'u')\n", "introspection"),
    ("def f(fn):\n    return fn.__globals__\n", "introspection"),
    ("x = __builtins__\n", "builtins_access"),
    ("import builtins\n", "builtins_access"),
    ("import torch\nclass ModelNew(torch.nn.Module, Model):\n    pass\n", "reference_model"),
    ("from __main__ import Model\n", "reference_model"),
    ("m = Model()\n", "reference_model"),
    ("from . import problem\n", "reference_import"),
    ("import torch\nclass T(torch.Tensor):\n    pass\n", "tensor_subclass"),
    ("class M:\n    def __torch_function__(self, *a):\n        pass\n", "dispatch_override"),
    ("from torch.utils._python_dispatch import TorchDispatchMode\n", "dispatch_override"),
    ("import torch\nx = torch._C._set_grad_enabled\n", "dispatch_override"),
    ("import torch\nf = torch.compile(abs)\n", "torch_compile"),
    ("import os\nos.write(3, b'forged')\n", "fd_access"),
    ("from os import fdopen\n", "fd_access"),
    ("import socket\n", "fd_access"),
    ("f = open('/proc/self/fd/3', 'wb')\n", "fd_access"),
    ("f = open(3, 'wb')\n", "fd_access"),
    ("import io\nio.FileIO(3, 'wb')\n", "fd_access"),
    ("import torch._inductor\n", "torch_compile"),
]


def test_clean_kernel_source_has_no_findings() -> None:
    assert check_source(CLEAN) == []


@pytest.mark.parametrize("source,rule", CASES, ids=[f"{rule}-{i}" for i, (_, rule) in enumerate(CASES)])
def test_rule_found(source: str, rule: str) -> None:
    rules = {f.rule for f in check_source(source)}
    assert rule in rules, (source, rules)


def test_finding_names_line_and_detail() -> None:
    findings = check_source("import torch\n\n\ntorch.allclose = lambda *a: True\n")
    assert [(f.rule, f.line) for f in findings] == [("monkey_patch", 4)]
    assert "torch.allclose" in findings[0].detail


def test_syntax_error_raises() -> None:
    with pytest.raises(SyntaxError):
        check_source("def f(:\n")
