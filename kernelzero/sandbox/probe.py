"""The start-up probe: what containment holds for a candidate process on this machine; it evaluates nothing.

`python -m kernelzero.sandbox.probe CONFINEMENT_JSON FOLDER` is the process a pool starts in its
sandbox (kernelzero/sandbox/launcher.py): it confines itself as a candidate's process does
(kernelzero/sandbox/confine.py), tries the C compiler Triton and load_inline would run, and prints the
mechanisms in force and the compiler that ran ("" when none did) as one JSON object.
`python -m kernelzero.sandbox.probe` alone probes with the defaults and KERNELZERO_EVALUATOR_*
variables and prints what evidence would say, or the refusal (exit status 2). The package does not
import this module, so `-m` runs it once.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import msgspec

from kernelzero.sandbox import confine
from kernelzero.schemas.messages import Confinement, ProbeReport


def answer(confinement_json: str, folder: str) -> int:
    confinement = msgspec.json.decode(confinement_json, type=Confinement)
    in_force = confine.enter(confinement, [folder], folder)
    print(msgspec.json.encode(ProbeReport(in_force, confine.usable_compiler())).decode(), flush=True)
    return 0


def report() -> int:
    from kernelzero.config import load_config
    from kernelzero.sandbox.launcher import Sandbox, SandboxUnavailable
    config = load_config().evaluator
    sandbox = Sandbox(config, Path(os.path.expanduser(config.cache_dir)))
    try:
        asyncio.run(sandbox.probe())
    except SandboxUnavailable as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 2
    print(sandbox.label)
    return 0


if __name__ == "__main__":
    sys.exit(answer(*sys.argv[1:3]) if len(sys.argv) == 3 else report())
