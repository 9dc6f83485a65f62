"""`kernelzero serve projector`: project the log into DuckDB continuously and publish `frontier.snapshot` events.

A snapshot goes out once the projector has caught up with the log and at least
`snapshot_every` new evaluations arrived since the last one (and once after start, when there
are any evaluations), so a long backlog produces one snapshot, not thousands. The service
holds the DuckDB file for writing: other commands read it only while it is stopped.
"""

from __future__ import annotations

import argparse
import logging
import time

import anyio
import msgspec

from kernelzero.analytics.frontier import frontier_snapshot
from kernelzero.analytics.projection import ApplyStats, Projection
from kernelzero.analytics.sync import Projector
from kernelzero.analytics.views import install_views
from kernelzero.config import Config
from kernelzero.log import open_log
from kernelzero.schemas import make_event

PRODUCER = "projector"
logger = logging.getLogger("kernelzero.analytics")


class ProjectorStats(msgspec.Struct):
    projected: ApplyStats = msgspec.field(default_factory=ApplyStats)
    snapshots: int = 0


async def run_projector(config: Config, *, idle_exit_s: float | None = None) -> ProjectorStats:
    """Project and publish until cancelled, or until nothing arrived for `idle_exit_s` seconds."""
    from kernelzero.stage import publish

    settings = config.analytics
    stats = ProjectorStats()
    async with await open_log(config.log.url) as log:
        with Projection(settings.db) as projection:
            install_views(projection.con, settings)
            pending = projection.con.execute("SELECT count(*) FROM evaluations").fetchone()[0] > 0
            new_evaluations = 0
            idle_since = time.monotonic()
            async with Projector(log, projection, group=settings.group,
                                 batch_records=settings.batch_records) as projector:
                while True:
                    step = await projector.step(timeout_s=0.5)
                    stats.projected.add(step)
                    new_evaluations += step.evaluations
                    at_head = step.records < settings.batch_records
                    if at_head and (pending or new_evaluations >= settings.snapshot_every):
                        snapshot = frontier_snapshot(projection.con, settings)
                        event = make_event(snapshot, correlation_id="frontier", producer=PRODUCER)
                        await publish(log, [event], PRODUCER)
                        stats.snapshots += 1
                        pending, new_evaluations = False, 0
                        logger.info("published frontier snapshot with %d entries", len(snapshot.entries))
                    if step.records:
                        idle_since = time.monotonic()
                    elif idle_exit_s is not None and time.monotonic() - idle_since >= idle_exit_s:
                        return stats


def serve(args: argparse.Namespace, config: Config) -> int:
    stats = anyio.run(lambda: run_projector(config, idle_exit_s=getattr(args, "idle_exit", None)))
    logger.info("projector stopped: %s", stats)
    return 0
