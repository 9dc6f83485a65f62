"""Shared helpers of the teacher tests: a compact module builder and one CPU evaluator pool per test module."""

from __future__ import annotations

import asyncio
import textwrap

import pytest

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import EvaluatorPool


def module(args: str, body: str, inputs: str, init: str = "", init_args: str = "", init_inputs: str = "[]") -> str:
    """A KernelBench module: forward(self, <args>) runs `body`; get_inputs returns `inputs`."""
    init_lines = textwrap.indent(textwrap.dedent(init).strip(), " " * 8) if init.strip() else ""
    return (
        "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
        "class Model(nn.Module):\n"
        f"    def __init__(self{', ' + init_args if init_args else ''}):\n"
        "        super().__init__()\n"
        f"{init_lines + chr(10) if init_lines else ''}\n"
        f"    def forward(self, {args}):\n"
        f"{textwrap.indent(textwrap.dedent(body).strip(), ' ' * 8)}\n\n\n"
        f"def get_inputs():\n    return {inputs}\n\n\n"
        f"def get_init_inputs():\n    return {init_inputs}\n"
    )


def evaluate_pairs(pairs: dict[str, tuple[str, str]], cache_dir) -> dict:
    """name -> Evaluation for each (problem, candidate), through one CPU pool without its result cache."""

    async def run() -> dict:
        config = EvaluatorConfig(device="cpu", cache_dir=str(cache_dir), timeout_s=60)
        async with EvaluatorPool(config, device="cpu", use_cache=False) as pool:
            return {name: await pool.evaluate(problem, candidate) for name, (problem, candidate) in pairs.items()}

    return asyncio.run(run())


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("teacher-eval")
