"""Keeps child processes running, restarting those that die; it does not make redoing their work safe or place them on machines."""

from __future__ import annotations

import asyncio
import ctypes
import signal
import sys
import time
from typing import TextIO

import msgspec

STOP_GRACE_S = 15.0
STABLE_AFTER_S = 30.0  # a child that ran this long before dying starts the pauses afresh
MAX_RESTART_PAUSE_S = 60.0


class Child(msgspec.Struct, frozen=True):
    label: str  # starts every line printed about this child
    argv: list[str]
    env: dict[str, str] | None = None  # None: the supervisor's own environment


class RestartPolicy(msgspec.Struct, frozen=True):
    max_restarts: int | None = None  # give up at the next quick death after this many in a row; None: never
    first_pause_s: float = 1.0  # doubled on each quick death, up to max_pause_s
    max_pause_s: float = MAX_RESTART_PAUSE_S
    stable_after_s: float = STABLE_AFTER_S
    grace_s: float = STOP_GRACE_S  # between SIGINT and SIGKILL on stop


def _die_with_parent() -> None:
    """Linux: the child gets SIGINT when the supervisor dies, so no orphan keeps working (or holding a GPU)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _exit_reason(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


async def _stop(process: asyncio.subprocess.Process, waiter: asyncio.Future, grace_s: float) -> None:
    process.send_signal(signal.SIGINT)  # lets the child leave its consumer group and stop its own children
    try:
        await asyncio.wait_for(asyncio.shield(waiter), grace_s)
    except asyncio.TimeoutError:
        process.kill()
    await waiter


async def keep_running(child: Child, stopping: asyncio.Event, policy: RestartPolicy = RestartPolicy(),
                       stream: TextIO | None = None) -> int:
    """Run `child` until it exits 0 or `stopping` is set (then 0), or it dies past `policy.max_restarts` (its code)."""
    def say(line: str) -> None:
        print(f"{child.label}: {line}", file=stream or sys.stdout, flush=True)

    pause, restarts = policy.first_pause_s / 2, 0  # the pause is doubled before its first use
    while True:
        process = await asyncio.create_subprocess_exec(*child.argv, env=child.env, preexec_fn=_die_with_parent)
        say(f"pid {process.pid} started")
        started = time.monotonic()
        waiter = asyncio.ensure_future(process.wait())
        stop = asyncio.ensure_future(stopping.wait())
        await asyncio.wait({waiter, stop}, return_when=asyncio.FIRST_COMPLETED)
        if not waiter.done():
            await _stop(process, waiter, policy.grace_s)
            return 0
        stop.cancel()
        code = waiter.result()
        if code == 0 or stopping.is_set():  # a Ctrl-C reaches the whole process group, children first at times
            return 0
        quick = time.monotonic() - started < policy.stable_after_s
        restarts = restarts if quick else 0  # only deaths in a row, each soon after its start, count towards giving up
        if policy.max_restarts is not None and restarts >= policy.max_restarts:
            say(f"pid {process.pid} died ({_exit_reason(code)}) after {restarts} restarts; giving up")
            return code
        restarts += 1
        pause = min(pause * 2, policy.max_pause_s) if quick else policy.first_pause_s
        say(f"pid {process.pid} died ({_exit_reason(code)}); restarting in {pause:g}s")
        try:
            await asyncio.wait_for(stopping.wait(), pause)
            return 0
        except asyncio.TimeoutError:
            pass


async def supervise(children: list[Child], policy: RestartPolicy = RestartPolicy(),
                    stream: TextIO | None = None) -> int:
    """Keep every child running until all exit or SIGINT/SIGTERM arrives; one that gives up stops the others.

    Returns the worst exit code (largest in magnitude; 0 when all exited cleanly or were stopped).
    """
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stopping.set)

    async def run(child: Child) -> int:
        code = await keep_running(child, stopping, policy, stream)
        if code != 0:
            stopping.set()
        return code

    codes = await asyncio.gather(*(run(child) for child in children))
    return max(codes, key=abs, default=0)
