"""The cheap trusted check of the teacher's answers (bootstrap/teacher_check.py): what it refuses and why; its agreement with the evaluator is in test_families.py."""

from __future__ import annotations

import pytest

from kernelzero.producers.synthesizer import synthesize
from kernelzero.bootstrap.teacher import lower
from kernelzero.bootstrap.teacher_check import CheckFailed, check, load_answer
from tests.teacher.conftest import module

GELU_SUM = synthesize(["torch.nn.functional.gelu", "torch.sum"], seed=0, scale=2.0 ** -15).source


def test_the_teachers_answer_passes_at_every_size_it_was_written_for():
    for seed in range(4):
        source = synthesize(["torch.nn.functional.silu", "torch.logsumexp"], seed=seed, scale=2.0 ** -15).source
        check(source, lower(source))


def test_an_answer_with_a_wrong_constant_fails_on_a_named_trial():
    wrong = lower(GELU_SUM).replace("0.5 *", "0.45 *", 1)
    with pytest.raises(CheckFailed, match=r"^seed 0: max abs error"):
        check(GELU_SUM, wrong)


def test_an_answer_that_differs_only_on_negative_inputs_fails_on_the_negated_trial():
    relu = module("x", "return torch.relu(x) * 2.0", "[torch.rand(4, 16)]")
    wrong = lower(relu).replace("tl.maximum(x, 0.0)", "x", 1)
    assert wrong != lower(relu)
    with pytest.raises(CheckFailed, match=r"^negated: "):
        check(relu, wrong)


def test_a_module_that_float32_cannot_compute_is_refused_however_right_the_answer():
    # standardising values that differ by 1e-12 of their size: float32 has no digits left for the differences
    unstable = module("x", "x = torch.exp(x * 1e-6 + 5.0)\nreturn (x - x.mean()) / (x.std() + 1e-6)",
                      "[torch.randn(8, 16)]")
    with pytest.raises(CheckFailed, match="ill-conditioned"):
        check(unstable, lower(unstable, max_kernels=2))


def test_what_the_emulation_does_not_cover_is_refused_by_name():
    two_axes = lower(GELU_SUM).replace("tl.program_id(0)", "tl.program_id(1)")
    with pytest.raises(CheckFailed, match=r"program_id\(1\)"):
        check(GELU_SUM, two_axes)


def test_triton_inside_the_answer_is_the_emulation_not_the_real_package():
    namespace = load_answer(lower(GELU_SUM))
    assert type(namespace["kernel"]).__name__ == "_Kernel"
    assert namespace["triton"].next_power_of_2(17) == 32
