"""Following a role's policy on the log, the one way the Coder and the Proposer do: the newest verified policy when the stage starts (`following_policy`), then each policy.updated it consumes (`load_update`); it does not decide when to load.

Weights never travel through the log: an update names a path and a content hash, and nothing is
loaded unless the files hash to it. One rule for a mismatch: `load_update` raises
PolicyHashMismatch and the stage host dead-letters the event; catching up at start skips it (it is
dead-lettered when consumed). Callers load between batches, never while a `generate` of the same
generator runs.
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, AsyncIterator

import anyio

from kernelzero.config import GenerationConfig
from kernelzero.producers.generation import Generator, uri_to_path
from kernelzero.schemas import PolicyUpdated

logger = logging.getLogger("kernelzero.policy")


class PolicyHashMismatch(RuntimeError):
    """The weights at a policy.updated URI do not hash to the event's sha256 (partial copy, tampering, wrong path)."""


async def verify_weights(uri: str, sha256: str) -> str:
    """The local path of `uri` once its content hash equals `sha256`; raises PolicyHashMismatch otherwise."""
    from kernelzero.kit.models import weights_sha256

    path = uri_to_path(uri)
    if not Path(path).exists():
        raise PolicyHashMismatch(f"policy weights {uri} do not exist on this machine")
    actual = await anyio.to_thread.run_sync(weights_sha256, path)
    if actual != sha256:
        raise PolicyHashMismatch(f"policy weights {uri} hash to {actual}, the event says {sha256}")
    return path


async def load_update(generator: Generator, update: PolicyUpdated, role: str) -> bool:
    """Load the update's weights if they are `role`'s and newer than the generator's; False when skipped."""
    if update.role != role or update.version <= generator.policy_version:
        return False
    path = await verify_weights(update.uri, update.sha256)
    await generator.load_weights(path, update.version)
    logger.info("%s now samples with policy version %d from %s", role, update.version, path)
    return True


async def role_updates(log: Any, role: str) -> list[PolicyUpdated]:
    """Every policy.updated of `role` on the log, newest version first."""
    from kernelzero.stage import read_payloads

    updates = await read_payloads(log, "policy.updated", PolicyUpdated, reader=f"{role}.policy-scan")
    return sorted((u for u in updates if u.role == role), key=lambda u: u.version, reverse=True)


@asynccontextmanager
async def following_policy(log: Any, settings: GenerationConfig, role: str) -> AsyncIterator[Generator]:
    """The generator `settings` name, loaded with the newest `role` policy on the log that verifies; closed on exit.

    A stage opens it when it starts, then loads each later policy.updated it consumes with `load_update`."""
    from kernelzero.producers.backends import make_generator

    generator = await anyio.to_thread.run_sync(make_generator, settings)
    try:
        await catch_up(generator, log, role)
        yield generator
    finally:
        await generator.close()


async def catch_up(generator: Generator, log: Any, role: str) -> int:
    """Load the newest `role` policy whose weights verify, so a restarted producer does not sample an old one (the
    others are logged and skipped here: the stage dead-letters them when it consumes them)."""
    for update in await role_updates(log, role):
        try:
            await load_update(generator, update, role)
            break
        except PolicyHashMismatch as exc:
            logger.error("skipping %s policy version %d: %s", role, update.version, exc)
    return generator.policy_version
