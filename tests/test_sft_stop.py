"""The SFT stopping rule stops on the interval of its one-sample-a-row check, not on the noisy rate itself."""

import pytest
from transformers import TrainerControl, TrainerState

from kernelzero.bootstrap.sft_stop import BandStop


class Fixed:
    def __init__(self, passed: int, total: int) -> None:
        self.passed, self.total = passed, total

    def pass_rate(self, model, tokenizer) -> tuple[int, int]:
        return self.passed, self.total


def check(passed: int, total: int = 64, step: int = 500) -> tuple[BandStop, TrainerControl]:
    stop = BandStop(Fixed(passed, total), band_low=0.2, band_high=0.6, check_every=500)
    state = TrainerState()
    state.global_step = step
    return stop, stop.on_step_end(None, state, TrainerControl())


def test_a_rate_at_the_band_whose_interval_reaches_below_it_trains_on():
    # 16 of 64 read 0.25 where eight samples a row put the same Coder at 0.184
    stop, control = check(16)
    assert not control.should_training_stop and stop.stopped == "epochs"
    assert stop.checks[0].interval[0] < 0.2 < stop.checks[0].pass_rate


@pytest.mark.parametrize("passed, why", [(20, "in_band"), (29, "in_band"), (50, "past_band")])
def test_a_check_whose_interval_is_above_the_band_s_floor_stops(passed, why):
    stop, control = check(passed)
    assert control.should_training_stop and stop.stopped == why
    assert stop.checks[0].interval[0] >= 0.2


def test_only_every_nth_step_is_checked_and_an_empty_check_never_stops():
    stop, control = check(64, step=499)
    assert not control.should_training_stop and stop.checks == []
    stop, control = check(0, total=0)
    assert not control.should_training_stop and stop.checks[0].interval == (0.0, 1.0)
