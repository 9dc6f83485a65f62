"""The host's end of a fork server, for callers without an event loop: starts it in the sandbox, sends one request at a time, restarts it when lost; not thread-safe.

`ForkServerClient(sandbox, module, workspace_root)` starts `python -m MODULE [CONFINEMENT_JSON]`
(a module whose main runs forkserver.serve) through `launcher.Sandbox.popen`, once probed, with
its workspace (workspace.py) bound writable. `request` answers the server's bytes, or
None when the server died or did not answer in time (it is started afresh next time).
The evaluator's pool talks to its workers the same way with asyncio (gpu_workers/pool.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import time
from pathlib import Path

from kernelzero.sandbox import forkserver
from kernelzero.sandbox.launcher import Sandbox
from kernelzero.sandbox.workspace import Workspace

START_TIMEOUT_S = 300.0


class ForkServerClient:
    def __init__(self, sandbox: Sandbox, module: str, workspace_root: Path, *, gpu: bool = False,
                 env: dict[str, str | None] | None = None):
        self.sandbox = sandbox
        self.module = module
        self.workspace_root = workspace_root
        self.gpu = gpu
        self.env = env or {}
        self.workspace: Workspace | None = None
        self._process: subprocess.Popen | None = None
        self._probed = False
        # bwrap --die-with-parent follows the thread that started it: a caller's short-lived worker thread
        # (anyio's idle out after seconds) would take the server down with it, so one thread lives with the client
        self._starter = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="forkserver-start")

    def scratch(self) -> str:
        """A fresh scratch folder for the next request, as the server's children see it; starts the server if needed."""
        self._ensure()
        scratch, _ = self.workspace.prepare("")
        return scratch

    def request(self, data: bytes, timeout_s: float) -> bytes | None:
        process = self._ensure()
        try:
            forkserver.write_frame(process.stdin.fileno(), data)
            reply = forkserver.read_frame(process.stdout.fileno(), time.monotonic() + timeout_s)
        except OSError:
            reply = None
        if reply is None:  # the server itself died or hung: start afresh next time
            self.close()
        return reply

    def _ensure(self) -> subprocess.Popen:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        if not self._probed:
            _run_coroutine(self.sandbox.probe())  # SandboxUnavailable where containment falls short
            self._probed = True
        if self.workspace is None:
            self.workspace = Workspace(self.sandbox, self.workspace_root)
        confinement = [] if self.sandbox.mode == "off" else [self.sandbox.confinement_arg()]
        process = self._starter.submit(
            self.sandbox.popen, [sys.executable, "-m", self.module, *confinement], writable=self.workspace.binds(),
            gpu=self.gpu, env=self.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE).result()
        self._process = process
        if forkserver.read_frame(process.stdout.fileno(), time.monotonic() + START_TIMEOUT_S) != forkserver.READY:
            self.close()
            raise RuntimeError(f"the fork server {self.module} did not start")
        return process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for stream in (self._process.stdin, self._process.stdout):
                stream.close()
            self._process = None

    def close(self) -> None:
        """Stop the server and remove its workspace (made again on the next request)."""
        self._stop()
        if self.workspace is not None:
            self.workspace.remove()
            self.workspace = None


def _run_coroutine(coroutine):
    """Run `coroutine` to its end, from a thread with or without a running event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
