"""Following a role's policy on the log: verify a policy.updated's weights and load them into a Generator; shared by the Coder and the Proposer.

Weights never travel through the log: an update names a path and a content hash, and nothing is
loaded unless the files hash to it. It does not decide when to load (callers load between
batches, never while a `generate` of the same generator runs).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import anyio

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


async def role_updates(log: Any, role: str, timeout_s: float = 30.0) -> list[PolicyUpdated]:
    """Every policy.updated of `role` on the log, newest version first."""
    from kernelzero.log import read_to_end
    from kernelzero.schemas import DecodeError, decode

    updates: list[PolicyUpdated] = []
    async for record in read_to_end(log, "policy.updated", reader=f"{role}.policy-scan", deadline_s=timeout_s):
        try:
            payload = decode(record.value).payload
        except DecodeError:
            continue  # the stage itself dead-letters it when it reads the record
        if isinstance(payload, PolicyUpdated) and payload.role == role:
            updates.append(payload)
    return sorted(updates, key=lambda u: u.version, reverse=True)


async def catch_up(generator: Generator, log: Any, role: str) -> int:
    """Load the newest `role` policy whose weights verify, so a restarted producer does not sample an old one."""
    for update in await role_updates(log, role):
        try:
            await load_update(generator, update, role)
            break
        except PolicyHashMismatch as exc:
            logger.error("skipping %s policy version %d: %s", role, update.version, exc)
    return generator.policy_version
