"""pass@k and fast_p against values worked out by hand and against KernelBench's own unit-test numbers."""

from __future__ import annotations

import math

import pytest

from kernelzero.analytics.kernelbench_metrics import (
    SampleScore, fast_p, fast_p_table, mean_pass_at_k, pass_at_k,
)


def test_pass_at_k_known_values() -> None:
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(10, 3, 5) == pytest.approx(1 - 21 / 252)  # 1 - C(7,5) / C(10,5)
    assert pass_at_k(5, 0, 1) == 0.0 and pass_at_k(5, 5, 1) == 1.0
    assert pass_at_k(10, 1, 10) == 1.0
    assert pass_at_k(0, 0, 1) == 0.0


def test_pass_at_k_is_the_combinatorial_estimator() -> None:
    for n in range(1, 12):
        for c in range(n + 1):
            for k in range(1, n + 1):
                exact = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12), (n, c, k)


def test_k_beyond_n_takes_n_as_kernelbench_does() -> None:
    assert pass_at_k(3, 1, 10) == 1.0 and pass_at_k(3, 0, 10) == 0.0
    assert pass_at_k(3, 1, 10) == pass_at_k(3, 1, 3)


def test_mean_pass_at_k_averages_over_problems() -> None:
    problems = [[SampleScore(True), SampleScore(False)], [SampleScore(False), SampleScore(False)]]
    assert mean_pass_at_k(problems, 1) == pytest.approx((0.5 + 0.0) / 2)
    assert mean_pass_at_k(problems, 2) == pytest.approx((1.0 + 0.0) / 2)
    assert mean_pass_at_k([], 1) is None


def _one_sample_each(correct: list[int], baseline: list[float], actual: list[float]) -> list[list[SampleScore]]:
    return [[SampleScore(bool(c), b / a)] for c, b, a in zip(correct, baseline, actual)]


def test_fast_p_matches_kernelbench_score_tests() -> None:
    # the inputs and expected values of KernelBench's src/kernelbench/unit_tests/test_score.py::test_fastp
    first = _one_sample_each([1, 0, 1, 1, 0], [0.1, 0.15, 0.2, 0.05, 0.3], [0.2, 0.15, 0.3, 0.01, 0.2])
    assert fast_p(first, 1.0) == pytest.approx(0.2) and fast_p(first, 0.5) == pytest.approx(0.4)
    second = _one_sample_each([1, 1, 1, 1, 0], [0.24, 0.31, 100.0, 0.0001, 0.3], [0.3, 0.3, 200.0, 0.0001, 0.3])
    assert fast_p(second, 1.0) == pytest.approx(0.2) and fast_p(second, 0.5) == pytest.approx(0.6)
    none = _one_sample_each([0, 0, 0, 0, 0], [0.1, 0.15, 0.2, 0.05, 0.3], [0.2, 0.15, 0.3, 0.01, 0.2])
    assert fast_p(none, 1.0) == 0.0


def test_fast_p_with_several_samples_is_kernelbench_averaged_over_sample_indices() -> None:
    a = [SampleScore(True, 2.0), SampleScore(True, 0.9)]
    b = [SampleScore(True, 1.2), SampleScore(False)]
    per_index = [fast_p([[a[i]], [b[i]]], 1.0) for i in range(2)]  # KernelBench's fast_1 for sample 0, then 1
    assert fast_p([a, b], 1.0) == pytest.approx(sum(per_index) / 2) == pytest.approx(0.5)
    assert fast_p([a, b], 0.0) == pytest.approx((1.0 + 0.5) / 2)  # fast_0 is the correct share


def test_fast_p_makes_no_claim_without_timing() -> None:
    untimed = [[SampleScore(True)], [SampleScore(False)]]
    assert fast_p(untimed, 1.0) is None and fast_p([], 1.0) is None
    assert set(fast_p_table(untimed)) == {"0", "0.5", "0.8", "1", "1.5", "2"}
    assert all(v is None for v in fast_p_table(untimed).values())
    assert fast_p([[SampleScore(False)]], 1.0) == 0.0  # nothing correct: nothing needed timing
