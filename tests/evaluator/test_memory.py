"""Memory by need on simulated sizes: who shares a GPU, who runs alone, and how the evaluator's own overhead shrinks to fit."""

from __future__ import annotations

from kernelzero.gpu_workers.memory import MARGIN, Footprint, need_bytes, plan_memory, share_bytes

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
    room = p.cap_bytes - MARGIN * p.need_bytes
    assert p.timing_sets == int(room // avg_pool.input_bytes) < 3
    assert MARGIN * p.need_bytes + p.timing_sets * avg_pool.input_bytes <= p.cap_bytes


def test_overhead_shrinks_before_anything_is_refused() -> None:
    huge_output = Footprint(input_bytes=GB, output_bytes=11 * GB, weight_bytes=0, ref_peak_bytes=11 * GB)
    p = plan(huge_output, sharing=4)
    assert p.alone and p.poison_blocks == 1 and MARGIN * need_bytes(huge_output, KEPT, p.poison_blocks) <= p.cap_bytes
    beyond = plan(Footprint(input_bytes=60 * GB, output_bytes=60 * GB, weight_bytes=0, ref_peak_bytes=60 * GB), 4)
    assert beyond.alone and (beyond.poison_blocks, beyond.timing_sets) == (0, 0)  # tried anyway: OOM tells


def test_a_gpu_that_others_use_bounds_the_plan() -> None:
    relu = elementwise(4096 * 393216 * 4)
    crowded = plan(relu, sharing=1, usable=60 * GB)  # free memory, not the configured fraction, is the limit
    assert crowded.cap_bytes == 60 * GB and crowded.timing_sets == 0


def test_the_need_counts_weights_twice_and_every_kept_output() -> None:
    fp = Footprint(input_bytes=100, output_bytes=10, weight_bytes=1000, ref_peak_bytes=10)
    more_kept = need_bytes(fp, KEPT + 1) - need_bytes(fp, KEPT)
    assert more_kept == 10
    heavier = need_bytes(Footprint(100, 10, 2000, 10), KEPT) - need_bytes(fp, KEPT)
    assert heavier == 2000  # the reference's and the candidate's copy of the weights
