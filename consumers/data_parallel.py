"""Data parallelism for the policy update: one process per GPU under torchrun or `accelerate launch`.

Every rank holds the whole batch and trains on its slice (`shard`); gradients are summed across
ranks and every loss is divided by the batch's global token count, so a step equals one process
stepping on the whole batch, however unevenly the tokens fall. Only rank 0 reads the event log
and publishes: it sends each step's batch to the others (`Leader`), which wait for it (`follow`).
While rank 0 waits for data it pings the others, so an idle pipeline never trips the collective
timeout. It does NOT survive a rank dying: the others fail at that timeout.
"""

from __future__ import annotations

import datetime
import logging
import threading
from typing import Any, Sequence

import msgspec
import torch
import torch.distributed as dist

from kernelzero.config import LaunchRanks, launch_ranks
from kernelzero.schemas.messages import RankOrder, RankStep, RankStop, RankWait, TrainingSample

logger = logging.getLogger("kernelzero.trainer")

_TURN = threading.Lock()  # rank 0's broadcasts (steps, pings, stop) never interleave: every rank sees one order


def position() -> tuple[int, int]:
    """(rank, world size) of this process; (0, 1) outside a distributed launch."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def start(device: str, timeout_s: float) -> LaunchRanks:
    """Join the launcher's process group (NCCL on GPUs, gloo on the CPU) and pick this rank's GPU."""
    ranks = launch_ranks()
    if ranks.world_size == 1 or dist.is_initialized():
        return ranks
    on_gpu = device != "cpu" and torch.cuda.is_available()
    if on_gpu:
        torch.cuda.set_device(ranks.local_rank)
    dist.init_process_group("nccl" if on_gpu else "gloo", timeout=datetime.timedelta(seconds=timeout_s))
    return ranks


def finish() -> None:
    """Leave the process group. Without it rank 0 aborted at exit in CI ("terminate called without an
    active exception", SIGABRT): the group's C++ threads were still joinable when the interpreter ended."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def shard(items: Sequence[Any]) -> list[Any]:
    rank, world = position()
    return list(items[rank::world])


def broadcast_parameters(params: Sequence[torch.Tensor]) -> None:
    """Every rank takes rank 0's values (a LoRA adapter is initialised randomly on each)."""
    if position()[1] > 1:
        for p in params:
            dist.broadcast(p.data, src=0)


def sum_gradients(params: Sequence[torch.Tensor]) -> None:
    """Sum gradients over ranks in one flat buffer per dtype; a rank with no tokens contributes zeros."""
    if position()[1] == 1:
        return
    for p in params:
        if p.grad is None:
            p.grad = torch.zeros_like(p)
    by_dtype: dict[torch.dtype, list[torch.Tensor]] = {}
    for p in params:
        by_dtype.setdefault(p.grad.dtype, []).append(p.grad)
    for grads in by_dtype.values():
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def sum_metrics(totals: dict[str, float], device: torch.device) -> dict[str, float]:
    if position()[1] == 1:
        return totals
    names = sorted(totals)
    values = torch.tensor([totals[n] for n in names], dtype=torch.float64, device=device)
    dist.all_reduce(values)
    return dict(zip(names, values.tolist()))


def _broadcast(order: RankOrder | None) -> RankOrder:
    """Rank 0 sends `order`, the others (passing None) receive it: msgpack bytes, decoded as a RankOrder."""
    box = [None if order is None else msgspec.msgpack.encode(order)]
    dist.broadcast_object_list(box, src=0)
    return order if order is not None else msgspec.msgpack.decode(box[0], type=RankOrder)


class Leader:
    """Rank 0's learner: each step's batch goes to every rank first, then all step together."""

    def __init__(self, learner: Any, role: str) -> None:
        self.learner, self.role = learner, role

    def step(self, samples: Sequence[TrainingSample]) -> dict[str, float]:
        with _TURN:
            _broadcast(RankStep(self.role, list(samples)))
            return self.learner.step(samples)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.learner, name)


def lead(learners: dict[str, Any]) -> dict[str, Any]:
    """Rank 0's learners wrapped as Leaders (unchanged in a single process)."""
    if position()[1] == 1:
        return learners
    return {role: None if learner is None else Leader(learner, role) for role, learner in learners.items()}


def stop_followers() -> None:
    if position()[1] > 1:
        with _TURN:
            _broadcast(RankStop())


def ping_followers() -> None:
    """Rank 0 between steps: the others, blocked in a broadcast, would fail after the collective timeout."""
    if position()[1] > 1 and _TURN.acquire(blocking=False):  # a step in progress already keeps them busy
        try:
            _broadcast(RankWait())
        finally:
            _TURN.release()


def follow(learners: dict[str, Any]) -> int:
    """Ranks above 0: step on every batch rank 0 sends until it says stop; returns the steps taken."""
    steps = 0
    while not isinstance(order := _broadcast(None), RankStop):
        if isinstance(order, RankWait):
            continue
        try:
            learners[order.role].step(order.samples)
        except ValueError as exc:  # a batch check, failed on rank 0 too before any collective: it carries on
            logger.warning("rank %d: %s step refused: %s", position()[0], order.role, exc)
            continue
        steps += 1
    return steps
