"""Turns on one GPU across evaluator processes: shared for checking candidates, exclusive for timing them or for a problem too large to share.

Several workers can share a GPU (`[evaluator] workers_per_gpu`): their compiles, imports and
correctness trials overlap, while a timed run waits until no other candidate runs on that GPU and
holds new ones back at a gate until it is done. An evaluation whose memory need exceeds its share
(gpu_workers/memory.py) goes alone the same way and keeps the GPU to itself until it ends. The
turns are advisory `flock` locks in the temporary directory's `kernelzero-gpu-turns/` (bound into
every worker's sandbox at the same path), keyed by the GPU's UUID, so every evaluator on the host
takes part; the kernel drops them when a process dies. They do NOT keep out other programs using
the GPU, nor a candidate that drops or takes its own process's turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile

# read once, when the worker imports this: a job's TMPDIR is its own scratch folder
TURNS_DIR = os.path.join(tempfile.gettempdir(), "kernelzero-gpu-turns")
TURNS_INSIDE = "/tmp/kernelzero-gpu-turns"  # TURNS_DIR as a worker in bubblewrap sees it (its own /tmp)


def turns_dir() -> str:
    """The host folder of gpu_workers/device_turns.py's locks, open to every uid (candidates take turns too)."""
    path = os.path.join(tempfile.gettempdir(), "kernelzero-gpu-turns")
    os.makedirs(path, exist_ok=True)
    os.chmod(path, 0o1777)
    return path


class DeviceTurns:
    def __init__(self, gpu_key: str):
        os.makedirs(TURNS_DIR, exist_ok=True)
        base = os.path.join(TURNS_DIR, gpu_key)
        self._gate = os.open(base + ".gate", os.O_RDONLY | os.O_CREAT, 0o666)
        self._turn = os.open(base + ".lock", os.O_RDONLY | os.O_CREAT, 0o666)
        self.is_alone = False

    def share(self) -> None:
        """Take a shared turn; waits while a timed run holds or awaits the GPU."""
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._turn, fcntl.LOCK_SH)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)

    def alone(self) -> None:
        """The GPU to this process alone from now until it exits; the shared turn is given up first, so two never deadlock."""
        if self.is_alone:
            return
        fcntl.flock(self._turn, fcntl.LOCK_UN)
        fcntl.flock(self._gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(self._turn, fcntl.LOCK_EX)
        finally:
            fcntl.flock(self._gate, fcntl.LOCK_UN)
        self.is_alone = True

    def release(self) -> None:
        """No turn at all: waiting evaluations go ahead."""
        fcntl.flock(self._turn, fcntl.LOCK_UN)
        self.is_alone = False

    @contextlib.contextmanager
    def exclusive(self):
        """The GPU to this process alone inside, then no turn at all (a process already alone keeps its turn)."""
        if self.is_alone:
            yield
            return
        self.alone()
        try:
            yield
        finally:
            self.release()


def for_device(device_index: int) -> DeviceTurns:
    import torch
    return DeviceTurns(str(torch.cuda.get_device_properties(device_index).uuid))
