"""The timing rules that need no GPU: when warm-up counts per-call times as settled, when timing has enough calls; the compiled reference starts no thread."""

import json
import os
import subprocess
import sys

from kernelzero.gpu_workers.timing import (SETTLE_WINDOW, TIMER_RESOLUTION_MS, beyond_physical_limit, precise_enough,
                                          settled)

COMPILE_ON_A_BIG_HOST = """
import json
import threading
import torch
import torch._inductor.config
torch._inductor.config.compile_threads = 8  # what inductor picks on a 16-core GPU host
from kernelzero.gpu_workers.timing import compiled_in_process

class Reference(torch.nn.Module):
    def forward(self, a, b):
        return torch.relu(a @ b).softmax(-1) + a.sin()

before = set(threading.enumerate())
compiled = compiled_in_process(Reference())
with torch.no_grad():
    compiled(torch.randn(32, 32), torch.randn(32, 32))
print(json.dumps(sorted(t.name for t in threading.enumerate() if t not in before)))
"""


def test_too_few_calls_are_not_settled():
    assert not settled([1.0] * (2 * SETTLE_WINDOW - 1))


def test_steady_times_are_settled():
    assert settled([1.7] * (2 * SETTLE_WINDOW))


def test_a_clock_still_ramping_up_is_not_settled():
    # per-call time falling 0.4% a call, as while an idle GPU climbs to its boost clock
    ramp = [1.8 * (1 - 0.004 * i) for i in range(2 * SETTLE_WINDOW)]
    assert not settled(ramp)
    assert settled(ramp + [ramp[-1]] * (2 * SETTLE_WINDOW))


def test_a_step_between_windows_is_not_settled():
    assert not settled([1.77] * SETTLE_WINDOW + [1.71] * SETTLE_WINDOW)


def test_noise_around_a_constant_level_is_settled():
    # a tiny kernel: +-10% call-to-call jitter, no trend; its medians wander within the noise
    jitter = [0.030, 0.033, 0.028, 0.031, 0.027, 0.032, 0.029, 0.030]
    assert settled(jitter + list(reversed(jitter)))
    assert settled(jitter + jitter[1:] + jitter[:1])


def test_the_compiled_reference_starts_no_thread(tmp_path):
    """Regression (H200, four evaluations at once): inductor's compile pool, started after the trial took its
    baseline of threads, made a correct Triton matmul (bench/kernelbench_candidates, level 1 problem 1
    sample 0) `rejected background_thread`."""
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    env.pop("TORCHINDUCTOR_COMPILE_THREADS", None)
    run = subprocess.run([sys.executable, "-c", COMPILE_ON_A_BIG_HOST], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    # tqdm starts its monitor with its first bar, inside the compile, before the trial takes its baseline again;
    # a compile pool starts its threads when it likes
    assert [name for name in json.loads(run.stdout.splitlines()[-1]) if name != "tqdm_monitor"] == []


def test_a_microsecond_kernel_stops_at_the_timers_resolution():
    # 5 us +- 1 us: 0.2% of its median (0.01 us) is far below what the clock resolves; 20 calls are enough
    jitter = [0.004, 0.005, 0.006, 0.005] * 5
    assert precise_enough(jitter, 0.002)
    assert not precise_enough(jitter[:2] * 2 + [0.050] * 2, 0.002)  # a spread of 23 us is not
    assert TIMER_RESOLUTION_MS == 0.0005


def test_a_millisecond_kernel_waits_for_its_relative_error():
    jitter = [1.00, 1.02, 0.98, 1.01, 0.99] * 4  # 1 ms +- 2%: the median's standard error about 0.4% at 20 calls
    assert not precise_enough(jitter, 0.002)
    assert precise_enough(jitter * 5, 0.002)  # and 0.19% at 100


def test_a_tail_of_slow_launches_does_not_keep_a_tight_kernel_timing():
    # 40 us +- 1 us, one call in ten 150 us (a launch the CPU was late for): the tail's standard deviation alone
    # would put the error at 7.6 us, fifteen times the clock's resolution
    tail = [0.040, 0.041, 0.039, 0.040, 0.042, 0.040, 0.039, 0.041, 0.040, 0.150] * 2
    assert precise_enough(tail, 0.002)


def test_a_floor_the_clock_cannot_resolve_rejects_nothing():
    """Seen on an H100: correct 2,048-element kernels rejected beyond_physical_limit, their time read as 1e-6 ms where
    the synchronization cost more than the call (tests/evaluator/candidates_cuda/triton_launch_bound_rows.py)."""
    tiny_floor_ms = 2 * 2048 * 4 / 3.35e12 * 1e3  # 16 KB at an H100's bandwidth: 5 ns
    assert not beyond_physical_limit(TIMER_RESOLUTION_MS, tiny_floor_ms, 0.5)
    assert not beyond_physical_limit(1e-6, tiny_floor_ms, 0.5)
    large_floor_ms = 134e6 / 3.35e12 * 1e3  # 134 MB: 40 us
    assert beyond_physical_limit(TIMER_RESOLUTION_MS, large_floor_ms, 0.5)  # a memoized answer is still impossible
    assert not beyond_physical_limit(0.8 * large_floor_ms, large_floor_ms, 0.5)
