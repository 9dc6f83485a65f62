"""What the candidate's calls held and asked for on the GPU, and whose an out-of-memory is; it sees only torch's caching allocator.

Memory taken around that allocator in this process (an extension's own cudaMalloc) or by another
process is not counted; an out-of-memory that does not say what was asked for (a CUDA error from
outside the allocator) is judged by the room the candidate's call was left, not by what it took.
"""

from __future__ import annotations

import re
from typing import Any, Callable

import torch

from kernelzero.gpu_workers import memory
from kernelzero.kit.tracing import tensors

_TRIED = re.compile(r"Tried to allocate ([0-9.]+) (B|bytes|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "bytes": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
# a demand no allowance covers: the candidate's
BEYOND_ANY_ALLOWANCE = 1 << 62


def nbytes(values: list[Any]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors(values))


def tried_bytes(exc: BaseException) -> int:
    """The allocation that failed, from torch's message ("Tried to allocate 8.00 GiB"); 0 where it does not say."""
    found = _TRIED.search(str(exc))
    return int(float(found.group(1)) * _UNITS[found.group(2)]) if found else 0


class MemoryLedger:
    """The problem's footprint (measured on the reference), the evaluator's own bytes, and the candidate's beyond them.

    Off CUDA every reading is 0 and no out-of-memory is a shortfall: there is no allowance to keep.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.on_cuda = device.type == "cuda"
        self.footprint: memory.Footprint | None = None
        self.cap_bytes = 0  # the allocator's cap for this evaluation (trial.py sets it with its share or alone)
        self.held_base = 0  # bytes the evaluator holds during the calls (its own, the candidate's weights allowance)
        self.held_now = 0  # held_base when the current call began
        self.call_base = 0  # bytes allocated when the current candidate call began
        self.candidate_held = 0  # bytes the candidate held beyond the evaluator's after its last call (its output too)

    # ---- the allocator's readings ----
    # torch.cuda.memory_allocated flattens every statistic into a new dict (about 0.28 ms a reading under cProfile
    # on an H100, two readings a candidate call); the nested form is read as the allocator gives it
    def _allocated_bytes(self) -> dict[str, int]:
        stats = torch.cuda.memory_stats_as_nested_dict(self.device)  # {} before CUDA is initialised
        return stats["allocated_bytes"]["all"] if stats else {"current": 0, "peak": 0}

    def allocated(self) -> int:
        return self._allocated_bytes()["current"] if self.on_cuda else 0

    def mark(self) -> int:
        """Peak statistics restarted; the bytes allocated now (0 off CUDA)."""
        if not self.on_cuda:
            return 0
        torch.cuda.reset_peak_memory_stats(self.device)
        return self.allocated()

    def peak_since(self, base: int) -> int:
        return self._allocated_bytes()["peak"] - base if self.on_cuda else 0

    def draw_peak(self, draws: list[Callable[[], list[Any]]]) -> int:
        """The largest peak of these draws of a set of inputs, each at least its values' bytes; 0 off CUDA (unmeasured)."""
        if not self.on_cuda:
            return 0
        peak = 0
        for draw in draws:
            base = self.mark()
            values = draw()
            peak = max(peak, self.peak_since(base), nbytes(values))
            del values  # before the next draw: each is measured on its own
        return peak

    # ---- the candidate's calls ----
    def after_construction(self, before_import: int) -> None:
        """The evaluator's own bytes once the candidate's model exists, and what the candidate holds beyond them.

        Its weights are allowed as much as the reference's; what its import and constructor took
        beyond that is the candidate's from the start.
        """
        weight_allowance = self.footprint.weight_bytes if self.footprint is not None else 0
        self.held_base = self.held_now = before_import + weight_allowance
        self.end_call()

    def hold(self, nbytes_held: int) -> None:
        """Bytes the evaluator holds from now on (the candidate's input buffers, the L2 flush)."""
        self.held_base += nbytes_held

    def start_call(self) -> None:
        """Before a candidate call (its inputs refilled, nothing else of ours alive): the call's base."""
        self.call_base = self.mark()
        self.held_now = self.held_base

    def end_call(self) -> None:
        """After a candidate call: what it holds now beyond the evaluator's (its output included)."""
        if self.on_cuda:
            self.candidate_held = max(0, self.allocated() - self.held_now)

    # ---- whose out-of-memory (memory.oom_is_candidates) ----
    def call_demand(self, exc: BaseException) -> int:
        """What the candidate held and asked for when its call ran out of memory."""
        tried = tried_bytes(exc)
        if tried or self.footprint is None or not self.on_cuda:
            return max(0, self.call_base - self.held_now) + self.peak_since(self.call_base) + tried
        # a failed request of unknown size (a CUDA error out of torch's allocator): the candidate's where the
        # evaluation left it at least the reference's peak when its call began
        left = self.cap_bytes - self.call_base
        return 0 if left < self.footprint.ref_peak_bytes else BEYOND_ANY_ALLOWANCE

    def held_demand(self, exc: BaseException) -> int:
        """What the candidate held and asked for when the evaluator's own code ran out of memory."""
        return self.candidate_held + tried_bytes(exc)

    def shortfall(self, demand: int, where: str) -> str | None:
        """The evaluator's shortfall, as evidence, where `demand` is within the candidate's allowance; None: the candidate's."""
        if not self.on_cuda or self.footprint is None or memory.oom_is_candidates(self.footprint, demand):
            return None
        return (f"the candidate held or asked for {demand / memory.GB:.3g} GB, within its allowance of "
                f"{memory.allowance_bytes(self.footprint) / memory.GB:.3g} GB (the reference's peak); at {where}")
