"""kernelzero.supervisor with tiny Python children: restarts, giving up, and stopping through SIGINT."""

from __future__ import annotations

import asyncio
import io
import re
import sys
import time
from pathlib import Path

from kernelzero.supervisor import Child, RestartPolicy, keep_running, supervise

FAST = RestartPolicy(first_pause_s=0.01, max_pause_s=0.05, grace_s=5.0)


def counting_child(runs: Path, fail_runs: int, code: int = 3) -> Child:
    """Counts its runs in `runs`; exits `code` on the first `fail_runs` of them, 0 afterwards."""
    script = (f"import pathlib, sys; p = pathlib.Path({str(runs)!r}); "
              f"n = int(p.read_text()) + 1 if p.exists() else 1; p.write_text(str(n)); "
              f"sys.exit({code} if n <= {fail_runs} else 0)")
    return Child("counting", [sys.executable, "-c", script])


def interruptible_child(ready: Path, interrupted: Path) -> Child:
    """Announces itself in `ready` once its SIGINT handler is installed, which writes `interrupted` and exits 0."""
    script = (f"import pathlib, signal, sys, time\n"
              f"def stop(*_):\n"
              f"    pathlib.Path({str(interrupted)!r}).write_text('sigint'); sys.exit(0)\n"
              f"signal.signal(signal.SIGINT, stop)\n"
              f"pathlib.Path({str(ready)!r}).write_text('ready')\n"
              f"time.sleep(60)\n")
    return Child("sleeper", [sys.executable, "-c", script])


async def wait_for_file(path: Path, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)


def test_a_failing_child_is_restarted_until_it_exits_cleanly(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", io.StringIO()
    code = asyncio.run(keep_running(counting_child(runs, fail_runs=4), asyncio.Event(), FAST, out))
    assert code == 0
    assert runs.read_text() == "5"
    pauses = re.findall(r"died \(exit code 3\); restarting in ([\d.]+)s", out.getvalue())
    assert pauses == ["0.01", "0.02", "0.04", "0.05"], out.getvalue()  # doubled, then capped


def test_it_gives_up_after_max_restarts_with_the_childs_code(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", io.StringIO()
    policy = RestartPolicy(max_restarts=2, first_pause_s=0.01, max_pause_s=0.05)
    code = asyncio.run(keep_running(counting_child(runs, fail_runs=99, code=7), asyncio.Event(), policy, out))
    assert code == 7
    assert runs.read_text() == "3"  # the first run and two restarts
    assert "after 2 restarts; giving up" in out.getvalue(), out.getvalue()


def test_deaths_after_a_stable_run_do_not_count_towards_giving_up(tmp_path: Path) -> None:
    runs, out = tmp_path / "runs", io.StringIO()
    # every run counts as stable (stable_after_s 0): five deaths never reach max_restarts=2 in a row
    policy = RestartPolicy(max_restarts=2, first_pause_s=0.01, max_pause_s=0.05, stable_after_s=0.0)
    code = asyncio.run(keep_running(counting_child(runs, fail_runs=5), asyncio.Event(), policy, out))
    assert code == 0 and runs.read_text() == "6"
    assert "giving up" not in out.getvalue()


def test_stop_sends_sigint_to_the_child(tmp_path: Path) -> None:
    ready, interrupted = tmp_path / "ready", tmp_path / "interrupted"

    async def scenario() -> int:
        stopping = asyncio.Event()
        run = asyncio.create_task(keep_running(interruptible_child(ready, interrupted), stopping, FAST, io.StringIO()))
        await wait_for_file(ready)
        stopping.set()
        return await asyncio.wait_for(run, FAST.grace_s / 2)  # well before the kill: SIGINT ended it

    assert asyncio.run(scenario()) == 0
    assert interrupted.read_text() == "sigint"


def test_a_child_that_ignores_sigint_is_killed_after_the_grace(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    script = (f"import pathlib, signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
              f"pathlib.Path({str(ready)!r}).write_text('ready'); time.sleep(60)")
    child = Child("stubborn", [sys.executable, "-c", script])
    policy = RestartPolicy(grace_s=0.2)

    async def scenario() -> float:
        stopping = asyncio.Event()
        run = asyncio.create_task(keep_running(child, stopping, policy, io.StringIO()))
        await wait_for_file(ready)
        stopping.set()
        began = time.monotonic()
        assert await asyncio.wait_for(run, 10) == 0
        return time.monotonic() - began

    assert asyncio.run(scenario()) < 5


def test_one_child_giving_up_stops_the_others(tmp_path: Path) -> None:
    ready, interrupted = tmp_path / "ready", tmp_path / "interrupted"
    children = [interruptible_child(ready, interrupted), counting_child(tmp_path / "runs", fail_runs=99, code=5)]
    policy = RestartPolicy(max_restarts=1, first_pause_s=0.01, max_pause_s=0.05, grace_s=5.0)

    async def scenario() -> int:
        return await asyncio.wait_for(supervise(children, policy, io.StringIO()), 20)  # the sleeper sleeps 60 s

    assert asyncio.run(scenario()) == 5
    assert (tmp_path / "runs").read_text() == "2"
    # The sleeper may be stopped before its handler is installed (then SIGINT ends it by default).
    assert not ready.exists() or interrupted.read_text() == "sigint"
