"""How the trusted side touches files in folders untrusted code could write (job scratch, build folders): never through a link, never blocking, bounded; it guards what the trusted side reads, not what the bytes say.

Trusted processes (the fork server, the pool, the validator) hold more rights than the code that
left the files: a path it controls may name a link to a root-only file, a FIFO that blocks an open for
ever, a device, a file hard-linked elsewhere, or be swapped between a check and an open. So what the
trusted side will read back, it creates itself, nameless, before untrusted code exists, in a folder
untrusted code cannot write, and reads through its own descriptor (`create_output`, then `tail`).
docs/evaluator.md (Containment) lists every such access and which of these guards it.
"""

from __future__ import annotations

import os
import stat
import tempfile

TAIL_BYTES = 1500


def create_output(folder: str) -> int:
    """A read-write descriptor of a new, empty file in `folder` without a name: nothing can open it by a path."""
    with tempfile.TemporaryFile(dir=folder, buffering=0) as nameless:  # O_TMPFILE, or a name removed at once
        return os.dup(nameless.fileno())


def tail(fd: int, limit: int = TAIL_BYTES) -> str:
    """The last `limit` bytes of the regular file open at `fd`, as text; "" for anything else."""
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        return ""
    start = max(0, info.st_size - limit)
    return os.pread(fd, limit, start).decode(errors="replace")
