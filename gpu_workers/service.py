"""`kernelzero serve evaluator`: samples.generated -> EvaluatorPool -> samples.evaluated; the library knows nothing of this.

A sample without code (source None) is answered without running anything: verdict
`compile_error`, reason `no_code` (the coder's own reason, when it gave one, goes to evidence).
A sample whose problem is unusable, or that the evaluator itself failed on, is answered with the
verdict `problem_error` or `evaluator_error` (the reason and evidence say why): nobody's sample
to charge, and consumers must leave such verdicts out of rewards (schemas.UNCHARGED_VERDICTS).
Several service processes in the one group "evaluator" share the partitions: `kernelzero serve evaluator
--workers auto|N` starts and supervises them (fleet.py), each `python -m kernelzero.gpu_workers.service --worker
...` (`worker_main`).
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Callable, Sequence

import msgspec

from kernelzero.gpu_workers.pool import EvaluatorPool
from kernelzero.gpu_workers.result import evaluation
from kernelzero.schemas import Event, SampleEvaluated, SampleGenerated, make_event


# a poll takes this many samples a worker, committed together: more would wait for a poll's slowest job less often
# (bench/evaluator_polls.py; no change with the CPU's two workers), but a process sees a rebalance only at its next
# poll, so a survivor takes over a dead process's partitions later (tests/evaluator/test_scale_out.py failed at 4)
POLL_ROUNDS = 1


class EvaluatorStage:
    name = "evaluator"
    topics: Sequence[str] = ("samples.generated",)

    def __init__(self, pool: EvaluatorPool, producer: str = "evaluator", poll_rounds: int = POLL_ROUNDS):
        self.pool = pool
        self.producer = producer  # names the worker in envelopes; the group stays "evaluator"
        self.concurrency = pool.workers
        self.max_records = poll_rounds * pool.workers

    async def handle(self, event: Event) -> Sequence[Event]:
        sample: SampleGenerated = event.payload
        if sample.source is None:
            result = evaluation("compile_error", "no_code",
                                evidence={"coder_reason": sample.reason} if sample.reason else {},
                                device=self.pool.device_type, gpu=self.pool.gpu)
        else:
            timed = sample.split == "train" or self.pool.config.time_heldout
            result = await self.pool.evaluate(sample.problem_source, sample.source, timed=timed)
        payload = SampleEvaluated(sample_id=sample.sample_id, module_id=sample.module_id, backend=sample.backend,
                                  apis=sample.apis, level=sample.level, group_size=sample.group_size, turn=sample.turn,
                                  split=sample.split,
                                  **msgspec.structs.asdict(result))
        return [make_event(payload, correlation_id=event.envelope.correlation_id, producer=self.producer,
                           causation_id=event.event_id, policy_version=event.envelope.policy_version)]


def evaluator_stage(config, *, device: str | None = None, use_cache: bool = True,
                    on_ready: Callable[[], None] | None = None, producer: str = "evaluator", gpu_processes: int = 1):
    """The stage's opener for kernelzero/stage.py `host_stage`: an EvaluatorStage over a pool started for it."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def stage(log):
        async with EvaluatorPool(config.evaluator, device=device, use_cache=use_cache,
                                 gpu_processes=gpu_processes) as pool:
            if on_ready is not None:
                on_ready()
            yield EvaluatorStage(pool, producer)

    return stage


async def run_evaluator(config, *, idle_exit_s: float | None = None, device: str | None = None,
                        use_cache: bool = True, on_ready: Callable[[], None] | None = None,
                        producer: str = "evaluator", gpu_processes: int = 1):
    """Consume samples.generated as one member of group "evaluator" until idle (or forever); returns StageStats.

    Records are taken as many at a time as the pool has workers and all evaluated at once, so a
    commit follows each round: a worker that dies loses (and the group redoes) one round at most.
    """
    from kernelzero.stage import host_stage

    return await host_stage(config.log, evaluator_stage(config, device=device, use_cache=use_cache, on_ready=on_ready,
                                                        producer=producer, gpu_processes=gpu_processes),
                            idle_exit_s=idle_exit_s)


def serve(args, config) -> int:
    """One process (a pool over every visible GPU), or with `--workers auto|N` one supervised process per worker."""
    idle_exit_s = getattr(args, "idle_exit", None)
    use_cache = not getattr(args, "no_result_cache", False)
    workers = getattr(args, "workers", None)
    if workers is not None:
        from kernelzero.gpu_workers.fleet import run_workers
        return run_workers(str(workers), config, idle_exit_s=idle_exit_s, use_cache=use_cache)
    import anyio
    stats = anyio.run(lambda: run_evaluator(config, idle_exit_s=idle_exit_s, use_cache=use_cache))
    print(f"evaluator: consumed {stats.consumed}, produced {stats.produced}, dead-lettered {stats.dead_lettered}")
    return 0


def worker_name(index: int) -> str:
    """The producer named in a worker's events: which worker, host and process evaluated a sample."""
    return f"evaluator/{index}@{socket.gethostname()}:{os.getpid()}"


def worker_main(argv: list[str]) -> int:
    """One worker of `serve --workers` (fleet.py starts it, its arguments say what the parent's configuration is)."""
    import argparse

    import anyio

    from kernelzero.config import Config

    parser = argparse.ArgumentParser(prog="python -m kernelzero.gpu_workers.service",
                                     description="one evaluator worker of `kernelzero serve evaluator --workers`")
    parser.add_argument("--worker", type=int, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--sections", required=True, help="the parent's [log] and [evaluator] as JSON")
    parser.add_argument("--gpu-processes", type=int, default=1)
    parser.add_argument("--idle-exit", type=float, default=None)
    parser.add_argument("--no-result-cache", action="store_true")
    args = parser.parse_args(argv)
    config = msgspec.json.decode(args.sections, type=Config)
    index = args.worker

    def ready() -> None:
        print(f"evaluator worker {index}: pid {os.getpid()} ready", flush=True)

    try:
        stats = anyio.run(lambda: run_evaluator(config, idle_exit_s=args.idle_exit, device=args.device,
                                                use_cache=not args.no_result_cache, on_ready=ready,
                                                producer=worker_name(index), gpu_processes=args.gpu_processes))
    except KeyboardInterrupt:  # the supervisor's stop: the group was left and the evaluator processes stopped
        print(f"evaluator worker {index}: pid {os.getpid()} stopped", flush=True)
        return 0
    print(f"evaluator worker {index}: pid {os.getpid()} consumed {stats.consumed}, produced {stats.produced}, "
          f"dead-lettered {stats.dead_lettered}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
