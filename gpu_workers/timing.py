"""CUDA timing: the sides given (the reference and its compiled form in a job of their own, or a candidate alone) timed in turn, device-wide sync, L2 flush, rotated inputs; CUDA only.

Each call is bracketed by a start event and an end event recorded after a device-wide
synchronization, so work on side streams or threads is inside the interval. The fixed cost of
that synchronization is measured (plain stream-ordered events vs the device-wide bracket) on a
trusted stream-ordered call timed beside the measured one in the same process, under the same load:
the reference itself in its own job, a spin kernel of ours (`sync_probe`) beside a candidate, and
subtracted from every call. The reference is timed once per problem and GPU, in a job
that runs no candidate code (gpu_workers/reference_times.py keeps its times); each candidate is timed alone
and its speedup is the ratio of the two medians. Warm-up runs for a minimum time, not a count (an
idle H200 sits at 345 MHz), and then until the per-call times have stopped moving, so a clock still
ramping up is not timed, in either job. A spin of a fixed number of cycles of ours (`sync_probe`,
whose time is the SM clock's inverse) is timed beside every warm-up call: its time after warm-up
in the candidate's job over that in the reference's says how far their clocks differed. What a side
does before and after its call (refilling its inputs, judging its output: trial.py judges every
candidate call, warm-up included) is outside the interval. Numbers are medians; they do NOT claim
anything about other GPUs, clocks or concurrent load; a clock that differs between the reference's
job and the candidate's after both settled moves the speedup by as much (the two are no longer
interleaved: the probe says so, nothing corrects it), and a clock that drifts slower than the
settling window sees is not caught.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

# (bytes/s, FLOP/s): datasheet peaks, generous on purpose (dense fp8 for FLOPs) so only impossible results fail
PEAKS: dict[str, tuple[float, float]] = {
    "H200": (4.8e12, 1.98e15), "H100": (3.35e12, 1.98e15), "H800": (3.35e12, 1.98e15), "GH200": (4.9e12, 1.98e15),
    "B200": (8.0e12, 4.5e15), "B100": (8.0e12, 3.5e15), "A100": (2.04e12, 0.624e15), "L40S": (0.864e12, 0.733e15),
    "L4": (0.3e12, 0.242e15), "A10": (0.6e12, 0.25e15), "RTX 4090": (1.0e12, 0.66e15),
}
UNKNOWN_PEAK = (10e12, 5e15)


def peaks_for(gpu_name: str) -> tuple[float, float]:
    for key in sorted(PEAKS, key=len, reverse=True):
        if key.lower() in gpu_name.lower():
            return PEAKS[key]
    return UNKNOWN_PEAK


@dataclass
class Stats:
    median_ms: float
    iqr_ms: float
    n: int


@dataclass
class Measured:
    """Every side's times, the synchronization's fixed cost subtracted, and what was measured around them."""

    sides: list[Stats]
    off_stream_ms: list[float]  # per side: the median share of its call that the caller's stream did not wait for
    warmup_s: float  # how long warm-up ran before the per-call times settled (or its cap)
    calls: int  # calls of each side, warm-up included
    clock_ms: float  # the clock probe's median time over warm-up's last window (the SM clock's inverse)


def stats(samples_ms: list[float]) -> Stats:
    q = statistics.quantiles(samples_ms, n=4) if len(samples_ms) >= 2 else [samples_ms[0]] * 3
    return Stats(statistics.median(samples_ms), q[2] - q[0], len(samples_ms))


@dataclass
class Side:
    """One side of the comparison: its call (timed) and, untimed around it, what the repetition needs."""

    call: Callable[..., Any]
    before: Callable[[int], list[Any]]  # repetition -> the call's arguments (inputs refilled, memory poisoned)
    after: Callable[[int, Any], None] = lambda rep, out: None  # judges the call's output (raises on a wrong one)


def flush_buffer() -> torch.Tensor:
    """Twice the L2 cache, zeroed before every call so that no call finds its data cached by the one before."""
    l2 = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    return torch.empty(max(2 * l2, 1 << 24), dtype=torch.uint8, device="cuda")


def _one_call(side: Side, rep: int, flush: torch.Tensor) -> tuple[float, float]:
    """(stream-ordered ms, device-wide ms) for one call, after flushing L2; its output judged afterwards."""
    args = side.before(rep)
    flush.zero_()
    torch.cuda.synchronize()
    start, end_stream, end_device = (torch.cuda.Event(enable_timing=True) for _ in range(3))
    start.record()
    out = side.call(*args)
    end_stream.record()
    torch.cuda.synchronize()
    end_device.record()
    torch.cuda.synchronize()
    side.after(rep, out)
    return start.elapsed_time(end_stream), start.elapsed_time(end_device)


def untimed(side: Side, reps: int) -> None:
    """The calls timing would make of one side, without a clock (the CPU path: their outputs are still judged)."""
    for rep in range(reps):
        side.after(rep, side.call(*side.before(rep)))


WARMUP_MIN_S = 0.3
WARMUP_MAX_S = 3.0
SETTLE_WINDOW = 8  # calls per side in each of the two windows compared
SETTLE_TOL = 0.005


def settled(times_ms: list[float], window: int = SETTLE_WINDOW, tol: float = SETTLE_TOL) -> bool:
    """Whether the median of the last `window` times is within `tol` (relative) of the window before it.

    Noisy calls (tiny kernels) get a tolerance of half the interquartile range of both windows:
    their medians wander by that much without any clock change, and waiting would gain nothing.
    """
    if len(times_ms) < 2 * window:
        return False
    recent = times_ms[-2 * window:]
    last, before = statistics.median(recent[window:]), statistics.median(recent[:window])
    q = statistics.quantiles(recent, n=4)
    return abs(last - before) <= max(tol * last, 0.5 * (q[2] - q[0]))


def _warm_up(sides: list[Side], flush: torch.Tensor) -> tuple[float, int, float]:
    """Alternate the sides, and the clock probe, until the minimum time has passed and every side's per-call times
    settle; (seconds, reps, the probe's median over the last window)."""
    started = time.monotonic()
    times: list[list[float]] = [[] for _ in sides]
    probe, probe_ms = sync_probe(), []
    while True:
        elapsed = time.monotonic() - started
        clock_ms = statistics.median(probe_ms[-SETTLE_WINDOW:]) if probe_ms else 0.0
        if elapsed >= WARMUP_MAX_S or (elapsed >= WARMUP_MIN_S and all(settled(t) for t in times)):
            return elapsed, len(times[0]), clock_ms
        rep = len(times[0])
        for side, side_times in zip(sides, times):
            side_times.append(_one_call(side, rep, flush)[1])
        probe_ms.append(_one_call(probe, rep, flush)[0])  # stream-ordered: the spin's own time


PROBE_CYCLES = 100_000  # about 50 us at an H100's clock: long enough that the CPU waits in the synchronization
_cuda_sleep = torch._C._cuda_sleep  # bound before candidate code loads (trial.py), like compare.py's functions


def sync_probe() -> Side:
    """A stream-ordered call of ours that spins on the device: the synchronization's cost beside a candidate, which
    cannot be trusted to measure it (work it leaves on a side stream would pass for that cost)."""
    return Side(lambda: _cuda_sleep(PROBE_CYCLES), lambda rep: [])


# cudaEventElapsedTime has "a resolution of around 0.5 microseconds": a standard error below it is not worth waiting for
TIMER_RESOLUTION_MS = 0.0005


def measure(sides: list[Side], flush: torch.Tensor, *, budget_s: float, min_reps: int, max_reps: int,
            rel_se: float, sync_side: int = 0) -> Measured:
    """The sides timed in turn after a shared warm-up, until the first side's median is known well enough.

    The device-wide synchronization's fixed cost, subtracted from every call, is measured on
    `sides[sync_side]`, whose caller vouches that its work is stream-ordered (the reference, or
    `sync_probe`: never a candidate). `off_stream_ms` compares, per call, the end of the caller's stream with
    the end of all device work: for stream-ordered code the two differ by that fixed cost, for work left
    running on a side stream by that work's duration. Timing stops once the first side's median is
    known to `rel_se` of itself or to the timer's resolution, whichever is larger (`precise_enough`),
    or at `budget_s`. The order of the sides rotates every repetition, so none is always first after
    the flush. Repetitions are numbered on from warm-up's, so a side's `before` sees one count.
    """
    warmup_s, first, clock_ms = _warm_up(sides, flush)
    device_ms: list[list[float]] = [[] for _ in sides]
    gaps_ms: list[list[float]] = [[] for _ in sides]
    deadline = time.monotonic() + budget_s
    rep = 0
    while rep < max_reps:
        for k in range(len(sides)):
            side = (rep + k) % len(sides)
            stream_ms, total_ms = _one_call(sides[side], first + rep, flush)
            device_ms[side].append(total_ms)
            gaps_ms[side].append(total_ms - stream_ms)
        rep += 1
        if rep >= min_reps and (precise_enough(device_ms[0], rel_se) or time.monotonic() > deadline):
            break
    sync = statistics.median(gaps_ms[sync_side])
    # a call no longer than the synchronization's own cost reads as the timer's resolution, the least the clock tells
    # apart from nothing (read as zero it made a tiny correct kernel beyond_physical_limit and its speedup unbounded)
    return Measured([stats([max(t - sync, TIMER_RESOLUTION_MS) for t in times]) for times in device_ms],
                    [max(statistics.median(gaps) - sync, 0.0) for gaps in gaps_ms], warmup_s, first + rep, clock_ms)


def precise_enough(times_ms: list[float], rel_se: float) -> bool:
    """Whether the median's standard error is within `rel_se` of it, or within the timer's resolution.

    The error is the median's, estimated from the interquartile range (1.2533 sigma / sqrt(n), sigma =
    IQR / 1.349 for a normal middle): a kernel of microseconds launched from Python has a tight middle
    and a long tail of slow launches, whose standard deviation would keep it timing to the budget.
    """
    q = statistics.quantiles(times_ms, n=4)
    se = 1.2533 * (q[2] - q[0]) / 1.349 / len(times_ms) ** 0.5
    return se <= max(rel_se * statistics.median(times_ms), TIMER_RESOLUTION_MS)


def compiled_in_process(model: torch.nn.Module) -> Callable:
    """torch.compile(model), its kernels compiled in this thread when first called.

    Inductor otherwise compiles through a pool of threads and processes that it starts on its own
    time, possibly after the trial took its baseline of threads (seen on a 16-core H200 host with
    four evaluations at once: a correct candidate rejected `background_thread`); a pool per
    evaluation would also count against the sandbox's process limit.
    """
    import torch._inductor.config as inductor_config

    inductor_config.compile_threads = 1
    return torch.compile(model)


def beyond_physical_limit(runtime_ms: float, floor_ms: float, slack: float) -> bool:
    """Whether a measured runtime is below `slack` of the physical floor by more than the timer's resolution: a floor
    the clock cannot resolve (a tiny module's nanoseconds) rejects nothing."""
    return runtime_ms + TIMER_RESOLUTION_MS < slack * floor_ms


def physical_floor_ms(gpu_name: str, nbytes: int, flops: float) -> float:
    """The least time the work could take on this GPU: bytes over bandwidth or FLOPs over peak, whichever is larger."""
    bandwidth, peak = peaks_for(gpu_name)
    return 1e3 * max(nbytes / bandwidth, flops / peak)
