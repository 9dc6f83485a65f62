"""CA-GRPO reward and advantage math on hand-made groups, against numbers worked out by hand."""

import math

import pytest

from kernelzero.config import TrainerConfig
from kernelzero.consumers.ca_grpo import (
    GateWindow, SampleOutcome, describe_rule, equalize_speedups, group_advantages, score_group,
)

CONFIG = TrainerConfig()  # tau 0.5, lambda 0.5, clip [-1, 2], rejected -0.5, eps 1e-4, k 4, drop


def group(*specs, version=0):
    """specs: (verdict, speedup) pairs."""
    return [
        SampleOutcome(sample_id=f"s{i}", verdict=v, speedup=s, policy_version=version)
        for i, (v, s) in enumerate(specs)
    ]


def rewards(result):
    return [s.reward for s in result.samples]


def advantages(result):
    return [s.advantage for s in result.samples]


def test_all_correct_same_speed_gives_zero_advantage():
    result = score_group(group(*[("correct", 2.0)] * 4), 0, CONFIG)
    assert result.gate_open and result.pass_rate == 1.0
    assert rewards(result) == [1.5] * 4  # 1 + 0.5 * log2(2)
    assert advantages(result) == [0.0] * 4


def test_all_correct_speed_terms_are_clipped_and_normalised():
    result = score_group(group(("correct", 1.0), ("correct", 2.0), ("correct", 4.0), ("correct", 8.0)), 0, CONFIG)
    assert rewards(result) == [1.0, 1.5, 2.0, 2.0]  # log2 8 = 3 clipped to 2
    mean = 1.625
    std = math.sqrt((0.625**2 + 0.125**2 + 0.375**2 + 0.375**2) / 4)  # 0.41457...
    expected = [(r - mean) / (std + 1e-4) for r in [1.0, 1.5, 2.0, 2.0]]
    assert advantages(result) == pytest.approx(expected, abs=1e-12)
    assert advantages(result)[0] == pytest.approx(-1.50719, abs=1e-5)


def test_all_wrong_gives_zero_rewards_and_advantages():
    result = score_group(group(("incorrect", None), ("compile_error", None), ("timeout", None)), 0, CONFIG)
    assert not result.gate_open and result.pass_rate == 0.0
    assert rewards(result) == [0.0, 0.0, 0.0]
    assert advantages(result) == [0.0, 0.0, 0.0]


HALF_CORRECT = group(("correct", 4.0), ("correct", 0.25), ("incorrect", None), ("runtime_error", None))


def test_gate_just_below_tau_rewards_correctness_alone():
    config = TrainerConfig(tau=0.5001)
    result = score_group(HALF_CORRECT, 0, config)
    assert result.gate_rate == 0.5 and not result.gate_open
    assert rewards(result) == [1.0, 1.0, 0.0, 0.0]
    assert advantages(result) == pytest.approx([0.5 / 0.5001, 0.5 / 0.5001, -0.5 / 0.5001, -0.5 / 0.5001], abs=1e-12)


def test_gate_just_above_tau_adds_the_performance_term():
    for tau in (0.4999, 0.5):  # p >= tau opens the gate
        result = score_group(HALF_CORRECT, 0, TrainerConfig(tau=tau))
        assert result.gate_open
        assert rewards(result) == [2.0, 0.5, 0.0, 0.0]  # 1 + 0.5 * 2, 1 + 0.5 * (-1) (log2 0.25 = -2 clipped)
        std = math.sqrt((1.375**2 + 0.125**2 + 0.625**2 * 2) / 4)
        assert advantages(result) == pytest.approx([(r - 0.625) / (std + 1e-4) for r in [2.0, 0.5, 0, 0]])


@pytest.mark.parametrize("speedup", [math.nan, math.inf, -math.inf, None, 0.0, -3.0])
def test_speedup_that_is_no_measurement_earns_exactly_one(speedup):
    result = score_group(group(("correct", speedup), ("correct", 2.0)), 0, CONFIG)
    assert result.gate_open
    assert rewards(result) == [1.0, 1.5]
    assert result.samples[0].speedup is None or math.isfinite(result.samples[0].speedup)


def test_rejected_samples_earn_the_penalty_even_with_gate_open():
    result = score_group(group(("correct", 1.0), ("correct", 1.0), ("rejected", 100.0), ("incorrect", None)), 0, CONFIG)
    assert result.gate_open
    assert rewards(result) == [1.0, 1.0, -0.5, 0.0]
    mean = 0.375
    std = math.sqrt((0.625**2 * 2 + 0.875**2 + 0.375**2) / 4)
    assert advantages(result) == pytest.approx([(r - mean) / (std + 1e-4) for r in [1.0, 1.0, -0.5, 0.0]])
    closed = score_group(group(("rejected", None), ("incorrect", None)), 0, CONFIG)
    assert rewards(closed) == [-0.5, 0.0]


MIXED_AGES = [
    SampleOutcome(sample_id="fresh-ok", verdict="correct", speedup=1.0, policy_version=10),
    SampleOutcome(sample_id="fresh-bad", verdict="incorrect", policy_version=6),  # age 4 = k: still fresh
    SampleOutcome(sample_id="stale-ok", verdict="correct", speedup=1.0, policy_version=5),  # age 5 > k
    SampleOutcome(sample_id="stale-ok2", verdict="correct", speedup=1.0, policy_version=1),
]


def test_stale_samples_dropped():
    result = score_group(MIXED_AGES, 10, CONFIG)
    assert [s.weight for s in result.samples] == [1.0, 1.0, 0.0, 0.0]
    assert result.stale_dropped == 2
    assert result.gate_rate == 0.5 and result.gate_open  # 1 of the 2 kept samples is correct
    assert result.pass_rate == 0.75  # the measurement counts every sample
    assert advantages(result) == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0], abs=1e-12)  # std 0.5


def test_stale_samples_importance_weighted_stay_in_the_group():
    result = score_group(MIXED_AGES, 10, TrainerConfig(stale="importance_weight"))
    assert [s.weight for s in result.samples] == [1.0] * 4
    assert result.stale_dropped == 0 and result.gate_rate == 0.75
    std = math.sqrt(3) / 4  # rewards 1, 0, 1, 1: mean 0.75
    assert advantages(result) == pytest.approx([0.25 / (std + 1e-4), -0.75 / (std + 1e-4)] + [0.25 / (std + 1e-4)] * 2)


def test_unscaled_variant_is_reward_minus_mean():
    result = score_group(HALF_CORRECT, 0, TrainerConfig(scale_std=False))
    assert advantages(result) == [1.375, -0.125, -0.625, -0.625]


def test_moving_window_gate_uses_previous_outcomes():
    config = TrainerConfig(gate="window", gate_window=4)
    window = GateWindow((0, 0, 0))
    result = score_group(group(("correct", 4.0), ("correct", 4.0)), 0, config, window)
    assert result.window == GateWindow((0, 0, 1, 1))  # oldest 0 fell out of the window of 4
    assert result.gate_rate == 0.5 and result.gate_open
    assert rewards(result) == [2.0, 2.0]
    closed = score_group(group(("correct", 4.0), ("incorrect", None)), 0, config, GateWindow((0, 0, 0, 0)))
    assert closed.window == GateWindow((0, 0, 1, 0)) and closed.gate_rate == 0.25 and not closed.gate_open
    assert rewards(closed) == [1.0, 0.0]


def test_empty_group_and_single_sample():
    assert score_group([], 0, TrainerConfig(tau=0.0)).gate_open is False
    assert group_advantages([3.0], True, 1e-4) == [0.0]
    assert group_advantages([], True, 1e-4) == []


def test_rule_text_names_the_configuration():
    text = describe_rule(TrainerConfig(tau=0.3, stale="importance_weight"))
    assert "tau=0.3" in text and "stale=importance_weight" in text


def test_speedups_within_the_timing_noise_earn_equal_rewards():
    # an all-correct group whose speedups differ by 0.4-1.5% (the H200's spread between evaluations)
    noisy = group(("correct", 1.000), ("correct", 1.004), ("correct", 1.015), ("correct", 0.996))
    result = score_group(noisy, 0, TrainerConfig(speedup_tolerance=0.02))
    assert len(set(rewards(result))) == 1 and advantages(result) == [0.0] * 4
    assert not result.informative
    assert [s.speedup for s in result.samples] == [1.000, 1.004, 1.015, 0.996]  # reported as measured
    without_floor = score_group(noisy, 0, TrainerConfig(speedup_tolerance=0.0))
    assert without_floor.informative and max(map(abs, advantages(without_floor))) > 1.0  # noise became advantage


def test_noise_floor_keeps_real_differences_and_groups_runs():
    assert equalize_speedups([1.0, 1.01, 2.0, None, 2.03, 4.0], 0.02) == pytest.approx(
        [math.sqrt(1.01), math.sqrt(1.01), math.sqrt(2.0 * 2.03), None, math.sqrt(2.0 * 2.03), 4.0])
    # a run is measured from its slowest member, so a chain of small steps cannot merge 1.0 and 1.03
    assert equalize_speedups([1.0, 1.015, 1.03], 0.02) == pytest.approx([math.sqrt(1.015), math.sqrt(1.015), 1.03])
    result = score_group(group(("correct", 1.0), ("correct", 1.01), ("correct", 2.0), ("incorrect", None)), 0, CONFIG)
    assert rewards(result)[0] == rewards(result)[1] < rewards(result)[2] and result.informative


def test_our_failures_are_never_charged_to_a_sample():
    result = score_group(group(("correct", None), ("evaluator_error", None), ("problem_error", None),
                               ("incorrect", None)), 0, CONFIG)
    assert [s.weight for s in result.samples] == [1.0, 0.0, 0.0, 1.0]
    assert advantages(result)[1:3] == [0.0, 0.0] and result.uncharged == 2
    assert result.pass_rate == 0.5 and result.gate_rate == 0.5  # over the two charged samples
    assert advantages(result)[0] == pytest.approx(-advantages(result)[3])
    only_ours = score_group(group(("evaluator_error", None), ("evaluator_error", None)), 0, CONFIG)
    assert not only_ours.informative and only_ours.pass_rate == 0.0
