"""`kernelzero serve evaluator`: samples.generated -> EvaluatorPool -> samples.evaluated; the library knows nothing of this.

A sample without code (source None) is answered without running anything: verdict
`compile_error`, reason `no_code` (the coder's own reason, when it gave one, goes to evidence).
A sample whose problem is unusable (ProblemFailed) is not the coder's fault: the handler raises
and the stage runner dead-letters it with the reason, so no reward is made up for it.
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from kernelzero.gpu_workers.pool import EvaluatorPool
from kernelzero.gpu_workers.result import EvalResult
from kernelzero.schemas import Event, SampleEvaluated, SampleGenerated, make_event


class EvaluatorStage:
    name = "evaluator"
    topics: Sequence[str] = ("samples.generated",)

    def __init__(self, pool: EvaluatorPool):
        self.pool = pool

    async def handle(self, event: Event) -> Sequence[Event]:
        sample: SampleGenerated = event.payload
        if sample.source is None:
            result = EvalResult(verdict="compile_error", reason="no_code",
                                evidence={"coder_reason": sample.reason} if sample.reason else {},
                                device=self.pool.device_type, gpu=self.pool.gpu)
        else:
            result = await self.pool.evaluate(sample.problem_source, sample.source)
        payload = SampleEvaluated(sample_id=sample.sample_id, module_id=sample.module_id, backend=sample.backend,
                                  apis=sample.apis, level=sample.level, group_size=sample.group_size,
                                  **msgspec.structs.asdict(result))
        return [make_event(payload, correlation_id=event.envelope.correlation_id, producer=self.name,
                           causation_id=event.event_id, policy_version=event.envelope.policy_version)]


async def run_evaluator(log_url: str, config, *, idle_exit_s: float | None = None, device: str | None = None):
    from kernelzero.log import open_log
    from kernelzero.stage import run_stage
    log = await open_log(log_url)
    try:
        async with EvaluatorPool(config.evaluator, device=device) as pool:
            return await run_stage(log, EvaluatorStage(pool), idle_exit_s=idle_exit_s,
                                   session_timeout_s=config.log.session_timeout_s)
    finally:
        await log.close()


def serve(args, config) -> int:
    import anyio
    stats = anyio.run(lambda: run_evaluator(config.log.url, config, idle_exit_s=getattr(args, "idle_exit", None)))
    print(f"evaluator: consumed {stats.consumed}, produced {stats.produced}, dead-lettered {stats.dead_lettered}")
    return 0
