"""`kernelzero serve projector`: project the log into DuckDB continuously and publish `frontier.snapshot` events.

The service is sync.py's Projector on the one stage host (kernelzero/stage.py `host_stage`),
plus a snapshot at the head of the log: one goes out when a poll comes back short of
`batch_records` (the projector has caught up with the log) and at least `snapshot_every` new
evaluations arrived since the last one (and once after start, when there are any evaluations),
so a long backlog produces one snapshot, not thousands. The snapshot commits with that poll's
offsets. The service holds the DuckDB file for writing: other commands read it only while it is
stopped.
"""

from __future__ import annotations

import argparse
import logging
from contextlib import asynccontextmanager

import anyio
import msgspec

from kernelzero.analytics.frontier import frontier_snapshot
from kernelzero.analytics.projection import ApplyStats, Projection
from kernelzero.analytics.sync import Projector
from kernelzero.analytics.views import install_views
from kernelzero.config import AnalyticsConfig, Config
from kernelzero.log import EventLog
from kernelzero.schemas import Event, make_event
from kernelzero.stage import host_stage

PRODUCER = "projector"
logger = logging.getLogger("kernelzero.analytics")


class ProjectorStats(msgspec.Struct):
    projected: ApplyStats = msgspec.field(default_factory=ApplyStats)
    snapshots: int = 0


class SnapshotProjector(Projector):
    """The Projector that publishes a frontier snapshot at the head of the log; counts into `stats`."""

    def __init__(self, log: EventLog, projection: Projection, settings: AnalyticsConfig, stats: ProjectorStats):
        super().__init__(log, projection, batch_records=settings.batch_records)
        self.settings = settings
        self.stats = stats
        self.applied = stats.projected
        self.pending = projection.con.execute("SELECT count(*) FROM evaluations").fetchone()[0] > 0
        self.evaluations_seen = self.applied.evaluations  # as of the last snapshot

    async def at_head(self) -> list[Event]:
        new_evaluations = self.applied.evaluations - self.evaluations_seen
        if not (self.pending or new_evaluations >= self.settings.snapshot_every):
            return []
        # off the event loop, as the projection's batches are: a Kafka consumer's heartbeats run on it
        snapshot = await anyio.to_thread.run_sync(frontier_snapshot, self.projection.con, self.settings)
        self.pending, self.evaluations_seen = False, self.applied.evaluations
        self.stats.snapshots += 1
        logger.info("publishing a frontier snapshot with %d entries", len(snapshot.entries))
        return [make_event(snapshot, correlation_id="frontier", producer=PRODUCER)]


async def run_projector(config: Config, *, idle_exit_s: float | None = None) -> ProjectorStats:
    """Project and publish until cancelled, or until nothing arrived for `idle_exit_s` seconds."""
    settings = config.analytics
    stats = ProjectorStats()

    @asynccontextmanager
    async def stage(log: EventLog):
        with Projection(settings.db) as projection:
            install_views(projection.con, settings)
            yield SnapshotProjector(log, projection, settings, stats)

    await host_stage(config.log, stage, idle_exit_s=idle_exit_s)
    return stats


def serve(args: argparse.Namespace, config: Config) -> int:
    stats = anyio.run(lambda: run_projector(config, idle_exit_s=getattr(args, "idle_exit", None)))
    logger.info("projector stopped: %s", stats)
    return 0
