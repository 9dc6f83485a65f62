"""The teacher's output form without running it: declines name their op, the text is deterministic, the answer parses back, the evaluator's static rules pass."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from kernelzero.gpu_workers.ast_rules import check_source
from kernelzero.kit.codeblocks import last_python_block
from kernelzero.producers.synthesizer import synthesize
from kernelzero.bootstrap.teacher import NotLowerable, answer, api_support, lower
from kernelzero.bootstrap.teacher_graph import OPERATORS
from tests.teacher.conftest import module
from tests.teacher.test_families import FAMILIES

X = "[torch.randn(4, 8, 16)]"
DECLINED = {
    "flip": (module("x", "return torch.flip(x, dims=[-1]) + 1.0", X), "torch.flip", "not in the teacher's op subset"),
    "max_pool": (module("x", "return F.max_pool2d(x, 2) * 2.0", "[torch.randn(2, 4, 8, 8)]"), "F.max_pool2d",
                 "not in the teacher's op subset"),
    "batch_norm": (module("x", "return self.bn(x)", "[torch.randn(2, 4, 8, 8)]", init="self.bn = nn.BatchNorm2d(4)"),
                   "BatchNorm2d", "module not in the teacher's op subset"),
    "linear_only": (module("x", "return self.fc(x)", X, init="self.fc = nn.Linear(16, 16)"), "Linear",
                    "no elementwise or reduction work left for a Triton kernel"),
    "leading_dim_reduction": (module("x", "return torch.sum(x, dim=0)", X), "sum",
                              "reduces dim=0, not the trailing dimensions"),
    "middle_broadcast": (module("x, y", "return x * y", "[torch.randn(4, 8, 16), torch.randn(4, 1, 16)]"), "mul",
                         "broadcasts (4, 1, 16) over a middle dimension of (4, 8, 16)"),
    "two_kernels": (module("x", "return torch.relu(self.fc(torch.tanh(x)))", X, init="self.fc = nn.Linear(16, 16)"),
                    "torch.relu",
                    "needs 2 kernels (at most 1 allowed): a torch op or a different row length comes between"),
    "clashing_name": (module("x, mask", "return x * mask", "[torch.randn(4, 8), torch.randn(4, 8)]"), "names",
                      "'mask' clashes with the kernel's own names"),
    "big_integer_power": (module("x", "return x ** 7", X), "pow", "integer exponent 7 (only 1 to 4 in size)"),
}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_declined_module_names_its_op(name):
    source, op, reason = DECLINED[name]
    with pytest.raises(NotLowerable) as caught:
        lower(source)
    assert (caught.value.op, caught.value.reason) == (op, reason)


def test_two_kernels_are_lowered_when_allowed():
    source = DECLINED["two_kernels"][0]
    text = lower(source, max_kernels=2)
    assert "def kernel(" in text and "def kernel1(" in text
    assert text.index("kernel[(") < text.index("self.fc(") < text.index("kernel1[(")


def test_same_module_gives_the_same_text_in_another_process():
    source = FAMILIES["layer_norm_epilogue_of_linear"]
    script = "import sys; from kernelzero.bootstrap.teacher import lower; sys.stdout.write(lower(sys.stdin.read()))"
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    other = subprocess.run([sys.executable, "-c", script], input=source, capture_output=True, text=True, env=env,
                           check=True).stdout
    assert lower(source) == lower(source) == other


def test_synthesized_module_lowers_the_same_after_resynthesis():
    first = synthesize(["torch.nn.functional.silu", "torch.mean"], seed=3, scale=2.0 ** -13).source
    again = synthesize(["torch.nn.functional.silu", "torch.mean"], seed=3, scale=2.0 ** -13).source
    assert lower(first) == lower(again)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_answer_parses_back_and_passes_the_static_rules(name):
    text = answer(FAMILIES[name])
    source = last_python_block(text, "ModelNew")
    assert text.startswith("```python\n") and text.endswith("```\n")
    assert source == lower(FAMILIES[name])
    assert check_source(source) == []
    assert '"""' not in source
    comments = [line.strip() for line in source.splitlines() if "#" in line]
    assert comments and all(re.fullmatch(r"# [\w.]+", c) for c in comments), "one `# OP` line before each op"
    assert all(op[2:].split(".")[-1] in FAMILIES[name] or op[2:] in OPERATORS.values() for op in comments)


def test_init_is_copied_statement_by_statement_and_super_takes_no_arguments():
    source = module("x", "return torch.relu(self.fc(x)) * self.scale", X,
                    init="self.fc = nn.Linear(16, 16)\nself.scale = scale", init_args="scale", init_inputs="[0.5]")
    source = source.replace("super().__init__()", "super(Model, self).__init__()")
    text = lower(source)
    assert "    def __init__(self, scale):\n        super().__init__()\n        self.fc = nn.Linear(16, 16)\n" \
           "        self.scale = scale\n" in text
    assert "Model," not in text


def test_broadcast_loads_index_by_row_and_column():
    text = lower(FAMILIES["broadcasting"])
    assert "bias = tl.load(bias_ptr + offs % 32, mask=mask, other=0.0)" in text
    assert "col = tl.load(col_ptr + row)" in text
    assert "s = tl.load(s_ptr)" in text


def test_api_support_lists_lowerable_apis_and_says_why_others_are_not():
    support = api_support()
    assert support["torch.nn.functional.gelu"] == support["torch.nn.LayerNorm"] == ""
    assert support["torch.flip"] == "torch.flip: not in the teacher's op subset"
    assert support["torch.nn.Linear"] == "Linear: no elementwise or reduction work left for a Triton kernel"


@pytest.mark.parametrize("op", ["F.softmax(y, dim=-1)", "F.softmin(y, dim=-1)", "F.log_softmax(y, dim=-1)",
                                "torch.logsumexp(y, dim=-1)"])
def test_a_rows_extreme_is_subtracted_from_the_masked_row_never_from_a_product(op):
    """On a GPU Triton fuses a product into a subtraction that reads it (one FMA, the product unrounded): the row's
    maximum subtracted from x * x itself came out thousands from 0 at 1e10 (candidates_cuda/triton_fused_product_log_softmax.py)."""
    source = lower(module("x", f"y = x * x\nreturn {op}", "[torch.randn(8, 16)]"))
    product = re.search(r"(\w+) = x \* x", source).group(1)
    subtractions = re.findall(r"(\w+) - (\w+)", source)
    assert subtractions and all(product not in pair for pair in subtractions), source
