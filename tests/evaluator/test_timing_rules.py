"""The timing rules that need no GPU: when warm-up counts per-call times as settled."""

from kernelzero.gpu_workers.timing import SETTLE_WINDOW, settled


def test_too_few_calls_are_not_settled():
    assert not settled([1.0] * (2 * SETTLE_WINDOW - 1))


def test_steady_times_are_settled():
    assert settled([1.7] * (2 * SETTLE_WINDOW))


def test_a_clock_still_ramping_up_is_not_settled():
    # per-call time falling 0.4% a call, as while an idle GPU climbs to its boost clock
    ramp = [1.8 * (1 - 0.004 * i) for i in range(2 * SETTLE_WINDOW)]
    assert not settled(ramp)
    assert settled(ramp + [ramp[-1]] * (2 * SETTLE_WINDOW))


def test_a_step_between_windows_is_not_settled():
    assert not settled([1.77] * SETTLE_WINDOW + [1.71] * SETTLE_WINDOW)


def test_noise_around_a_constant_level_is_settled():
    # a tiny kernel: +-10% call-to-call jitter, no trend; its medians wander within the noise
    jitter = [0.030, 0.033, 0.028, 0.031, 0.027, 0.032, 0.029, 0.030]
    assert settled(jitter + list(reversed(jitter)))
    assert settled(jitter + jitter[1:] + jitter[:1])
