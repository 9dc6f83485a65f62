"""GPU memory by need: what one evaluation holds, from its problem's measured footprint, and the plan that follows; arithmetic only.

It measures nothing (trial.py reads the footprint off torch's allocator around the reference) and
its estimate of the candidate's own working memory (as much as the reference's peak) is an
assumption: a candidate that needs far more than the reference can still run out of memory under
a share. Workers sharing a GPU each get an equal share; an evaluation whose need exceeds its share
runs alone (gpu_workers/device_turns.py) with the GPU's usable memory to itself.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPARE_BYTES = 1 << 30  # compare.py works in float64 chunks of CHUNK elements: a few temporaries of 128 MiB
BOOL_SHARE = 2  # whole-tensor checks (constancy, unchanged inputs) make one bool per element: half the bytes of 16-bit data
DRAW_FACTOR = 3  # a trial's inputs while being drawn: the draw, its permuted or scaled copy, the shuffled chunk
MARGIN = 1.25  # the estimate must fit this many times over: allocator rounding and fragmentation
MAX_POISON_BLOCKS = 2  # freed blocks of each output's size filled before a call (trial.py)


@dataclass(frozen=True)
class Footprint:
    """The problem's sizes in bytes, measured on the reference."""

    input_bytes: int  # one set of inputs
    output_bytes: int  # one reference output (all its tensors)
    weight_bytes: int  # the reference model's parameters and buffers
    ref_peak_bytes: int  # the reference forward's peak above what was allocated before it (outputs included)


@dataclass(frozen=True)
class MemoryPlan:
    alone: bool  # needs more than a share: the evaluation waits for the GPU to itself
    cap_bytes: int  # the allocator's cap for this evaluation
    need_bytes: int  # the estimate at the plan's poisoning, extra timing sets excluded
    timing_sets: int  # extra input sets drawn for rotation while timing
    poison_blocks: int  # freed blocks of each output's size filled before each call


def need_bytes(fp: Footprint, outputs_kept: int, poison_blocks: int = MAX_POISON_BLOCKS) -> int:
    """Peak bytes of one evaluation that keeps `outputs_kept` reference outputs, before extra timing sets.

    Held throughout: both models, the kept reference outputs, the candidate's input buffers. On top,
    the larger of drawing a trial's inputs and calling the candidate (the trial's inputs, then the
    poisoned blocks or the candidate's work, assumed to be the reference's peak, plus the checks of
    its output and of the inputs).
    """
    held = 2 * fp.weight_bytes + outputs_kept * fp.output_bytes + fp.input_bytes
    drawing = DRAW_FACTOR * fp.input_bytes
    checks = COMPARE_BYTES + (fp.input_bytes + fp.output_bytes) // BOOL_SHARE
    calling = fp.input_bytes + max(poison_blocks * fp.output_bytes, fp.ref_peak_bytes + checks)
    return held + max(drawing, calling)


def share_bytes(usable_bytes: int, sharing: int) -> int:
    """One worker's share of what the evaluator may use on a GPU that `sharing` workers share."""
    return usable_bytes // max(1, sharing)


def plan_memory(fp: Footprint, *, outputs_kept: int, usable_bytes: int, sharing: int, timing_sets_wanted: int) -> MemoryPlan:
    """The plan: alone or in a share, the cap, how many poisoned blocks and extra timing sets fit.

    `usable_bytes` is what the evaluator may use on the GPU (its configured fraction, bounded by what
    is free). Poisoning and timing sets shrink before anything is refused: an evaluation that does
    not fit even without them still runs alone, and a real shortage shows as out of memory.
    """
    share = share_bytes(usable_bytes, sharing)
    alone = sharing > 1 and MARGIN * need_bytes(fp, outputs_kept) > share
    cap = usable_bytes if alone or sharing <= 1 else share
    poison = next((p for p in range(MAX_POISON_BLOCKS, 0, -1) if MARGIN * need_bytes(fp, outputs_kept, p) <= cap), 0)
    need = need_bytes(fp, outputs_kept, poison)
    room = max(0, int(cap - MARGIN * need))
    sets = min(timing_sets_wanted, room // max(1, fp.input_bytes))
    return MemoryPlan(alone=alone, cap_bytes=cap, need_bytes=need, timing_sets=max(0, sets), poison_blocks=poison)
