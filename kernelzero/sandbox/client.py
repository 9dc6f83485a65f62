"""The host's end of a fork server, the one client of the evaluator's workers and the validator's server: starts it in the sandbox, sends one request at a time in a fresh scratch folder, starts it afresh when lost; it does not say what a request means.

`ForkServerClient(sandbox, module, workspace_root)` starts `python -m MODULE [CONFINEMENT_JSON]`
(a module whose main runs forkserver.serve) through `launcher.Sandbox.popen`, once the sandbox is
probed, with its workspace (workspace.py) and `writable` folders bound writable. `request(build,
timeout_s, build_dir)` prepares the workspace (a new scratch folder, a copy of `build_dir`'s CUDA
extensions), sends the bytes `build(scratch, extensions)` makes of those paths as the server sees
them, and answers the server's bytes, or None when the server died or did not answer within
`timeout_s` (it is started afresh for the next request); the workspace is emptied after every
request. `ask` is `request` for an event loop. Requests take turns on the client's own thread,
which also starts the server: bwrap --die-with-parent follows the thread that started it, and a
caller's short-lived thread (anyio's idle out after seconds) would take the server down with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from kernelzero.sandbox import forkserver
from kernelzero.sandbox.launcher import Sandbox
from kernelzero.sandbox.workspace import Workspace

START_TIMEOUT_S = 300.0
Build = Callable[[str, str], bytes]  # (scratch, extensions dir) as the server sees them -> the request's bytes


class ForkServerClient:
    def __init__(self, sandbox: Sandbox, module: str, workspace_root: Path, *, gpu: bool = False,
                 env: dict[str, str | None] | None = None, writable: list[tuple[str, str]] = ()):
        self.sandbox = sandbox
        self.module = module
        self.gpu = gpu
        self.env = env or {}
        self.writable = list(writable)  # host folders bound writable besides the workspace, as (host, inside)
        self.workspace = Workspace(sandbox, workspace_root)
        self._process: subprocess.Popen | None = None
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"forkserver-{module}")

    def start(self) -> None:
        """Start the server now (probing the sandbox first) instead of at the first request."""
        self._thread.submit(self._ensure).result()

    async def started(self) -> None:
        """`start`, for an event loop."""
        await asyncio.wrap_future(self._thread.submit(self._ensure))

    def request(self, build: Build, timeout_s: float, build_dir: str = "") -> bytes | None:
        return self._thread.submit(self._request, build, timeout_s, build_dir).result()

    async def ask(self, build: Build, timeout_s: float, build_dir: str = "") -> bytes | None:
        """`request`, for an event loop; a request whose caller is cancelled still runs to its end on the client's
        thread, so the next one never reads its answer."""
        return await asyncio.wrap_future(self._thread.submit(self._request, build, timeout_s, build_dir))

    @property
    def pid(self) -> int | None:
        """The running server's process id (its launcher's); None before it starts and once it is lost."""
        return self._process.pid if self._process is not None else None

    def kill(self) -> None:
        """Kill the server from any thread: a request in flight answers None, the next one starts it afresh."""
        process = self._process
        if process is not None:
            process.kill()

    def close(self) -> None:
        """Stop the server and remove its workspace; the client is done."""
        self.kill()
        self._thread.submit(self._close).result()
        self._thread.shutdown()

    def _request(self, build: Build, timeout_s: float, build_dir: str) -> bytes | None:
        process = self._ensure()
        try:
            scratch, extensions = self.workspace.prepare(build_dir)
            forkserver.write_frame(process.stdin.fileno(), build(scratch, extensions))
            reply = forkserver.read_frame(process.stdout.fileno(), time.monotonic() + timeout_s)
        except OSError:
            reply = None
        finally:
            self.workspace.clear()  # the server killed what the request started before it answered
        if reply is None:  # the server itself died or hung: start afresh next time
            self._stop()
        return reply

    def _ensure(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        if not self.sandbox.probed:
            asyncio.run(self.sandbox.probe())  # SandboxUnavailable where containment falls short
        confinement = [] if self.sandbox.mode == "off" else [self.sandbox.confinement_arg()]
        process = self.sandbox.popen([sys.executable, "-m", self.module, *confinement],
                                     writable=self.workspace.binds() + self.writable, gpu=self.gpu, env=self.env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        self._process = process
        if forkserver.read_frame(process.stdout.fileno(), time.monotonic() + START_TIMEOUT_S) != forkserver.READY:
            self._stop()
            raise RuntimeError(f"the fork server {self.module} did not start")
        return process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                stream.close()
            self._process = None

    def _close(self) -> None:
        self._stop()
        self.workspace.remove()
