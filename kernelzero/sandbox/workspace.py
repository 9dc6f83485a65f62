"""A sandboxed server's folder on the host, seen inside bubblewrap at /kz: a fresh scratch per request, a copy of a job's CUDA extensions; it holds files, it does not confine.

Confinement to these folders is launcher.py's (the only writable bind) and confine.py's (Landlock).
Untrusted code may leave anything in them: they are emptied and copied as untrusted_files.py does it
(no link followed, no special file copied, any depth).
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from kernelzero.sandbox import untrusted_files

AREA, JOB, EXTENSIONS, SHARED_MEMORY = "/kz", "/kz/job", "/kz/ext", "/dev/shm"
PRECOMPILED = "/kz/pch"  # torch's precompiled binding headers, read-only (gpu_workers/prebuilt_headers.py)


class Launcher(Protocol):
    """What a workspace needs of the launcher whose processes use it (launcher.Sandbox, which imports this module)."""

    mode: str  # "bwrap": paths inside are /kz/...; otherwise the host's
    candidate_owner: int

    def own(self, path: Path) -> None: ...


class Workspace:
    """One worker's folder on the host: a scratch folder per job and a copy of the job's CUDA extensions.

    Inside bubblewrap the worker sees it at /kz, so every job has the same paths (/kz/job,
    /kz/ext) and a build made at /kz/ext loads without a rebuild. Elsewhere paths are the host's
    and the extensions are used where they were built.
    """

    def __init__(self, sandbox: Launcher, root: Path):
        self.sandbox = sandbox
        self.root = root
        (root / "shm").mkdir(parents=True, exist_ok=True)  # bound as it is: emptied between jobs, never replaced

    def binds(self) -> list[tuple[str, str]]:
        """The worker's folder at /kz, and its shm/ as /dev/shm (POSIX shared memory, semaphores): the job's own."""
        return [(str(self.root), AREA), (str(self.root / "shm"), SHARED_MEMORY)]

    def prepare(self, build_dir: str) -> tuple[str, str]:
        """(scratch, extensions dir) as the job sees them; the scratch is new and the candidate's."""
        self.clear()
        job = self.root / "job"
        job.mkdir()
        self.sandbox.own(job)
        self.sandbox.own(self.root / "shm")
        if self.sandbox.mode != "bwrap":
            return str(job), build_dir
        if not build_dir:
            return JOB, ""
        # a copy, not a bind: load_inline writes (a lock file) into its build folder, and the cached one stays as
        # built; of what the build left, only its folders and regular files (links, FIFOs, devices stay behind)
        owner = self.sandbox.candidate_owner
        untrusted_files.copy_tree(build_dir, str(self.root / "ext"), owner, leave_out=(".home",))
        self.sandbox.own(self.root / "ext")
        return JOB, EXTENSIONS

    def clear(self) -> None:
        for sub in ("job", "ext"):
            untrusted_files.remove_tree(str(self.root / sub))
        untrusted_files.remove_tree(str(self.root / "shm"), keep_top=True)

    def remove(self) -> None:
        untrusted_files.remove_tree(str(self.root))
