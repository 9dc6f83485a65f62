"""`kernelzero serve trainer`: groups, CA-GRPO Coder steps and Proposer steps in alternation, on the event log.

Consumes samples.generated and samples.evaluated (Coder groups), modules.proposed,
modules.accepted and modules.rejected (Proposer rewards); produces groups.scored and
policy.updated. Alternation: `coder_steps` Coder updates, then `proposer_steps` Proposer
updates, each taken when its batch is full (`groups_per_step` informative Coder groups,
`proposer_batch` scored proposals). A role whose batch is not full while the other's is yields
its turn (`yielded_turns`), so neither learner ever waits on the other. A batch with nothing to
train (every sample stale, or every advantage 0) is dropped without a step, so every published
policy version changed the weights. Without a trainable Proposer (backend "synth" or no model)
only the Coder trains. Groups whose deadline passed close even when no event arrives: the stage host asks
(`at_head`) whenever it finds the head of the log, and what they publish commits with its offsets.
It does not persist in-flight groups: a restart resumes the weights from the newest checkpoint
but forgets groups not yet scored. Training runs in a worker thread, so a long step delays but
does not block the event loop. Under torchrun or `accelerate launch` only rank 0 reads the log
and publishes; the other ranks take their slice of each step (consumers/data_parallel.py).
Every step's metrics carry the running counts of what was skipped (`skipped_*`, `yielded_turns`).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path
from typing import Any, Sequence

import anyio
import msgspec

from kernelzero.config import Config
from kernelzero.consumers import data_parallel
from kernelzero.consumers.groups import GroupAssembler, ClosedGroup
from kernelzero.consumers.proposer_trainer import ProposerRewards
from kernelzero.schemas import Event
from kernelzero.schemas.messages import TrainingSample

logger = logging.getLogger("kernelzero.trainer")

TOPICS = ("samples.generated", "samples.evaluated", "modules.proposed", "modules.accepted", "modules.rejected")


class Alternation(msgspec.Struct, kw_only=True):
    """Whose turn it is: `coder_steps` Coder updates, then `proposer_steps` Proposer updates, and so on."""

    coder_steps: int
    proposer_steps: int
    role: str = "coder"
    done: int = 0

    def _quota(self, role: str) -> int:
        return self.coder_steps if role == "coder" else self.proposer_steps

    def other(self) -> str:
        return "proposer" if self.role == "coder" else "coder"

    def advance(self) -> None:
        """The role on turn took a step."""
        self.done += 1
        if self.done >= self._quota(self.role):
            self.hand_over()

    def hand_over(self) -> bool:
        """Give the turn to the other role (when it trains at all); False when it does not."""
        if self._quota(self.other()) <= 0:
            self.done = 0
            return False
        self.role, self.done = self.other(), 0
        return True


class TrainerStage:
    """The Stage run by `run_stage`; learners are PolicyLearner objects (None: that role does not train)."""

    name = "trainer"
    topics = TOPICS

    def __init__(self, config: Config, coder: Any, proposer: Any = None) -> None:
        trainer = config.trainer
        if coder is None and proposer is None:
            raise ValueError("the trainer needs at least one learner (coder or proposer)")
        self.config = config
        self.learners = {"coder": coder, "proposer": proposer}
        version = coder.version if coder is not None else 0
        self.groups = GroupAssembler(trainer, current_version=version, producer=self.name)
        self.proposals = ProposerRewards(config.analytics, trainer)
        self.alternation = Alternation(
            coder_steps=trainer.coder_steps if coder is not None else 0,
            proposer_steps=trainer.proposer_steps if proposer is not None else 0,
            role="coder" if coder is not None and trainer.coder_steps > 0 else "proposer",
        )
        self.coder_batch: list[TrainingSample] = []
        self.coder_groups = 0
        self.counts: Counter[str] = Counter()  # skipped batches and yielded turns, reported with every step
        self.metrics: list[dict[str, float]] = []  # of every step taken, in order
        self._lock = anyio.Lock()

    async def handle(self, event: Event) -> Sequence[Event]:
        scored = self.groups.add(event, time.monotonic())
        self.proposals.add(event)
        return await self._after(scored)

    async def at_head(self) -> list[Event]:
        """Close groups whose deadline passed, though no event came: the host asks after every poll that found the
        log's head, and commits what this publishes with that poll's offsets."""
        return await self._after(self.groups.expire(time.monotonic()))

    async def _after(self, scored: list[ClosedGroup]) -> list[Event]:
        out = [group.event for group in scored]
        for group in scored:
            self.proposals.add(group.event)
            if group.training:
                self.coder_batch += group.training
                self.coder_groups += 1
        async with self._lock:
            while (update := await self._train_if_ready()) is not None:
                out.append(update)
        return out

    def _ready(self, role: str) -> bool:
        trainer = self.config.trainer
        if role == "coder":
            return self.coder_groups >= trainer.groups_per_step
        return self.proposals.ready() >= trainer.proposer_batch

    def _take(self, role: str) -> list[TrainingSample]:
        if role == "coder":
            batch, self.coder_batch, self.coder_groups = self.coder_batch, [], 0
            return batch
        return self.proposals.take_batch(self.config.trainer.proposer_batch)

    async def _train_if_ready(self) -> Event | None:
        """At most one step: the role on turn's, or the other's when only the other has a full batch."""
        while True:
            role = self.alternation.role
            if not self._ready(role):
                if self._ready(self.alternation.other()) and self.alternation.hand_over():
                    self.counts["yielded_turns"] += 1
                    continue
                return None
            learner = self.learners[role]
            batch, stale = learner.trainable(self._take(role))
            if stale:
                self.counts[f"skipped_stale_{role}_samples"] += stale
            if not any(s.advantage != 0.0 for s in batch):
                self.counts[f"skipped_{role}_batches"] += 1
                logger.info("%s batch had nothing to train (stale or zero advantage); no step", role)
                continue
            return await self._step(role, learner, batch)

    async def _step(self, role: str, learner: Any, batch: list[TrainingSample]) -> Event:
        metrics = await anyio.to_thread.run_sync(learner.step, batch)
        metrics.update({name: float(count) for name, count in self.counts.items()})
        metrics["skipped_zero_variance_groups"] = float(self.groups.dropped["zero_variance_groups"])
        root = Path(self.config.trainer.checkpoint_dir) / role
        path, sha256 = await anyio.to_thread.run_sync(learner.save, root)
        if role == "coder":
            self.groups.current_version = learner.version
        self.alternation.advance()
        self.metrics.append(metrics)
        logger.info("%s step -> version %d: %s", role, learner.version, metrics)
        return learner.update_event(path, sha256, metrics, producer=self.name)


def load_learners(config: Config) -> tuple[Any, Any]:
    """The Coder's learner, and the Proposer's when it is a trainable local model (else None)."""
    from kernelzero.consumers.policy_update import PolicyLearner

    root = Path(config.trainer.checkpoint_dir)
    coder = PolicyLearner.from_directory(
        config.coder.model, config.trainer, role="coder", device=config.trainer.device, checkpoint_root=root / "coder",
    )
    proposer = None
    # an openai-served Proposer trains too when its model is a local directory (vLLM names a model by its path)
    if config.proposer.backend != "synth" and config.proposer.model and Path(config.proposer.model).is_dir():
        proposer = PolicyLearner.from_directory(
            config.proposer.model, config.trainer, role="proposer", device=config.trainer.device,
            checkpoint_root=root / "proposer",
        )
    return coder, proposer


async def _ping_followers(period_s: float) -> None:
    while True:
        await anyio.sleep(period_s)
        await anyio.to_thread.run_sync(data_parallel.ping_followers)


async def run(config: Config, idle_exit_s: float | None = None, *, learners: tuple[Any, Any] | None = None):
    """Serve until cancelled or idle; returns the StageStats and the stage (for its metrics)."""
    from contextlib import asynccontextmanager

    from kernelzero.stage import host_stage

    coder, proposer = learners if learners is not None else load_learners(config)
    trainer = TrainerStage(config, coder, proposer)

    @asynccontextmanager
    async def stage(log):
        async with anyio.create_task_group() as tasks:
            if data_parallel.position()[1] > 1:
                tasks.start_soon(_ping_followers, config.trainer.collective_timeout_s / 4)
            try:
                yield trainer
            finally:
                tasks.cancel_scope.cancel()

    stats = await host_stage(config.log, stage, idle_exit_s=idle_exit_s)
    return stats, trainer


def serve(args, config: Config) -> int:
    """`kernelzero serve trainer`; under torchrun or `accelerate launch`, rank 0 serves and the others follow."""
    ranks = data_parallel.start(config.trainer.device, config.trainer.collective_timeout_s)
    coder, proposer = load_learners(config)
    if ranks.rank > 0:
        try:
            steps = data_parallel.follow({"coder": coder, "proposer": proposer})
        finally:
            data_parallel.finish()
        print(f"trainer rank {ranks.rank}: took part in {steps} steps")
        return 0
    leaders = data_parallel.lead({"coder": coder, "proposer": proposer})
    try:
        stats, stage = anyio.run(lambda: run(config, getattr(args, "idle_exit", None),
                                             learners=(leaders["coder"], leaders["proposer"])))
    finally:
        data_parallel.stop_followers()
        data_parallel.finish()
    print(f"trainer: consumed {stats.consumed}, produced {stats.produced}, steps {len(stage.metrics)}, "
          f"dropped {dict(stage.groups.dropped)}, ranks {ranks.world_size}")
    return 0
