"""The Coder stage: G kernel samples per accepted module as samples.generated events, weights swapped between groups; judges no kernel.

Consumes modules.accepted (sample a group), policy.updated (load the new weights once their
sha256 checks out) and, when repair_turns > 0, samples.evaluated. A poll's events are handled in
order, the modules between two other events sampled in one generation (one per kind: sampled or
greedy), so a weight swap always falls between two groups, never inside one.
Backpressure: the runner polls at most `max_inflight_groups` records at a time and polls again
only after their samples are committed.

Repairs (a documented choice, docs/trainer.md): once every result of one of our groups has
arrived, each of its failed samples (a charged verdict other than `correct`) gets one repair
answer, all sampled together under one policy version, with that sample's earlier attempts and
verdicts in its prompt. They form the group of the next turn (group_size = the number of
repairs), so the trainer compares repairs with repairs. A group whose results never all arrive
gets no repairs, nor does a held-out module; what the Coder remembers is lost if it restarts.
"""

from __future__ import annotations

import collections
import logging
import sys
from typing import Any, Sequence

import anyio
import msgspec

from kernelzero.config import CoderConfig
from kernelzero.kit.codeblocks import last_python_block
from kernelzero.kit.coder_prompts import Attempt, render_coder_prompt
from kernelzero.kit.templates import prompt_hash
from kernelzero.producers.generation import Completion, Generator
from kernelzero.producers.policy import following_policy, load_update
from kernelzero.schemas import (
    UNCHARGED_VERDICTS, Event, ModuleAccepted, PolicyUpdated, SampleEvaluated, SampleGenerated, make_event, uuid7,
)

logger = logging.getLogger("kernelzero.coder")

PRODUCER = "coder"
MAX_REMEMBERED_GROUPS = 10_000  # groups kept for repair turns; the oldest are forgotten first


class Member(msgspec.Struct, kw_only=True):
    """One sample of a group waiting for its results: what its repair prompt needs."""

    attempts: list[Attempt]  # the sample's earlier turns, each with its verdict
    source: str | None


class PendingGroup(msgspec.Struct, kw_only=True):
    module: ModuleAccepted
    turn: int
    members: dict[str, Member]
    results: dict[str, SampleEvaluated] = {}


def sample_events(
    module: ModuleAccepted,
    completions: Sequence[Completion],
    *,
    prompts: Sequence[str],
    target: str,
    temperature: float,
    policy_version: int,
    causation_id: str,
    turn: int = 0,
    producer: str = PRODUCER,
) -> list[Event]:
    """One samples.generated event per completion (completion i answered prompts[i], or prompts[0] for all).

    An answer without a ModelNew block gets source None, reason no_code.
    """
    events = []
    for index, completion in enumerate(completions):
        source = last_python_block(completion.text, "ModelNew")
        payload = SampleGenerated(
            sample_id=uuid7(), module_id=module.module_id, backend=target, source=source,
            problem_source=module.source, reason="" if source is not None else "no_code",
            group_size=len(completions), group_index=index, turn=turn,
            prompt_hash=prompt_hash(prompts[index] if len(prompts) > 1 else prompts[0]),
            prompt_token_ids=completion.prompt_token_ids, token_ids=completion.token_ids,
            logprobs=completion.logprobs, temperature=temperature, apis=module.apis, level=module.level,
            split=module.split,
        )
        events.append(make_event(
            payload, correlation_id=module.module_id, producer=producer, causation_id=causation_id,
            policy_version=policy_version,
        ))
    return events


class CoderStage:
    """The Coder as a stage: `handle` turns one event into the events it causes."""

    name = "coder"

    def __init__(self, generator: Generator, config: CoderConfig, *, producer: str = PRODUCER) -> None:
        self.generator = generator
        self.config = config
        self.producer = producer
        self.max_records = config.max_inflight_groups
        self.topics: tuple[str, ...] = ("modules.accepted", "policy.updated")
        if config.repair_turns > 0:
            self.topics += ("samples.evaluated",)
        self._pending: collections.OrderedDict[str, PendingGroup] = collections.OrderedDict()
        self._group_of: dict[str, str] = {}  # sample_id -> pending group id

    async def handle(self, event: Event) -> Sequence[Event]:
        payload = event.payload
        if isinstance(payload, ModuleAccepted):
            return await self.sample_group(payload, causation_id=event.event_id)
        if isinstance(payload, PolicyUpdated):
            await self.update_policy(payload)
        elif isinstance(payload, SampleEvaluated):
            return await self.repair(payload, causation_id=event.event_id)
        return []

    async def handle_many(self, events: list[Event]) -> list[Sequence[Event]]:
        """`handle` of each event in order, the modules between two other events sampled together."""
        outputs: list[Sequence[Event]] = [[] for _ in events]
        modules: list[int] = []
        for index, event in enumerate(events):
            if isinstance(event.payload, ModuleAccepted):
                modules.append(index)
                continue
            await self._sample_groups(events, modules, outputs)
            modules = []
            outputs[index] = await self.handle(event)
        await self._sample_groups(events, modules, outputs)
        return outputs

    async def _sample_groups(self, events: list[Event], indices: list[int], outputs: list[Sequence[Event]]) -> None:
        """First-turn groups of the modules `events[indices]` into `outputs`: one generation for the sampled, one for
        the greedy (a generation has one temperature and one group size)."""
        for greedy in (False, True):
            chosen = [i for i in indices if events[i].payload.greedy == greedy]
            if not chosen:
                continue
            modules = [events[i].payload for i in chosen]
            prompts = [render_coder_prompt(m.source, self.config.target, style=self.config.prompt) for m in modules]
            version = self.generator.policy_version
            groups = await self._generate(prompts, 1 if greedy else self.config.group_size, greedy,
                                          [m.sampling_seed for m in modules])
            for i, module, prompt, group in zip(chosen, modules, prompts, groups):
                outputs[i] = self._group_events(module, [prompt], [[]], group, version, causation_id=events[i].event_id,
                                                turn=0)

    async def sample_group(self, module: ModuleAccepted, *, causation_id: str) -> list[Event]:
        """G first-turn samples of one module, all under the same policy version."""
        prompt = render_coder_prompt(module.source, self.config.target, style=self.config.prompt)
        n = 1 if module.greedy else self.config.group_size
        return await self._sample(module, [prompt], [[]], n, causation_id=causation_id, turn=0)

    async def _generate(self, prompts: list[str], n: int, greedy: bool,
                        seeds: list[int | None]) -> list[list[Completion]]:
        cfg = self.config
        return await self.generator.generate(prompts, n, temperature=0.0 if greedy else cfg.temperature,
                                             top_p=cfg.top_p, max_tokens=cfg.max_tokens, seeds=seeds)

    async def _sample(self, module: ModuleAccepted, prompts: list[str], histories: list[list[Attempt]], n: int,
                      *, causation_id: str, turn: int) -> list[Event]:
        version = self.generator.policy_version
        groups = await self._generate(prompts, n, module.greedy, [module.sampling_seed] * len(prompts))
        return self._group_events(module, prompts, histories, [c for group in groups for c in group], version,
                                  causation_id=causation_id, turn=turn)

    def _group_events(self, module: ModuleAccepted, prompts: list[str], histories: list[list[Attempt]],
                      completions: list[Completion], version: int, *, causation_id: str, turn: int) -> list[Event]:
        """The samples.generated events of one group (completion i answered prompts[i], or prompts[0] for all),
        remembered for its repairs."""
        cfg = self.config
        n = len(completions) // len(histories)
        temperature = 0.0 if module.greedy else cfg.temperature
        events = sample_events(
            module, completions, prompts=prompts, target=cfg.target, temperature=temperature,
            policy_version=version, causation_id=causation_id, turn=turn, producer=self.producer,
        )
        if turn < cfg.repair_turns and module.split == "train":
            owners = [histories[i // n] for i in range(len(completions))]
            self._remember(module, turn, {
                e.payload.sample_id: Member(attempts=history, source=e.payload.source)
                for e, history in zip(events, owners)
            })
        return events

    async def update_policy(self, update: PolicyUpdated) -> bool:
        """Load the update's weights if they are the Coder's, newer and verified; False when skipped."""
        return await load_update(self.generator, update, "coder")

    async def repair(self, evaluated: SampleEvaluated, *, causation_id: str) -> list[Event]:
        """The next turn's group once every result of one of our groups is in: one repair per failed sample."""
        group_id = self._group_of.pop(evaluated.sample_id, None)
        group = self._pending.get(group_id) if group_id else None
        if group is None:
            return []
        group.results[evaluated.sample_id] = evaluated
        if len(group.results) < len(group.members):
            return []
        del self._pending[group_id]
        failed = [(sid, r) for sid, r in group.results.items()
                  if r.verdict != "correct" and r.verdict not in UNCHARGED_VERDICTS]
        if not failed:
            return []
        histories = [[*group.members[sid].attempts, _attempt(group.members[sid].source, r)] for sid, r in failed]
        prompts = [render_coder_prompt(group.module.source, self.config.target, h, style=self.config.prompt)
                   for h in histories]
        return await self._sample(group.module, prompts, histories, 1, causation_id=causation_id, turn=group.turn + 1)

    def _remember(self, module: ModuleAccepted, turn: int, members: dict[str, Member]) -> None:
        group_id = uuid7()
        self._pending[group_id] = PendingGroup(module=module, turn=turn, members=members)
        self._group_of.update(dict.fromkeys(members, group_id))
        while len(self._pending) > MAX_REMEMBERED_GROUPS:
            _, forgotten = self._pending.popitem(last=False)
            for sample_id in forgotten.members:
                self._group_of.pop(sample_id, None)


def _attempt(source: str | None, result: SampleEvaluated) -> Attempt:
    return Attempt(source=source, verdict=result.verdict, reason=result.reason,
                   log="\n".join(f"{k}: {v}" for k, v in sorted(result.evidence.items())))


async def run(config: Any, idle_exit_s: float | None = None) -> int:
    from contextlib import asynccontextmanager

    from kernelzero.stage import host_stage

    @asynccontextmanager
    async def stage(log):
        async with following_policy(log, config.coder, PRODUCER) as generator:
            coder = CoderStage(generator, config.coder)
            print(f"coder: {config.coder.backend} {config.coder.model}, target {config.coder.target}, "
                  f"policy version {generator.policy_version}, consuming {', '.join(coder.topics)}", file=sys.stderr)
            yield coder

    stats = await host_stage(config.log, stage, idle_exit_s=idle_exit_s)
    print(f"coder: consumed {stats.consumed}, produced {stats.produced}, dead-lettered {stats.dead_lettered}",
          file=sys.stderr)
    return 0


def serve(args, config) -> int:
    """`kernelzero serve coder`: run the Coder against the configured log until interrupted (or idle)."""
    return anyio.run(run, config, getattr(args, "idle_exit", None))
