"""The steps a run directory has finished (DIR/steps.json) and the arguments it was started with (DIR/run.json), so that a stopped demo or experiment continues where it stopped (from the bootstrap it started from, kernelzero/app/demo.py); it does NOT make a step atomic.

A step is marked done only after it returned 0, so a step stopped midway runs again: the loop's
stages resume from the offsets they committed (nothing acknowledged is lost or counted twice), and
a held-out measurement is two steps, its publication and its answers, so that its modules are not
put on the log twice. A stop between a publication's write and its mark (a few milliseconds)
still publishes it again. Files are replaced whole (written beside, then renamed).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable


def replace_file(path: Path, data: bytes) -> None:
    """`path` holding `data`, or as it was: written beside, then renamed over it."""
    partial = path.with_suffix(path.suffix + ".partial")
    partial.write_bytes(data)
    os.replace(partial, path)


def _write(path: Path, value) -> None:
    replace_file(path, json.dumps(value, indent=1).encode())


class Journal:
    def __init__(self, out: Path):
        self.path = out / "steps.json"
        self.done: list[str] = json.loads(self.path.read_text()) if self.path.exists() else []

    def run(self, name: str, step: Callable[[], int]) -> int:
        """`step()` unless `name` is done; marked done when it returns 0. Its exit code (0 for a step done before)."""
        if name in self.done:
            return 0
        code = step()
        if code == 0:
            self.done.append(name)
            _write(self.path, self.done)
        return code


def arguments_differ(out: Path, arguments: dict) -> list[str]:
    """The arguments that differ from those `out` was started with (recorded in out/run.json on its first start)."""
    path = out / "run.json"
    if not path.exists():
        out.mkdir(parents=True, exist_ok=True)
        _write(path, arguments)
        return []
    started = json.loads(path.read_text())
    return sorted(f"--{key.replace('_', '-')} {started.get(key)!r} (now {value!r})"
                  for key, value in arguments.items() if started.get(key) != value)
