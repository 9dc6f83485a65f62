"""GPU memory by need: what one evaluation holds, from its problem's measured footprint, and the plan that follows; arithmetic only.

It measures nothing (trial.py reads the footprint off torch's allocator around the reference,
through memory_ledger.py) and its estimate of the candidate's own working memory (as much as the
reference's peak) is the candidate's allowance: running out of memory within it is the evaluator's
shortfall (never charged), beyond it the candidate's (`oom_is_candidates`). Workers sharing a GPU
each get an equal share; an evaluation whose need exceeds its share runs alone
(gpu_workers/device_turns.py) with what is usable of the GPU to itself. The evaluator's own copies
shrink before anything is refused: reference outputs are kept whole where they all fit, else only
trial 0's (the rest as digests, gpu_workers/digest.py), then fewer poisoned blocks. The floor is what
any judge holds: the inputs, one reference output and the candidate's call (its output included).
"""

from __future__ import annotations

from dataclasses import dataclass

COMPARE_BYTES = 1 << 30  # compare.py and digest.py work in chunks of CHUNK elements: a few 128 MiB temporaries
MARGIN = 1.25  # the estimate must fit this many times over: allocator rounding and fragmentation
MAX_POISON_BLOCKS = 2  # freed blocks of each output's size filled before a call (trial.py)
ALLOWANCE_SLACK = 256 << 20  # on top of MARGIN times the reference's peak: small buffers (the candidate's scratch)
GB = 1e9  # evidence reports decimal gigabytes


@dataclass(frozen=True)
class Footprint:
    """The problem's sizes in bytes, measured on the reference."""

    input_bytes: int  # one set of inputs
    output_bytes: int  # one reference output (all its tensors)
    weight_bytes: int  # the reference model's parameters and buffers
    ref_peak_bytes: int  # the reference forward's peak above what was allocated before it (outputs included)
    draw_peak_bytes: int = 0  # the peak of drawing one set of inputs (get_inputs); 0: unmeasured, one input set
    digest_bytes: int = 0  # one reference output kept as a digest (its samples and block sums)


@dataclass(frozen=True)
class MemoryPlan:
    alone: bool  # needs more than a share: the evaluation waits for the GPU to itself
    cap_bytes: int  # the allocator's cap for this evaluation
    need_bytes: int  # the estimate at the plan's copies (what is used)
    whole_outputs: int  # reference outputs kept whole (trial 0's first); the others as digests
    poison_blocks: int  # freed blocks of each output's size filled before each call
    fits: bool = True  # MARGIN times the need fits the cap: the candidate has its allowance


def need_bytes(fp: Footprint, expected: int, whole: int, poison_blocks: int = MAX_POISON_BLOCKS) -> int:
    """Peak bytes of one evaluation judging by `expected` reference outputs, `whole` of them kept whole.

    Held throughout: both models, the candidate's input buffers, the kept reference outputs (whole or
    digests). On top, the largest of: refilling the buffers (a fresh draw copied in; scaled and
    shuffled sets are derived in place), the poisoned blocks, and the candidate's call (allowed the
    reference's peak, its output included); plus the chunked checks' temporaries and the inputs'
    checksum weights (COMPARE_BYTES). Before the candidate exists the reference's side holds less:
    one model, a set of inputs where the buffers will be, and its call within the same peak.
    """
    held = 2 * fp.weight_bytes + fp.input_bytes + whole * fp.output_bytes + (expected - whole) * fp.digest_bytes
    drawing = fp.draw_peak_bytes or fp.input_bytes
    return held + max(drawing, poison_blocks * fp.output_bytes, fp.ref_peak_bytes) + COMPARE_BYTES


def floor_bytes(fp: Footprint) -> int:
    """What any judge holds: the inputs, the reference output and the candidate's output."""
    return fp.input_bytes + 2 * fp.output_bytes


def card_bytes(device_bytes: int, cap_gb: float) -> int:
    """The card as configured: `gpu_memory_cap_gb` evaluates as if it had that much (a smaller card's plan)."""
    cap = int(cap_gb * GB)
    return min(device_bytes, cap) if cap else device_bytes


def share_bytes(usable_bytes: int, sharing: int) -> int:
    """One worker's share of what the evaluator may use on a GPU that `sharing` workers share."""
    return usable_bytes // max(1, sharing)


def plan_memory(fp: Footprint, *, expected: int, usable_bytes: int, sharing: int, least: bool = False) -> MemoryPlan:
    """The plan: in a share or alone, the cap, how many reference outputs are kept whole and how many blocks poisoned.

    `usable_bytes` is what the evaluator may use on the GPU (its configured fraction, bounded by what
    is free). A share is tried before the whole GPU, and in each every output whole before trial 0's
    alone, two poisoned blocks before one; `least` (the retry of a shortfall) tries only trial 0's. MARGIN
    covers the whole need. An evaluation that does not fit even at its floor (`fits` false) is the
    evaluator's shortfall: trial.py tries it alone on the whole GPU, and an out-of-memory there within
    the candidate's allowance is not the candidate's.
    """
    copies = [(whole, poison) for whole in ([1] if least else [expected, 1]) for poison in (MAX_POISON_BLOCKS, 1)]
    caps = [(share_bytes(usable_bytes, sharing), False), (usable_bytes, True)] if sharing > 1 else [(usable_bytes, False)]
    for cap, alone in caps:
        for whole, poison in copies:
            need = need_bytes(fp, expected, whole, poison)
            if MARGIN * need <= cap:
                return MemoryPlan(alone=alone, cap_bytes=cap, need_bytes=need, whole_outputs=whole, poison_blocks=poison)
    return MemoryPlan(alone=sharing > 1, cap_bytes=usable_bytes, need_bytes=need_bytes(fp, expected, 1, 1),
                      whole_outputs=1, poison_blocks=1, fits=False)


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
