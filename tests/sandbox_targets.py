"""What sandbox tests aim untrusted code at and how they see what got through: a root-only secret and host files with unique markers, the evaluator's stderr, the host's process table; it knows nothing of files it did not plant.

The lying-file candidates (tests/evaluator/candidates_sandbox/lie_*.py, build_leaves_lies.py, build_plants_link.py)
name these paths literally: SECRET (mode 0600, in a folder the tests bind read-only into the sandbox
through `sandbox_binds`, so a candidate can point a link at it but not read it), OUTSIDE (never bound:
only a reader on the host could follow a link to it) and VICTIM (a host file a write through a planted
link would change).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import uuid
from pathlib import Path

CANDIDATES = Path(__file__).parent / "evaluator" / "candidates_sandbox"
LIES = sorted(p.stem for p in CANDIDATES.glob("lie_*.py"))  # each exits or hangs at import: a Proposer module too
SECRET_DIR = Path("/tmp/kz_lying_files")
SECRET = SECRET_DIR / "secret"
HOST_DIR = Path("/tmp/kz_lying_host")
OUTSIDE = HOST_DIR / "outside"
VICTIM = HOST_DIR / "victim"
SHADOW = Path("/etc/shadow")


@dataclasses.dataclass
class Planted:
    markers: list[str]  # text of the planted files (and /etc/shadow's first line, where readable here)
    victim: str  # VICTIM's content as planted

    def leaked(self, text: str) -> list[str]:
        """The markers that appear in `text`."""
        return [marker for marker in self.markers if marker in text]


@contextlib.contextmanager
def planted():
    """SECRET (root-only), OUTSIDE and VICTIM with fresh random markers; removed afterwards."""
    for folder in (SECRET_DIR, HOST_DIR):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(mode=0o755)
    markers = [f"kz-lying-{name}-{uuid.uuid4().hex}" for name in ("secret", "outside", "victim")]
    for path, marker, mode in zip((SECRET, OUTSIDE, VICTIM), markers, (0o600, 0o644, 0o644)):
        path.write_text(marker + "\n")
        path.chmod(mode)
    try:
        markers.append(SHADOW.read_text().splitlines()[0])
    except (OSError, IndexError):
        pass  # no /etc/shadow here, or not readable: the planted secret stands for it
    try:
        yield Planted(markers=markers, victim=markers[2] + "\n")
    finally:
        for folder in (SECRET_DIR, HOST_DIR):
            shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def stderr_into(path: Path):
    """This process's file descriptor 2 (inherited by every process it starts meanwhile) writes to `path` inside."""
    saved = os.dup(2)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 2)
    os.close(log)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def processes_named(marker: str) -> list[int]:
    """Host processes whose command line holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found
