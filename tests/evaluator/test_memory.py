"""Memory by need on simulated sizes: who shares a GPU, who runs alone, how the evaluator's own copies shrink to fit an 80 or 40 GB card."""

from __future__ import annotations

import pytest

from kernelzero.gpu_workers import digest
from kernelzero.gpu_workers.memory import (COMPARE_BYTES, MARGIN, Footprint, allowance_bytes, floor_bytes, need_bytes,
                                            oom_is_candidates, plan_memory, share_bytes)

GB = 10 ** 9
H200_USABLE = int(0.9 * 150.75 * GB)  # gpu_memory_fraction 0.9 of an H200's 143,771 MiB
H100_USABLE = int(0.9 * 85.0 * GB)  # an H100 80 GB as torch sees it: the "cap 76.5 GB"
CAP_40_USABLE = int(0.9 * 40 * GB)  # gpu_memory_cap_gb = 40
EXPECTED = 11  # seven trials (three natives, permuted, three scaled) and four timing sets: outputs judged by


def problem(elements: int, out_elements: int | None = None) -> Footprint:
    """A KernelBench level-1 problem of fp32 tensors, no weights: one input, its output (as many elements unless said).

    The reference's peak is its output (each of these allocates only the output while nothing else of
    it is alive: RMSNorm's and L1Norm's temporaries are freed before the division's output); a draw
    (torch.rand) is its input. On a GPU both are measured.
    """
    out = elements if out_elements is None else out_elements
    return Footprint(input_bytes=4 * elements, output_bytes=4 * out, weight_bytes=0, ref_peak_bytes=4 * out,
                     draw_peak_bytes=4 * elements, digest_bytes=digest.nbytes_of(out, 4))


# the level-1 problems that could not be judged on an 80 GB H100 (issue 26), sizes from KernelBench's files
ELEMENTWISE = problem(4096 * 393216)  # 19 ReLU .. 32 HardTanh (softmaxes included): 6.4 GB in, 6.4 GB out
NORMS = problem(112 * 64 * 512 * 512)  # 34 InstanceNorm, 35 GroupNorm, 36 RMSNorm, 37 FrobeniusNorm: 7.5 GB each way
ROW_NORMS = problem(32768 * 65535)  # 38 L1Norm, 39 L2Norm: 8.6 GB each way
AVG_POOL_2D = problem(16 * 64 * 2048 * 2048, 16 * 64 * 2048 * 2048 // 121 + 32768)  # 45: 17.2 GB in, 0.14 GB out
FAILED_ON_80_GB = {"elementwise": ELEMENTWISE, "norms": NORMS, "row_norms": ROW_NORMS}


def plan(fp: Footprint, sharing: int, usable: int = H200_USABLE, least: bool = False):
    return plan_memory(fp, expected=EXPECTED, usable_bytes=usable, sharing=sharing, least=least)


def test_a_small_problem_shares_the_gpu_with_every_output_whole() -> None:
    small = problem(16 * 2 ** 20)
    p = plan(small, sharing=4)
    assert not p.alone and p.cap_bytes == share_bytes(H200_USABLE, 4) == H200_USABLE // 4
    assert (p.whole_outputs, p.poison_blocks, p.fits) == (EXPECTED, 2, True)


@pytest.mark.parametrize("name", FAILED_ON_80_GB)
@pytest.mark.parametrize("workers", [1, 4])
def test_the_problems_that_failed_fit_an_80_gb_h100(name: str, workers: int) -> None:
    fp = FAILED_ON_80_GB[name]
    p = plan(fp, sharing=workers, usable=H100_USABLE)
    assert p.fits and MARGIN * p.need_bytes <= p.cap_bytes
    assert p.alone == (workers > 1)  # beyond a quarter of the card: alone, with the card to itself
    assert p.whole_outputs == 1  # every output whole would be eleven of them: trial 0's only, the rest digests
    assert p.cap_bytes - p.need_bytes > fp.output_bytes  # room beyond the need: a copy candidate's second output


@pytest.mark.parametrize("name", FAILED_ON_80_GB)
def test_the_problems_that_failed_fit_a_40_gb_card(name: str) -> None:
    fp = FAILED_ON_80_GB[name]
    assert floor_bytes(fp) <= 40 * GB
    p = plan(fp, sharing=4, usable=CAP_40_USABLE)
    assert p.fits and p.alone and p.whole_outputs == 1 and p.poison_blocks >= 1


def test_relu_at_real_size_needs_at_most_3_5_times_its_input_and_output() -> None:
    io = ELEMENTWISE.input_bytes + ELEMENTWISE.output_bytes
    for usable in (H100_USABLE, CAP_40_USABLE, H200_USABLE // 4 * 4):
        p = plan(ELEMENTWISE, sharing=4, usable=usable)
        assert p.need_bytes <= 3.5 * io, (usable, p)
    # what the need is made of on the H100: the buffers, trial 0's output, ten digests, two poisoned blocks
    h100 = plan(ELEMENTWISE, sharing=4, usable=H100_USABLE)
    assert h100.need_bytes == (ELEMENTWISE.input_bytes + ELEMENTWISE.output_bytes + 10 * ELEMENTWISE.digest_bytes
                               + 2 * ELEMENTWISE.output_bytes + COMPARE_BYTES)
    assert 27 * GB < h100.need_bytes < 28 * GB  # was 90.3 GB (issue 26), 14 times the input


def test_an_input_as_large_as_17_gb_fits_80_gb_and_runs_anyway_at_40() -> None:
    """Level 1 problem 45: the refill's draw is a second input set beside the buffers (copied in place, same addresses)."""
    p80 = plan(AVG_POOL_2D, sharing=4, usable=H100_USABLE)
    assert p80.fits and p80.whole_outputs == EXPECTED
    p40 = plan(AVG_POOL_2D, sharing=4, usable=CAP_40_USABLE)
    assert not p40.fits and p40.need_bytes <= CAP_40_USABLE  # within the cap, not within its margin: tried alone


def test_copies_shrink_in_order_before_anything_is_refused() -> None:
    """Every output whole with two poisoned blocks, then one block, then trial 0's whole with two, then one; then refused."""
    fp = problem(2 ** 30)
    order = [(EXPECTED, 2), (EXPECTED, 1), (1, 2), (1, 1)]
    for (whole, poison), weaker in zip(order, order[1:] + [None]):
        edge = int(MARGIN * need_bytes(fp, EXPECTED, whole, poison))
        assert (plan(fp, 1, usable=edge).whole_outputs, plan(fp, 1, usable=edge).poison_blocks) == (whole, poison)
        below = plan(fp, 1, usable=edge - 1)
        if weaker is None:  # below the floor: the floor's need, tried alone on the whole GPU
            assert not below.fits and below.need_bytes == need_bytes(fp, EXPECTED, 1, 1)
        else:
            assert (below.whole_outputs, below.poison_blocks, below.fits) == (*weaker, True)


def test_a_share_is_taken_at_the_floor_before_the_gpu_alone_with_every_output_whole() -> None:
    fp = problem(2 ** 28)  # 1 GiB each way: every output whole needs more than a quarter of 60 GB, the floor less
    usable = 60 * GB
    assert MARGIN * need_bytes(fp, EXPECTED, EXPECTED) > share_bytes(usable, 4) >= MARGIN * need_bytes(fp, EXPECTED, 1)
    p = plan(fp, sharing=4, usable=usable)
    assert not p.alone and p.whole_outputs == 1


def test_the_retry_of_a_shortfall_keeps_the_least() -> None:
    small = problem(2 ** 20)
    assert plan(small, sharing=1).whole_outputs == EXPECTED
    assert plan(small, sharing=1, least=True).whole_outputs == 1


def test_the_need_counts_weights_twice_and_digests_for_the_outputs_not_kept_whole() -> None:
    fp = Footprint(input_bytes=100, output_bytes=10, weight_bytes=1000, ref_peak_bytes=10, digest_bytes=3)
    assert need_bytes(fp, EXPECTED, 2) - need_bytes(fp, EXPECTED, 1) == 10 - 3
    heavier = Footprint(100, 10, 2000, 10, digest_bytes=3)
    assert need_bytes(heavier, EXPECTED, 1) - need_bytes(fp, EXPECTED, 1) == 2000  # the reference's and the candidate's


def test_the_measured_draw_counts_where_it_exceeds_the_call() -> None:
    fp = problem(2 ** 28)
    drawn = Footprint(fp.input_bytes, fp.output_bytes, 0, fp.ref_peak_bytes, draw_peak_bytes=3 * fp.input_bytes,
                      digest_bytes=fp.digest_bytes)
    assert need_bytes(drawn, EXPECTED, 1, 1) - need_bytes(fp, EXPECTED, 1, 1) == 2 * fp.input_bytes


def test_a_gpu_that_others_use_bounds_the_plan() -> None:
    crowded = plan(ELEMENTWISE, sharing=1, usable=20 * GB)  # free memory, not the configured fraction, is the limit
    assert crowded.cap_bytes == 20 * GB and not crowded.fits and crowded.whole_outputs == 1


def test_running_out_within_the_references_peak_is_the_evaluators_far_beyond_it_the_candidates() -> None:
    fp = problem(2 * 10 ** 9)
    assert not oom_is_candidates(fp, 8 * GB)  # its output and no more: the evaluator left too little
    assert not oom_is_candidates(fp, allowance_bytes(fp))
    assert oom_is_candidates(fp, 256 * 2 ** 30)  # tries to take the GPU: charged


def test_the_card_size_cap_is_configured_and_validated() -> None:
    from kernelzero.config import ConfigError, load_config
    assert load_config(env={"KERNELZERO_EVALUATOR_GPU_MEMORY_CAP_GB": "40"}).evaluator.gpu_memory_cap_gb == 40
    assert load_config(env={}).evaluator.gpu_memory_cap_gb == 0  # the card's own size
    with pytest.raises(ConfigError, match="gpu_memory_cap_gb"):
        load_config(env={"KERNELZERO_EVALUATOR_GPU_MEMORY_CAP_GB": "-1"})


class _Turns:
    is_alone = False


def _trial_on_a_simulated_gpu(monkeypatch, fp: Footprint, allocated: int, peak: int):
    """A TrialRun on CUDA whose memory statistics are simulated: no GPU needed."""
    import torch
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import trial
    from kernelzero.schemas.messages import Job
    monkeypatch.setattr(torch.cuda, "memory_stats_as_nested_dict",
                        lambda device=None: {"allocated_bytes": {"all": {"current": allocated, "peak": peak}}})
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: None)
    run = trial.TrialRun(Job(problem_src="", candidate_src="", device="cuda:0", scratch_dir="/nonexistent",
                             config=EvaluatorConfig()))
    run.ledger.footprint, run.turns, run.gpu_bytes, run.usable = fp, _Turns(), H200_USABLE, H200_USABLE // 4
    run.ledger.cap_bytes = run.usable
    run.ledger.held_base = allocated
    run.ledger.start_call()
    return run


def _oom(tried: str):
    import torch

    def forward():
        raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate {tried}. GPU 0 has a total capacity of 139.80 GiB")
    return forward


def test_an_evaluator_side_shortfall_is_not_charged_to_the_candidate(monkeypatch) -> None:
    from kernelzero.gpu_workers.result import ProblemFailed
    fp = problem(2 ** 30)
    run = _trial_on_a_simulated_gpu(monkeypatch, fp, allocated=30 * GB, peak=30 * GB)
    with pytest.raises(ProblemFailed) as failed:  # its 4 GiB output did not fit: the evaluator left too little
        run._candidate_call("seed0", _oom("4.00 GiB"))
    assert failed.value.reason == "evaluation_out_of_memory"
    assert run.result.evidence["retry_alone"] == "yes" and "memory_shortfall" in run.result.evidence


def test_a_candidate_allocating_far_beyond_the_reference_is_still_charged(monkeypatch) -> None:
    from kernelzero.gpu_workers.trial import EarlyVerdict
    fp = problem(2 ** 30)
    run = _trial_on_a_simulated_gpu(monkeypatch, fp, allocated=30 * GB, peak=30 * GB)
    with pytest.raises(EarlyVerdict) as charged:
        run._candidate_call("seed0", _oom("256.00 GiB"))
    assert (charged.value.verdict, charged.value.reason) == ("runtime_error", "out_of_memory")
    # within one call it had already taken twice the reference's peak before asking for a little more
    run = _trial_on_a_simulated_gpu(monkeypatch, fp, allocated=30 * GB, peak=30 * GB + 2 * 8 * 2 ** 30)
    with pytest.raises(EarlyVerdict):
        run._candidate_call("seed0", _oom("2.00 MiB"))


def test_a_memory_shortfall_is_not_cached_nor_makes_the_problem_unusable() -> None:
    from kernelzero.gpu_workers.pool import NOT_CACHED_PREFIX, _transient_shortfall
    from kernelzero.gpu_workers.result import evaluation
    shortfall = evaluation("problem_error", "evaluation_out_of_memory",
                           evidence={"memory_shortfall": "...", "retry_alone": "yes", "whole_gpu": "no"})
    assert shortfall.reason.startswith(NOT_CACHED_PREFIX) and _transient_shortfall(shortfall)
    whole = evaluation("problem_error", "reference_out_of_memory", evidence={"whole_gpu": "yes"})
    assert not _transient_shortfall(whole)


def test_a_capped_card_is_planned_as_the_smaller_card_and_capped_against_the_real_one(monkeypatch) -> None:
    import torch
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import device_turns, trial
    from kernelzero.schemas.messages import Job
    fractions = []
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80 * GB, 85 * GB))  # an idle H100
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, device=None: fractions.append(f))
    monkeypatch.setattr(device_turns, "for_device", lambda index: type("Turns", (), {"share": lambda self: None})())
    run = trial.TrialRun(Job(problem_src="", candidate_src="", device="cuda:0", scratch_dir="/nonexistent",
                             config=EvaluatorConfig(gpu_memory_cap_gb=40), gpu_sharing=4))
    run._start_gpu()
    assert (run.gpu_bytes, run.usable) == (40 * GB, CAP_40_USABLE)
    assert run.ledger.cap_bytes == CAP_40_USABLE // 4 and fractions == [CAP_40_USABLE // 4 / (85 * GB)]
