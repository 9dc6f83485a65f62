"""Each op family the teacher lowers, judged by the real evaluator on the CPU (Triton interpreter): the verdict must be `correct`."""

from __future__ import annotations

import pytest

from kernelzero.producers.synthesizer import synthesize
from kernelzero.bootstrap.teacher import lower
from kernelzero.bootstrap.teacher_check import CheckFailed, check
from tests.teacher.conftest import evaluate_pairs, module

# Products of O(1) factors: a few percent of error in any one op shows in the output.
FAMILIES = {
    "activations_smooth": module("x", """
        return (F.gelu(x) + 2.0) * (torch.sigmoid(x) * torch.tanh(x) + 2.0) * (F.silu(x) + 2.0) * F.softplus(x)
    """, "[torch.randn(8, 32)]"),
    "activations_piecewise": module("x", """
        return (F.elu(x) + 2.0) * (F.selu(x) + 2.0) * (F.leaky_relu(x, 0.2) + 2.0) * (F.hardtanh(x) + 2.0)
    """, "[torch.randn(8, 32)]"),
    "activations_hard_and_modules": module("x", """
        y = (F.hardsigmoid(x) + 1.0) * (F.hardswish(x) + 2.0) * (F.softsign(x) + 2.0) * (F.mish(x) + 2.0)
        return y * (self.act(x) + 2.0) * (self.relu(x) + 1.0)
    """, "[torch.randn(8, 32)]", init="self.act = nn.GELU(approximate='tanh')\nself.relu = nn.ReLU()"),
    "elementwise_math": module("x", """
        y = torch.exp(torch.clamp(x, -1.0, 1.0)) * torch.log(torch.abs(x) + 2.0) * torch.sqrt(x * x + 1.0)
        return -y * torch.rsqrt(y * y + 0.5) * (x ** 2 + 1.0) * torch.pow(torch.abs(x) + 0.5, 1.5) / 2.0
    """, "[torch.randn(8, 32)]"),
    "broadcasting": module("x, col, s", """
        return (x * self.scale + self.bias) * col - s + 2.0 / (1.0 + x * x)
    """, "[torch.randn(8, 4, 32), torch.randn(8, 4, 1), torch.randn(1)]",
        init="self.bias = nn.Parameter(torch.randn(features))\nself.scale = scale",
        init_args="features, scale", init_inputs="[32, 0.5]"),
    "per_channel_weights": module("x", """
        return (self.act(x) + 1.0) * self.norm(x)
    """, "[torch.randn(2, 4, 8, 8)]", init="self.act = nn.PReLU(4)\nself.norm = nn.GroupNorm(2, 4)"),
    "row_reductions": module("x", """
        x = torch.relu(x) + 0.5
        a = (torch.sum(x, dim=-1) / 64.0 + 1.0) * torch.mean(x, -1) * torch.amax(x, dim=-1)
        b = torch.max(x, dim=-1).values * torch.min(x, dim=-1).values * torch.std(x, dim=-1) * torch.norm(x, dim=-1)
        return torch.sigmoid(a) * b
    """, "[torch.randn(16, 64)]"),
    "triangle_of_a_reduction": module("x", """
        return torch.tril(torch.sum(x, dim=-1)) + 1.0
    """, "[torch.randn(2, 8, 8, 16)]"),
    "keepdim_and_trailing_dims": module("x", """
        x = x - torch.mean(x, dim=(-2, -1), keepdim=True)
        return x / (x.var(dim=(-2, -1), keepdim=True) + 1.0)
    """, "[torch.randn(4, 8, 16)]"),
    "softmax_family": module("x", """
        y = F.softmax(x, dim=-1) * 32.0 * (F.log_softmax(x, dim=-1) - 1.0)
        return y * torch.logsumexp(x, dim=-1, keepdim=True)
    """, "[torch.randn(16, 32)]"),
    "full_reductions": module("x, y", """
        x = (x - x.mean()) / (x.std() + 1e-6)
        return torch.relu(x) * F.mse_loss(x, y)
    """, "[torch.randn(8, 64), torch.randn(8, 64)]"),
    "layer_norm_epilogue_of_linear": module("x", """
        return self.norm(F.gelu(self.fc(x)))
    """, "[torch.randn(4, 8, 32)]", init="self.fc = nn.Linear(32, 16)\nself.norm = nn.LayerNorm(16)"),
    "conv_epilogue": module("x", """
        x = self.conv(x)
        return (torch.relu(x) + 1.0) * torch.tanh(x)
    """, "[torch.randn(2, 3, 8, 8)]", init="self.conv = nn.Conv2d(3, 4, 3, padding=1)"),
    "matmul_with_parameter": module("x", """
        return F.softmax(torch.matmul(x, self.w) / 4.0, dim=-1)
    """, "[torch.randn(8, 16)]", init="self.w = nn.Parameter(torch.randn(16, 16))"),
    "data_movement_on_the_host": module("x, y", """
        c = torch.chunk(torch.cat([torch.transpose(x, -1, -2), y], dim=-1), 2, dim=-1)[1]
        d = F.pad(torch.narrow(c, -1, 0, 8), (0, 8))
        return torch.sigmoid(d) * torch.exp(c[..., :16] * 0.5)
    """, "[torch.randn(4, 16, 8), torch.randn(4, 8, 16)]"),
    "prologue_of_conv": module("x", """
        x = torch.tanh(x) * 2.0
        x = x.reshape(2, 4, 8, 8)
        return self.conv(x)
    """, "[torch.randn(16, 32)]", init="self.conv = nn.Conv2d(4, 4, 3, padding=1)"),
    "synthesized_gelu_sum": synthesize(["torch.nn.functional.gelu", "torch.sum"], seed=0, scale=2.0 ** -13).source,
    "synthesized_add_softmax_linear": synthesize(["torch.nn.Linear", "torch.add", "torch.nn.functional.softmax"],
                                                 seed=4, scale=2.0 ** -13).source,
}

# Modules that need a second kernel (max_kernels=2): a torch op between fused work, rows of two lengths.
TWO_KERNELS = {
    "prologue_and_epilogue_of_linear": module("x", """
        return torch.relu(self.fc(torch.tanh(x))) * 2.0
    """, "[torch.randn(4, 8, 16)]", init="self.fc = nn.Linear(16, 16)"),
    "comparison_read_by_the_second_kernel": module("x", """
        x = F.instance_norm(x)
        return torch.count_nonzero(x > 0, dim=-1).float()
    """, "[torch.randn(2, 4, 8, 16)]"),
    "row_reduction_then_full_reduction": module("x", """
        x = torch.amax(x, dim=-1)
        return F.relu6((x - x.mean()) / (x.std() + 1e-6))
    """, "[torch.randn(16, 8, 32)]"),
}


def _broken_softmax() -> str:
    """The softmax family's lowering with its denominator 10% off: the evaluator must catch it."""
    good = lower(FAMILIES["softmax_family"])
    broken = good.replace("c = tl.sum(", "c = 1.1 * tl.sum(", 1)
    assert broken != good
    return broken


def _pairs() -> dict[str, tuple[str, str]]:
    pairs = {name: (source, lower(source)) for name, source in FAMILIES.items()}
    pairs |= {name: (source, lower(source, max_kernels=2)) for name, source in TWO_KERNELS.items()}
    pairs["broken"] = (FAMILIES["softmax_family"], _broken_softmax())
    return pairs


PAIRS = _pairs()


@pytest.fixture(scope="module")
def verdicts(cache_dir) -> dict:
    return evaluate_pairs(PAIRS, cache_dir)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_lowered_module_is_correct(verdicts, name):
    result = verdicts[name]
    assert (result.verdict, result.reason) == ("correct", "ok"), result.evidence
    assert result.evidence["custom_kernels"] == "kernel"


@pytest.mark.parametrize("name", sorted(TWO_KERNELS))
def test_module_lowered_to_two_kernels_is_correct(verdicts, name):
    result = verdicts[name]
    assert (result.verdict, result.reason) == ("correct", "ok"), result.evidence
    assert result.evidence["custom_kernels"] == "kernel, kernel1"


def test_a_wrong_kernel_for_the_same_module_is_incorrect(verdicts):
    assert verdicts["broken"].verdict == "incorrect"


@pytest.mark.parametrize("name", sorted(PAIRS))
def test_the_cheap_trusted_check_agrees_with_the_evaluator(verdicts, name):
    # distillation checks the teacher with bootstrap/teacher_check.py and audits only a share with the
    # evaluator: on every family the two must come to the same answer
    problem, answer = PAIRS[name]
    try:
        check(problem, answer)
        passed = True
    except CheckFailed:
        passed = False
    assert passed == (verdicts[name].verdict == "correct"), verdicts[name].evidence
