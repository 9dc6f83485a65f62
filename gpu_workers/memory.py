"""GPU memory by need: what one evaluation holds, from its problem's measured footprint, and the plan that follows; arithmetic only.

It measures nothing (trial.py reads the footprint off torch's allocator around the reference,
through memory_ledger.py) and its estimate of the candidate's own working memory (as much as the
reference's peak) is the candidate's allowance: running out of memory within it is the evaluator's
shortfall (never charged), beyond it the candidate's (`oom_is_candidates`). Workers sharing a GPU
each get an equal share; an evaluation whose need exceeds its share runs alone
(gpu_workers/device_turns.py) with what is usable of the GPU to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPARE_BYTES = 1 << 30  # compare.py works in float64 chunks of CHUNK elements: a few temporaries of 128 MiB
BOOL_SHARE = 2  # whole-tensor checks (constancy, unchanged inputs) make one bool per element: half the bytes of 16-bit data
# a trial's inputs while being drawn, where it was not measured: the draw, its permuted copy, and the shuffle's
# permutation (a quarter of the elements as int64, sorted with double buffers: up to 2x a 4-byte input's bytes)
DRAW_FACTOR = 4
MARGIN = 1.25  # the estimate must fit this many times over: allocator rounding and fragmentation
MAX_POISON_BLOCKS = 2  # freed blocks of each output's size filled before a call (trial.py)
ALLOWANCE_SLACK = 256 << 20  # on top of MARGIN times the reference's peak: small buffers (the candidate's scratch, the timing flush)
GB = 1e9  # evidence reports decimal gigabytes


@dataclass(frozen=True)
class Footprint:
    """The problem's sizes in bytes, measured on the reference."""

    input_bytes: int  # one set of inputs
    output_bytes: int  # one reference output (all its tensors)
    weight_bytes: int  # the reference model's parameters and buffers
    ref_peak_bytes: int  # the reference forward's peak above what was allocated before it (outputs included)
    draw_peak_bytes: int = 0  # the peak of drawing one trial's inputs (permuted and scaled ones included); 0: unmeasured


@dataclass(frozen=True)
class MemoryPlan:
    alone: bool  # needs more than a share: the evaluation waits for the GPU to itself
    cap_bytes: int  # the allocator's cap for this evaluation
    need_bytes: int  # the estimate at the plan's poisoning and timing sets (those included)
    timing_sets: int  # extra input sets drawn for rotation while timing
    poison_blocks: int  # freed blocks of each output's size filled before each call
    fits: bool = True  # MARGIN times the need fits the cap: the candidate has its allowance


def draw_bytes(fp: Footprint) -> int:
    """The peak of drawing one trial's inputs: measured, or DRAW_FACTOR input sets where it was not."""
    return fp.draw_peak_bytes or DRAW_FACTOR * fp.input_bytes


def need_bytes(fp: Footprint, outputs_kept: int, poison_blocks: int = MAX_POISON_BLOCKS, timing_sets: int = 0) -> int:
    """Peak bytes of one evaluation that keeps `outputs_kept` reference outputs and `timing_sets` extra input sets.

    Held throughout: both models, the kept reference outputs, the extra timing sets, the candidate's
    input buffers. On top, the larger of drawing a trial's inputs (measured on the reference side:
    the permuted trial's shuffle alone can take more than the input) and calling the candidate (the
    trial's inputs, then the poisoned blocks or the candidate's work, allowed to be the reference's
    peak, plus the checks of its output and of the inputs).
    """
    held = 2 * fp.weight_bytes + outputs_kept * fp.output_bytes + (1 + timing_sets) * fp.input_bytes
    drawing = draw_bytes(fp)
    checks = COMPARE_BYTES + (fp.input_bytes + fp.output_bytes) // BOOL_SHARE
    calling = fp.input_bytes + max(poison_blocks * fp.output_bytes, fp.ref_peak_bytes + checks)
    return held + max(drawing, calling)


def share_bytes(usable_bytes: int, sharing: int) -> int:
    """One worker's share of what the evaluator may use on a GPU that `sharing` workers share."""
    return usable_bytes // max(1, sharing)


def plan_memory(fp: Footprint, *, outputs_kept: int, usable_bytes: int, sharing: int, timing_sets_wanted: int) -> MemoryPlan:
    """The plan: alone or in a share, the cap, how many poisoned blocks and extra timing sets fit.

    `usable_bytes` is what the evaluator may use on the GPU (its configured fraction, bounded by what
    is free). Extra timing sets go first, then poisoning, before anything is refused; MARGIN covers
    the whole need, timing sets included (the allocator's rounding and fragmentation grow with it).
    An evaluation that does not fit even without them (`fits` false) is the evaluator's shortfall:
    trial.py tries it alone on the whole GPU, and an out-of-memory there within the candidate's
    allowance is not the candidate's.
    """
    share = share_bytes(usable_bytes, sharing)
    alone = sharing > 1 and MARGIN * need_bytes(fp, outputs_kept) > share  # full poisoning, no extra timing sets
    cap = usable_bytes if alone or sharing <= 1 else share

    def fits(poison: int, sets: int) -> bool:
        return MARGIN * need_bytes(fp, outputs_kept, poison, sets) <= cap

    poison = next((p for p in range(MAX_POISON_BLOCKS, 0, -1) if fits(p, 0)), 0)
    sets = next((s for s in range(max(0, timing_sets_wanted), 0, -1) if fits(poison, s)), 0)
    return MemoryPlan(alone=alone, cap_bytes=cap, need_bytes=need_bytes(fp, outputs_kept, poison, sets),
                      timing_sets=sets, poison_blocks=poison, fits=fits(poison, sets))


def allowance_bytes(fp: Footprint) -> int:
    """What a candidate may hold or ask for on top of the evaluator's own memory: the reference's peak, with MARGIN."""
    return int(MARGIN * max(fp.ref_peak_bytes, fp.output_bytes)) + ALLOWANCE_SLACK


def oom_is_candidates(fp: Footprint, demand_bytes: int) -> bool:
    """Whether running out of memory is the candidate's: it held or asked for more than its allowance.

    `demand_bytes`: what the candidate held beyond the evaluator's own memory (its weights beyond the
    reference's, what it kept from earlier calls) plus its call's peak and the allocation that failed.
    Within the allowance the evaluator left it less than the reference itself needs: the evaluator's.
    """
    return demand_bytes > allowance_bytes(fp)
