"""CUDA timing: candidate, eager reference (and optionally the torch.compile'd reference) interleaved, device-wide sync, L2 flush, rotated inputs; CUDA only.

Each call is bracketed by a start event and an end event recorded after a device-wide
synchronization, so work on side streams or threads is inside the interval. The fixed cost of
that synchronization is measured on the reference (plain stream-ordered events vs the device-wide
bracket) and subtracted from both sides. The speedup is the median of per-repetition ratios
(reference over candidate, timed back to back), so a clock drift during the run moves both
sides of each ratio alike. Warm-up runs for a minimum time, not a count (an idle H200 sits at
345 MHz), and then until the per-call times of both sides have stopped moving, so a clock still
ramping up is not timed. What a side does before and after its call (refilling its inputs,
judging its output: trial.py judges every candidate call, warm-up included) is outside the
interval. Numbers are medians; they do NOT claim anything about other GPUs, clocks
or concurrent load; a clock that drifts slower than the settling window sees is not caught, nor
is an evaluation that runs steadily slow throughout (seen on an H200: 1-3% on both sides).
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
class Timing:
    candidate: Stats
    reference: Stats
    speedup: float  # median of paired reference/candidate ratios
    off_stream_ms: float  # the candidate's median time that its caller's stream did not wait for
    warmup_s: float  # how long warm-up ran before the per-call times settled (or its cap)
    calls: int  # calls of each side, warm-up included
    compiled: Stats | None = None  # the torch.compile'd reference, when one was given
    speedup_compiled: float | None = None  # median of paired compiled/candidate ratios


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


def _warm_up(sides: list[Side], flush: torch.Tensor) -> tuple[float, int]:
    """Alternate the sides until the minimum time has passed and every side's per-call times settle; (seconds, reps)."""
    started = time.monotonic()
    times: list[list[float]] = [[] for _ in sides]
    while True:
        elapsed = time.monotonic() - started
        if elapsed >= WARMUP_MAX_S or (elapsed >= WARMUP_MIN_S and all(settled(t) for t in times)):
            return elapsed, len(times[0])
        rep = len(times[0])
        for side, side_times in zip(sides, times):
            side_times.append(_one_call(side, rep, flush)[1])


def measure(sides: list[Side], flush: torch.Tensor, *, budget_s: float, min_reps: int, max_reps: int,
            rel_se: float) -> Timing:
    """Interleaved timing of the candidate (sides[0]), the reference (sides[1]) and optionally the compiled reference.

    Stops once the speedup's standard error is small. `off_stream_ms` compares, per call, the end of
    the caller's stream with the end of all device work: for stream-ordered code the two differ by the
    synchronization's fixed cost (measured on the reference), for work left running on a side stream
    by that work's duration. The order of the sides rotates every repetition, so none is always first
    after the flush. Repetitions are numbered on from warm-up's, so a side's `before` sees one count.
    """
    warmup_s, first = _warm_up(sides, flush)
    device_ms: list[list[float]] = [[] for _ in sides]
    sync_cost: list[float] = []
    cand_gap: list[float] = []
    deadline = time.monotonic() + budget_s
    rep = 0
    while rep < max_reps:
        for k in range(len(sides)):
            side = (rep + k) % len(sides)
            stream_ms, total_ms = _one_call(sides[side], first + rep, flush)
            device_ms[side].append(total_ms)
            if side == 0:
                cand_gap.append(total_ms - stream_ms)
            elif side == 1:
                sync_cost.append(total_ms - stream_ms)
        rep += 1
        if rep >= min_reps:
            ratios = _ratios(device_ms[0], device_ms[1], statistics.median(sync_cost))
            se = statistics.stdev(ratios) / len(ratios) ** 0.5
            if se <= rel_se * statistics.median(ratios) or time.monotonic() > deadline:
                break
    overhead = statistics.median(sync_cost)
    cand, ref = device_ms[0], device_ms[1]
    timing = Timing(stats([max(t - overhead, 1e-6) for t in cand]), stats([max(t - overhead, 1e-6) for t in ref]),
                    statistics.median(_ratios(cand, ref, overhead)), max(statistics.median(cand_gap) - overhead, 0.0),
                    warmup_s, first + rep)
    if len(sides) > 2:
        timing.compiled = stats([max(t - overhead, 1e-6) for t in device_ms[2]])
        timing.speedup_compiled = statistics.median(_ratios(cand, device_ms[2], overhead))
    return timing


def _ratios(cand: list[float], ref: list[float], overhead: float) -> list[float]:
    return [max(r - overhead, 1e-6) / max(c - overhead, 1e-6) for c, r in zip(cand, ref)]


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


def physical_floor_ms(gpu_name: str, nbytes: int, flops: float) -> float:
    """The least time the work could take on this GPU: bytes over bandwidth or FLOPs over peak, whichever is larger."""
    bandwidth, peak = peaks_for(gpu_name)
    return 1e3 * max(nbytes / bandwidth, flops / peak)
