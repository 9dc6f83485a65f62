"""Evaluator worker processes discovered from the machine and supervised; no GPU placement beyond CUDA_VISIBLE_DEVICES.

`kernelzero serve evaluator --workers auto|N` (the one way to start them: service.py calls
`run_workers`) starts one worker process per visible GPU (`auto`; one CPU worker on a machine
without a GPU) or N workers sharing the GPUs round-robin, each `python -m
kernelzero.gpu_workers.service --worker ...` (service.py's `worker_main`). Every worker is one member of the
consumer group "evaluator" on samples.generated, so the log's group membership spreads the
partitions over them and hands a dead worker's partitions to the others (from the group's last
commit: at-least-once, a sample in flight is evaluated again). The parent never touches CUDA: it
counts GPUs from CUDA_VISIBLE_DEVICES or `nvidia-smi -L`, and restarts a worker that dies, with a
growing pause when it keeps dying at start. It does not bound the number of restarts.
"""

from __future__ import annotations

import asyncio
import collections
import os
import re
import shutil
import subprocess
import sys

import msgspec

from kernelzero.supervisor import Child, supervise


class WorkerSlot(msgspec.Struct, frozen=True):
    index: int
    gpu: str | None  # the CUDA_VISIBLE_DEVICES entry the worker gets; None runs on the CPU

    def describe(self) -> str:
        return f"GPU {self.gpu}" if self.gpu is not None else "CPU"


def visible_gpus(env: dict[str, str] | None = None) -> list[str]:
    """CUDA_VISIBLE_DEVICES entries (up to the first invalid one, as CUDA reads it), else `nvidia-smi -L` indices."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        entries = []
        for entry in (e.strip() for e in env["CUDA_VISIBLE_DEVICES"].split(",")):
            if not entry or entry.startswith("-"):
                break
            entries.append(entry)
        return entries
    nvidia_smi = shutil.which("nvidia-smi")
    if nvidia_smi is None:
        return []
    try:
        listing = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return re.findall(r"^GPU (\d+):", listing.stdout, re.M) if listing.returncode == 0 else []


def plan_workers(workers: str, gpus: list[str]) -> list[WorkerSlot]:
    """`auto`: one worker per GPU (one CPU worker without GPUs); N: N workers, GPUs dealt round-robin."""
    if workers == "auto":
        count = max(1, len(gpus))
    elif workers.isdigit() and int(workers) >= 1:
        count = int(workers)
    else:
        raise ValueError(f"--workers must be 'auto' or a positive integer, got {workers!r}")
    return [WorkerSlot(i, gpus[i % len(gpus)] if gpus else None) for i in range(count)]


def worker_env(slot: WorkerSlot, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off on every process we start
    env["PYTHONUNBUFFERED"] = "1"
    if slot.gpu is None:
        env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        env["CUDA_VISIBLE_DEVICES"] = slot.gpu
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # the numbering nvidia-smi -L uses
    return env


def _children(slots: list[WorkerSlot], config, idle_exit_s: float | None, use_cache: bool) -> list[Child]:
    # Only the sections a worker reads travel (on its command line: they hold no secrets), so every
    # worker runs with the parent's effective settings, file and KERNELZERO_* variables included.
    # Workers sharing a GPU know how many they are: each evaluation takes a share of its memory, or
    # the GPU alone when its problem needs more (gpu_workers/memory.py).
    sharing = collections.Counter(slot.gpu for slot in slots)
    sections = msgspec.json.encode({"log": config.log, "evaluator": config.evaluator}).decode()
    children = []
    for slot in slots:
        argv = [sys.executable, "-m", "kernelzero.gpu_workers.service", "--worker", str(slot.index),
                "--device", "cpu" if slot.gpu is None else "cuda", "--sections", sections,
                "--gpu-processes", str(sharing[slot.gpu])]
        if idle_exit_s is not None:
            argv += ["--idle-exit", str(idle_exit_s)]
        if not use_cache:
            argv.append("--no-result-cache")
        children.append(Child(f"evaluator worker {slot.index}", argv, worker_env(slot)))
    return children


def slots_for(workers: str, device: str) -> list[WorkerSlot]:
    """The worker plan for `--workers` and the configured evaluator device (auto | cpu | cuda)."""
    gpus = [] if device == "cpu" else visible_gpus()
    if device == "cuda" and not gpus:
        raise ValueError("evaluator device 'cuda' requested but no GPU is visible (CUDA_VISIBLE_DEVICES, nvidia-smi -L)")
    return plan_workers(workers, gpus)


def run_workers(workers: str, config, *, idle_exit_s: float | None = None, use_cache: bool = True) -> int:
    try:
        slots = slots_for(workers, config.evaluator.device)
    except ValueError as exc:
        print(f"evaluator workers: {exc}", file=sys.stderr)
        return 2
    print(f"evaluator: {len(slots)} workers in group 'evaluator' on {config.log.url}: "
          + ", ".join(f"{s.index}->{s.describe()}" for s in slots), flush=True)
    # A worker that dies is restarted forever (with the growing pause): the group covers its partitions meanwhile.
    return asyncio.run(supervise(_children(slots, config, idle_exit_s, use_cache)))
