"""Tolerance math: magnitude-aware elementwise and whole-tensor bounds, NaN/Inf parity, constant and unwritten outputs."""

from __future__ import annotations

import pytest
import torch

from kernelzero.gpu_workers.compare import (POISON_BYTE, compare_outputs, compare_tensor, poisoned_elements,
                                             unwritten_between)

R, A = 1e-2, 1e-2


def ref(scale: float = 1.0) -> torch.Tensor:
    return torch.randn(64, 32, generator=torch.Generator().manual_seed(0)) * scale


def test_identical_and_small_error_pass() -> None:
    e = ref()
    assert compare_tensor(e, e.clone(), R, A).ok
    noisy = e * (1 + 1e-3 * torch.randn_like(e))
    result = compare_tensor(e, noisy, R, A)
    assert result.ok and 0 < result.rel_err < 1e-2


def test_zeros_on_tiny_output_fail_though_within_plain_atol() -> None:
    e = ref(1e-4)
    zeros = torch.zeros_like(e)
    assert torch.allclose(zeros, e, rtol=R, atol=A)  # what a naive checker would accept
    result = compare_tensor(e, zeros, R, A)
    assert not result.ok and result.reason == "constant_output"


def test_small_relative_garbage_on_tiny_output_fails() -> None:
    e = ref(1e-4)
    result = compare_tensor(e, e + 5e-5 * torch.randn_like(e), R, A)
    assert not result.ok and result.reason == "output_mismatch" and result.rel_err > R


def test_whole_tensor_relative_error_catches_uniform_bias() -> None:
    e = ref()
    result = compare_tensor(e, e * 1.02, R, A)  # 2% everywhere: elementwise rtol alone might pass near zero
    assert not result.ok and result.rel_err > R


def test_nan_and_inf_parity() -> None:
    e = ref()
    got = e.clone()
    got[3, 4] = float("nan")
    assert compare_tensor(e, got, R, A).reason == "nan_parity"
    e_inf = e.clone()
    e_inf[0, 0] = float("inf")
    got = e_inf.clone()
    assert compare_tensor(e_inf, got, R, A).ok
    got[0, 0] = -float("inf")
    assert compare_tensor(e_inf, got, R, A).reason == "nan_parity"
    both_nan = e.clone()
    both_nan[1, 1] = float("nan")
    assert compare_tensor(both_nan, both_nan.clone(), R, A).ok


def test_shape_dtype_and_subclass() -> None:
    e = ref()
    assert compare_tensor(e, e.t(), R, A).reason == "shape_mismatch"
    assert compare_tensor(e, e.double(), R, A).reason == "dtype_mismatch"

    class Sub(torch.Tensor):
        pass

    assert compare_tensor(e, e.clone().as_subclass(Sub), R, A).reason == "output_not_plain_tensor"


def test_unwritten_elements_detected_by_poison() -> None:
    e = ref()
    got = e.clone()
    got.view(-1)[100:].view(torch.uint8).fill_(POISON_BYTE)
    assert poisoned_elements(got) == e.numel() - 100
    assert compare_tensor(e, got, R, A).reason == "unwritten_output"


def test_integer_outputs_compare_exactly_and_tuples_flatten() -> None:
    idx = torch.arange(10)
    assert compare_tensor(idx, idx.clone(), R, A).ok
    assert not compare_tensor(idx, idx + 1, R, A).ok
    e = ref()
    assert compare_outputs([e, idx], (e.clone(), [idx.clone()]), R, A).ok
    assert compare_outputs([e, idx], (e.clone(),), R, A).reason == "output_count"
    assert compare_outputs([e], "nope", R, A).reason == "output_type"


def test_chunked_comparison_matches_whole(monkeypatch) -> None:
    from kernelzero.gpu_workers import compare
    e = ref()
    noisy = e * (1 + 3e-3 * torch.randn_like(e))
    noisy[5, 5] = e[5, 5] + 1.0
    whole = compare_tensor(e, noisy, R, A)
    monkeypatch.setattr(compare, "CHUNK", 100)
    chunked = compare_tensor(e, noisy, R, A)
    assert (whole.ok, whole.reason, whole.detail) == (chunked.ok, chunked.reason, chunked.detail)
    assert abs(whole.rel_err - chunked.rel_err) < 1e-12 and whole.max_abs_err == chunked.max_abs_err


def test_unwritten_between_counts_only_filled_elements_that_vary() -> None:
    written = torch.randn(64)
    written[5] = float("nan")  # a NaN the candidate wrote itself: the same in both runs
    plain, filled = written.clone(), written.clone()
    plain[32:] = 12345.0  # what memory happened to hold
    filled[32:] = float("nan")  # torch's fill of new memory
    assert unwritten_between([plain], [filled]) == 32
    assert unwritten_between([written], [written.clone()]) == 0


def test_zero_dim_outputs_compare_and_show_unwritten_bits() -> None:
    e = torch.tensor(0.37)
    assert compare_tensor(e, e.clone(), R, A).ok
    assert compare_tensor(e, torch.tensor(0.5), R, A).reason == "output_mismatch"
    assert compare_tensor(e, torch.tensor([0.37]), R, A).reason == "shape_mismatch"
    poisoned = torch.tensor(0.0)
    poisoned.view(1).view(torch.uint8).fill_(POISON_BYTE)
    assert poisoned_elements(poisoned) == 1 and compare_tensor(e, poisoned, R, A).reason == "unwritten_output"
    assert unwritten_between([torch.tensor(1.0)], [torch.tensor(float("nan"))]) == 1


def test_python_numbers_must_come_back_as_numbers_of_their_kind() -> None:
    assert compare_outputs([2.5], 2.5 + 1e-6, R, A).ok
    assert compare_outputs([2.5], 3.5, R, A).reason == "output_mismatch"
    assert compare_outputs([2.5], torch.tensor(2.5), R, A).reason == "output_type"
    assert compare_outputs([3], 3, R, A).ok and compare_outputs([3], 4, R, A).reason == "output_mismatch"
    assert compare_outputs([True], 1, R, A).reason == "output_type"


def test_bool_and_complex_outputs() -> None:
    flags = ref() > 0
    assert compare_tensor(flags, flags.clone(), R, A).ok
    assert compare_tensor(flags, ~flags, R, A).reason == "output_mismatch"
    z = torch.complex(ref(), ref(2.0))
    assert compare_tensor(z, z.clone(), R, A).ok
    assert compare_tensor(z, z.conj(), R, A).reason == "output_mismatch"  # only the imaginary parts differ


def test_outputs_of_another_form_are_mismatches_not_errors() -> None:
    e = ref()
    assert compare_tensor(e, e.to_sparse(), R, A).reason == "layout_mismatch"
    shrunk = e.clone()
    shrunk.untyped_storage().resize_(0)
    assert compare_tensor(e, shrunk, R, A).reason == "output_unreadable"


def test_blame_falls_on_the_output_only_when_the_reference_compares_with_itself(monkeypatch) -> None:
    from kernelzero.gpu_workers import compare
    e = ref()
    odd = e.clone()
    real = compare.compare_outputs

    def breaks_on_the_candidate(expected, got, rtol, atol):
        if got is odd:
            raise RuntimeError("cannot read this output")
        return real(expected, got, rtol, atol)

    monkeypatch.setattr(compare, "compare_outputs", breaks_on_the_candidate)
    assert compare.compare_or_blame([e], odd, R, A).reason == "output_unreadable"
    monkeypatch.setattr(compare, "compare_outputs", lambda *args: 1 / 0)  # the comparison itself is broken
    with pytest.raises(ZeroDivisionError):  # ours: it surfaces as evaluator_error, never as the output's fault
        compare.compare_or_blame([e], e.clone(), R, A)


def test_byte_checks_in_chunks_count_as_whole(monkeypatch) -> None:
    from kernelzero.gpu_workers import compare
    got = ref().clone()
    got.view(-1)[100:300].view(torch.uint8).fill_(POISON_BYTE)
    plain, filled = ref().clone(), ref().clone()
    plain.view(-1)[50:90] = 7.0
    filled.view(-1)[50:90] = float("nan")
    whole = poisoned_elements(got), unwritten_between([plain], [filled])
    monkeypatch.setattr(compare, "CHUNK", 7)
    assert (poisoned_elements(got), unwritten_between([plain], [filled])) == whole == (200, 40)
    assert compare.is_constant(torch.full((9,), float("nan"))) and not compare.is_constant(got)
