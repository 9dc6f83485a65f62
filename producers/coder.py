"""The Coder stage: G kernel samples per accepted module as samples.generated events, weights swapped between groups; judges no kernel.

Consumes modules.accepted (sample a group), policy.updated (load the new weights once their
sha256 checks out) and, when repair_turns > 0, samples.evaluated (answer a failed sample of its
own with a repair turn). The stage runner handles one event at a time, so a weight swap always
falls between two groups, never inside one. Backpressure: the runner polls at most
`max_inflight_groups` records at a time and polls again only after their samples are committed.
"""

from __future__ import annotations

import collections
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

import anyio
import msgspec

from kernelzero.codeblocks import last_python_block
from kernelzero.config import CoderConfig
from kernelzero.coder_prompts import Attempt, prompt_hash, render_coder_prompt
from kernelzero.producers.generation import Completion, Generator, uri_to_path
from kernelzero.schemas import (
    UNCHARGED_VERDICTS, Event, ModuleAccepted, PolicyUpdated, SampleEvaluated, SampleGenerated, make_event, uuid7,
)

logger = logging.getLogger("kernelzero.coder")

PRODUCER = "coder"
MAX_REMEMBERED_SAMPLES = 50_000  # samples kept for repair turns; the oldest are forgotten first


class PolicyHashMismatch(RuntimeError):
    """The weights at a policy.updated URI do not hash to the event's sha256 (partial copy, tampering, wrong path)."""


class Remembered(msgspec.Struct, kw_only=True):
    """What a repair turn needs to know about one of our samples."""

    module: ModuleAccepted
    attempts: list[Attempt]  # earlier turns' attempts, each with its verdict
    source: str | None
    turn: int


def sample_events(
    module: ModuleAccepted,
    completions: Sequence[Completion],
    *,
    prompt: str,
    target: str,
    temperature: float,
    policy_version: int,
    causation_id: str,
    turn: int = 0,
    producer: str = PRODUCER,
) -> list[Event]:
    """One samples.generated event per completion; an answer without a ModelNew block gets source None, reason no_code."""
    digest = prompt_hash(prompt)
    events = []
    for index, completion in enumerate(completions):
        source = last_python_block(completion.text, "ModelNew")
        payload = SampleGenerated(
            sample_id=uuid7(), module_id=module.module_id, backend=target, source=source,
            problem_source=module.source, reason="" if source is not None else "no_code",
            group_size=len(completions), group_index=index, turn=turn, prompt_hash=digest,
            prompt_token_ids=completion.prompt_token_ids, token_ids=completion.token_ids,
            logprobs=completion.logprobs, temperature=temperature, apis=module.apis, level=module.level,
        )
        events.append(make_event(
            payload, correlation_id=module.module_id, producer=producer, causation_id=causation_id,
            policy_version=policy_version,
        ))
    return events


async def verify_weights(uri: str, sha256: str) -> str:
    """The local path of `uri` once its content hash equals `sha256`; raises PolicyHashMismatch otherwise."""
    from kernelzero.models import weights_sha256

    path = uri_to_path(uri)
    if not Path(path).exists():
        raise PolicyHashMismatch(f"policy weights {uri} do not exist on this machine")
    actual = await anyio.to_thread.run_sync(weights_sha256, path)
    if actual != sha256:
        raise PolicyHashMismatch(f"policy weights {uri} hash to {actual}, the event says {sha256}")
    return path


class CoderStage:
    """The Coder as a stage: `handle` turns one event into the events it causes."""

    name = "coder"

    def __init__(self, generator: Generator, config: CoderConfig, *, producer: str = PRODUCER) -> None:
        self.generator = generator
        self.config = config
        self.producer = producer
        self.topics: tuple[str, ...] = ("modules.accepted", "policy.updated")
        if config.repair_turns > 0:
            self.topics += ("samples.evaluated",)
        self._remembered: collections.OrderedDict[str, Remembered] = collections.OrderedDict()

    async def handle(self, event: Event) -> Sequence[Event]:
        payload = event.payload
        if isinstance(payload, ModuleAccepted):
            return await self.sample_group(payload, causation_id=event.event_id)
        if isinstance(payload, PolicyUpdated):
            await self.update_policy(payload)
        elif isinstance(payload, SampleEvaluated):
            return await self.repair(payload, causation_id=event.event_id)
        return []

    async def sample_group(
        self, module: ModuleAccepted, *, causation_id: str, attempts: Sequence[Attempt] = (), n: int | None = None,
    ) -> list[Event]:
        """G samples (or `n`) of one module, all under the same policy version."""
        cfg = self.config
        prompt = render_coder_prompt(module.source, cfg.target, attempts)
        version = self.generator.policy_version
        [completions] = await self.generator.generate(
            [prompt], n or cfg.group_size, temperature=cfg.temperature, top_p=cfg.top_p, max_tokens=cfg.max_tokens,
        )
        events = sample_events(
            module, completions, prompt=prompt, target=cfg.target, temperature=cfg.temperature,
            policy_version=version, causation_id=causation_id, turn=len(attempts), producer=self.producer,
        )
        if cfg.repair_turns > 0:
            for e in events:
                self._remember(e.payload.sample_id, Remembered(
                    module=module, attempts=list(attempts), source=e.payload.source, turn=len(attempts),
                ))
        return events

    async def update_policy(self, update: PolicyUpdated) -> bool:
        """Load the update's weights if they are newer and verify; False when skipped (other role, not newer)."""
        if update.role != "coder" or update.version <= self.generator.policy_version:
            return False
        path = await verify_weights(update.uri, update.sha256)
        await self.generator.load_weights(path, update.version)
        logger.info("coder now samples with policy version %d from %s", update.version, path)
        return True

    async def repair(self, evaluated: SampleEvaluated, *, causation_id: str) -> list[Event]:
        """One repair sample for a failed sample of ours whose turn is below repair_turns.

        A sample the evaluator could not judge (its own error, an unusable problem) failed through
        no fault of its code: there is nothing to repair.
        """
        remembered = self._remembered.pop(evaluated.sample_id, None)
        if remembered is None or evaluated.verdict in ("correct", *UNCHARGED_VERDICTS) or \
                remembered.turn >= self.config.repair_turns:
            return []
        attempt = Attempt(
            source=remembered.source, verdict=evaluated.verdict, reason=evaluated.reason,
            log="\n".join(f"{k}: {v}" for k, v in sorted(evaluated.evidence.items())),
        )
        return await self.sample_group(
            remembered.module, causation_id=causation_id, attempts=[*remembered.attempts, attempt], n=1,
        )

    def _remember(self, sample_id: str, remembered: Remembered) -> None:
        self._remembered[sample_id] = remembered
        while len(self._remembered) > MAX_REMEMBERED_SAMPLES:
            self._remembered.popitem(last=False)


async def latest_policy(log: Any, role: str = "coder", timeout_s: float = 30.0) -> list[PolicyUpdated]:
    """Every policy.updated of `role` on the log, newest version first (read by a throwaway consumer group)."""
    from kernelzero.schemas import DecodeError, decode

    ends = await log.end_offsets("policy.updated")
    updates: list[PolicyUpdated] = []
    seen: dict[int, int] = {}
    with anyio.move_on_after(timeout_s):
        async with await log.consumer(f"coder.policy-scan.{uuid7()}", ["policy.updated"]) as consumer:
            while any(seen.get(p, 0) < end for p, end in ends.items()):
                for record in await consumer.poll(max_records=500, timeout_s=0.5):
                    seen[record.partition] = record.offset + 1
                    try:
                        payload = decode(record.value).payload
                    except DecodeError:
                        continue  # the stage itself dead-letters it when it reads the record
                    if isinstance(payload, PolicyUpdated) and payload.role == role:
                        updates.append(payload)
    return sorted(updates, key=lambda u: u.version, reverse=True)


async def catch_up(stage: CoderStage, log: Any) -> int:
    """Load the newest coder policy whose weights verify, so a restarted Coder does not sample an old one."""
    for update in await latest_policy(log):
        try:
            await stage.update_policy(update)
            break
        except PolicyHashMismatch as exc:
            logger.error("skipping policy version %d at start: %s", update.version, exc)
    return stage.generator.policy_version


async def run(config: Any, idle_exit_s: float | None = None) -> int:
    from kernelzero.log import open_log
    from kernelzero.producers.generation import make_generator
    from kernelzero.stage import run_stage

    generator = await anyio.to_thread.run_sync(make_generator, config.coder)
    log = await open_log(config.log.url)
    try:
        stage = CoderStage(generator, config.coder)
        version = await catch_up(stage, log)
        print(f"coder: {config.coder.backend} {config.coder.model}, target {config.coder.target}, "
              f"policy version {version}, consuming {', '.join(stage.topics)}", file=sys.stderr)
        stats = await run_stage(
            log, stage, idle_exit_s=idle_exit_s, max_records=config.coder.max_inflight_groups,
            session_timeout_s=config.log.session_timeout_s,
        )
        print(f"coder: consumed {stats.consumed}, produced {stats.produced}, "
              f"dead-lettered {stats.dead_lettered}", file=sys.stderr)
        return 0
    finally:
        await generator.close()
        await log.close()


def serve(args, config) -> int:
    """`kernelzero serve coder`: run the Coder against the configured log until interrupted (or idle)."""
    return anyio.run(run, config, getattr(args, "idle_exit", None))
