"""Every message of the sandbox itself, typed: a SandboxRefusal, the lines a confined process prints, the probe's ProbeReport; shapes only, no behaviour.

What a request to a fork server and its answer are belongs to the stage that sends it
(gpu_workers/messages.py, consumers/validator.py); those answers carry a SandboxRefusal where
the process could not get the containment required of it.
"""

from __future__ import annotations

import msgspec

CONFINED, REFUSED = "KZ_CONFINED", "KZ_REFUSED "  # printed before untrusted code runs; REFUSED + SandboxRefusal JSON


class SandboxRefusal(msgspec.Struct):
    """A job's or build's process could not get the containment required of it, and ran nothing of the candidate."""

    missing: list[str]  # the mechanisms (confine.REQUIRED names) that did not hold
    in_force: str  # what did hold (confine.label)


class ProbeReport(msgspec.Struct):
    """The start-up probe to its launcher (probe.py's last line, JSON): what holds for an untrusted process here."""

    in_force: list[str]  # confine.MECHANISMS names, in that order
    compiler: str  # the C compiler that ran inside, "" when none did
