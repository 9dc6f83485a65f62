"""Device turns across processes: a timed run and an evaluation alone exclude every shared turn, and shared turns overlap."""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid

from kernelzero.gpu_workers.device_turns import DeviceTurns


def _shared(key: str, hold_s: float, log, started) -> None:
    turns = DeviceTurns(key)
    turns.share()
    log.put(("share", time.monotonic()))
    started.set()
    time.sleep(hold_s)
    log.put(("share_end", time.monotonic()))


def _timed(key: str, log) -> None:
    turns = DeviceTurns(key)
    turns.share()
    with turns.exclusive():
        log.put(("exclusive", time.monotonic()))
        time.sleep(0.2)
        log.put(("exclusive_end", time.monotonic()))


def _alone(key: str, log) -> None:
    turns = DeviceTurns(key)
    turns.share()
    turns.alone()
    log.put(("alone", time.monotonic()))
    with turns.exclusive():  # timing inside a run alone keeps the turn: no other evaluation slips in between
        time.sleep(0.1)
    time.sleep(0.2)
    log.put(("alone_end", time.monotonic()))


def _events(log, n: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for _ in range(n):
        name, t = log.get(timeout=30)
        out.setdefault(name, []).append(t)
    return out


def test_exclusive_waits_for_shared_turns_and_holds_new_ones_back() -> None:
    ctx = mp.get_context("fork")
    key, log = uuid.uuid4().hex, ctx.Queue()
    first = ctx.Event()
    holder = ctx.Process(target=_shared, args=(key, 0.6, log, first))
    holder.start()
    assert first.wait(10)
    timer = ctx.Process(target=_timed, args=(key, log))
    timer.start()
    time.sleep(0.2)  # the timer now waits at the gate for the holder to finish
    late = ctx.Process(target=_shared, args=(key, 0.0, log, ctx.Event()))
    late.start()
    for p in (holder, timer, late):
        p.join(30)
        assert p.exitcode == 0
    ev = _events(log, 6)
    assert ev["exclusive"][0] >= min(ev["share_end"])  # the timed run began only after the shared holder left
    assert max(ev["share"]) >= ev["exclusive_end"][0]  # the late arrival waited until the timed run ended


def test_shared_turns_overlap() -> None:
    ctx = mp.get_context("fork")
    key, log = uuid.uuid4().hex, ctx.Queue()
    events = [ctx.Event(), ctx.Event()]
    procs = [ctx.Process(target=_shared, args=(key, 0.5, log, e)) for e in events]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    ev = _events(log, 4)
    assert max(ev["share"]) < min(ev["share_end"])  # both held a shared turn at once


def test_an_evaluation_alone_waits_for_shared_turns_and_keeps_the_gpu_until_it_ends() -> None:
    ctx = mp.get_context("fork")
    key, log = uuid.uuid4().hex, ctx.Queue()
    first = ctx.Event()
    holder = ctx.Process(target=_shared, args=(key, 0.5, log, first))
    holder.start()
    assert first.wait(10)
    big = ctx.Process(target=_alone, args=(key, log))
    big.start()
    time.sleep(0.2)  # the big one now waits at the gate for the holder to finish
    late = ctx.Process(target=_shared, args=(key, 0.0, log, ctx.Event()))
    late.start()
    for p in (holder, big, late):
        p.join(30)
        assert p.exitcode == 0
    ev = _events(log, 6)
    assert ev["alone"][0] >= min(ev["share_end"])  # alone only once the shared holder left
    assert max(ev["share"]) >= ev["alone_end"][0]  # the late arrival waited for the whole run, timing included
