"""Memory by need on simulated sizes: who shares a GPU, who runs alone, and how the evaluator's own overhead shrinks to fit."""

from __future__ import annotations

from kernelzero.gpu_workers.memory import (MARGIN, Footprint, allowance_bytes, need_bytes, oom_is_candidates, plan_memory,
                                            share_bytes)

GB = 10 ** 9
H200_USABLE = int(0.9 * 150.75 * GB)  # gpu_memory_fraction 0.9 of an H200's 143,771 MiB
KEPT = 8  # seven trials' reference outputs and the determinism re-run


def elementwise(nbytes: int) -> Footprint:
    """A level-1 elementwise problem: one input, one output of the same size, no weights."""
    return Footprint(input_bytes=nbytes, output_bytes=nbytes, weight_bytes=0, ref_peak_bytes=nbytes)


def plan(fp: Footprint, sharing: int, usable: int = H200_USABLE, wanted: int = 3):
    return plan_memory(fp, outputs_kept=KEPT, usable_bytes=usable, sharing=sharing, timing_sets_wanted=wanted)


def test_a_small_problem_shares_the_gpu_with_every_timing_set() -> None:
    small = elementwise(64 * 2 ** 20)
    p = plan(small, sharing=4)
    assert not p.alone and p.cap_bytes == share_bytes(H200_USABLE, 4) == H200_USABLE // 4
    assert (p.timing_sets, p.poison_blocks) == (3, 2)


def test_relu_4096_by_393216_runs_alone_when_four_workers_share_the_h200() -> None:
    relu = elementwise(4096 * 393216 * 4)  # KernelBench level 1 ReLU: 6.4 GB in, 6.4 GB out
    shared = plan(relu, sharing=4)
    assert MARGIN * need_bytes(relu, KEPT) > H200_USABLE // 4  # what a fixed share of 0.9 / 4 could not hold
    assert shared.alone and shared.cap_bytes == H200_USABLE
    assert shared.poison_blocks == 2 and shared.timing_sets == 3
    one_worker = plan(relu, sharing=1)
    assert not one_worker.alone and one_worker.cap_bytes == H200_USABLE


def test_a_17_gb_input_gets_as_many_timing_sets_as_fit_not_a_fixed_one() -> None:
    avg_pool = Footprint(input_bytes=17_179_869_184, output_bytes=141_705_216, weight_bytes=0,
                         ref_peak_bytes=141_705_216)  # KernelBench level 1 problem 45
    p = plan(avg_pool, sharing=1)
    assert 0 < p.timing_sets < 3 and p.fits
    assert MARGIN * need_bytes(avg_pool, KEPT, p.poison_blocks, p.timing_sets) <= p.cap_bytes
    assert MARGIN * need_bytes(avg_pool, KEPT, p.poison_blocks, p.timing_sets + 1) > p.cap_bytes


def test_overhead_shrinks_before_anything_is_refused() -> None:
    huge_output = Footprint(input_bytes=GB, output_bytes=11 * GB, weight_bytes=0, ref_peak_bytes=11 * GB)
    p = plan(huge_output, sharing=4)
    assert p.alone and p.poison_blocks == 1 and MARGIN * need_bytes(huge_output, KEPT, p.poison_blocks) <= p.cap_bytes
    beyond = plan(Footprint(input_bytes=60 * GB, output_bytes=60 * GB, weight_bytes=0, ref_peak_bytes=60 * GB), 4)
    assert beyond.alone and (beyond.poison_blocks, beyond.timing_sets) == (0, 0)  # tried anyway: OOM tells


def test_a_gpu_that_others_use_bounds_the_plan() -> None:
    relu = elementwise(4096 * 393216 * 4)
    crowded = plan(relu, sharing=1, usable=60 * GB)  # free memory, not the configured fraction, is the limit
    assert crowded.cap_bytes == 60 * GB and crowded.timing_sets == 0 and not crowded.fits


def test_the_need_counts_weights_twice_and_every_kept_output() -> None:
    fp = Footprint(input_bytes=100, output_bytes=10, weight_bytes=1000, ref_peak_bytes=10)
    more_kept = need_bytes(fp, KEPT + 1) - need_bytes(fp, KEPT)
    assert more_kept == 10
    heavier = need_bytes(Footprint(100, 10, 2000, 10), KEPT) - need_bytes(fp, KEPT)
    assert heavier == 2000  # the reference's and the candidate's copy of the weights


def test_a_footprint_near_the_cap_drops_the_extra_timing_sets_first_and_fits() -> None:
    fp = elementwise(4 * GB)
    cap = int(MARGIN * need_bytes(fp, KEPT)) + GB  # full poisoning fits, one more input set does not
    p = plan(fp, sharing=1, usable=cap)
    assert (p.timing_sets, p.poison_blocks, p.fits) == (0, 2, True)
    assert MARGIN * p.need_bytes <= p.cap_bytes


def test_the_measured_draw_counts_where_the_permuted_trials_shuffle_exceeds_three_inputs() -> None:
    # KernelBench level 1 problem 45 as the H200 showed it: 16 GiB in, the permuted trial's draw, copy and
    # shuffle measured at 3.5 inputs; four workers: above a share, so alone, and the plan fits the whole GPU
    measured = Footprint(input_bytes=16 * 2 ** 30, output_bytes=141_705_216, weight_bytes=0,
                         ref_peak_bytes=141_705_216, draw_peak_bytes=int(3.5 * 16 * 2 ** 30))
    three_inputs = Footprint(measured.input_bytes, measured.output_bytes, 0, measured.ref_peak_bytes,
                             draw_peak_bytes=3 * measured.input_bytes)  # the fixed guess that underestimated it
    assert need_bytes(measured, KEPT) - need_bytes(three_inputs, KEPT) == measured.draw_peak_bytes - 3 * measured.input_bytes
    p = plan(measured, sharing=4)
    assert p.alone and p.fits and p.cap_bytes == H200_USABLE and p.timing_sets < 3
    assert MARGIN * p.need_bytes <= p.cap_bytes


def test_a_need_above_the_share_runs_alone_and_one_within_shares() -> None:
    share = share_bytes(H200_USABLE, 4)
    big, small = elementwise(share // 12), elementwise(share // 40)
    assert MARGIN * need_bytes(big, KEPT) > share >= MARGIN * need_bytes(small, KEPT)
    assert plan(big, sharing=4).alone and plan(big, sharing=4).cap_bytes == H200_USABLE
    assert not plan(small, sharing=4).alone and plan(small, sharing=4).cap_bytes == share


def test_running_out_within_the_references_peak_is_the_evaluators_far_beyond_it_the_candidates() -> None:
    fp = elementwise(8 * GB)
    assert not oom_is_candidates(fp, 8 * GB)  # its output and no more: the evaluator left too little
    assert not oom_is_candidates(fp, allowance_bytes(fp))
    assert oom_is_candidates(fp, 256 * 2 ** 30)  # tries to take the GPU: charged


class _Turns:
    is_alone = False


def _trial_on_a_simulated_gpu(monkeypatch, fp: Footprint, allocated: int, peak: int):
    """A TrialRun on CUDA whose memory statistics are simulated: no GPU needed."""
    import torch
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import trial
    from kernelzero.schemas.messages import Job
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: allocated)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: peak)
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
    import pytest
    from kernelzero.gpu_workers.result import ProblemFailed
    fp = elementwise(4 * 2 ** 30)
    run = _trial_on_a_simulated_gpu(monkeypatch, fp, allocated=30 * GB, peak=30 * GB)
    with pytest.raises(ProblemFailed) as failed:  # its 4 GiB output did not fit: the evaluator left too little
        run._candidate_call("seed0", _oom("4.00 GiB"))
    assert failed.value.reason == "evaluation_out_of_memory"
    assert run.result.evidence["retry_alone"] == "yes" and "memory_shortfall" in run.result.evidence


def test_a_candidate_allocating_far_beyond_the_reference_is_still_charged(monkeypatch) -> None:
    import pytest
    from kernelzero.gpu_workers.trial import EarlyVerdict
    fp = elementwise(4 * 2 ** 30)
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
