"""The fork server: a long-lived process that runs each request of untrusted code in a fresh, self-confined fork of itself; it bounds time and contains, it does not judge.

The server (started in bubblewrap by launcher.py) imports what the untrusted code needs once,
then reads length-prefixed msgpack requests on stdin and answers each on stdout (4-byte
big-endian length, then the bytes; b"ready" first). A request runs in a child of its own: its
own session, only the result pipe and its output log open, confined (confine.py: uid, limits,
Landlock, seccomp) before any untrusted code exists in it; a request that would run with less than
the required containment is refused. The child signs its answer with a key that lives only in the
server's frame, so bytes the untrusted code writes into the pipe are told apart. A timeout kills the
child's process group, and the server, the subreaper of everything its children start, kills
all of it (orphans and new sessions included) before it answers.

The child's stdout and stderr go to an output log the server creates before the fork, without a name,
in its own folder (the one above the request's home: /kz in bubblewrap, which untrusted code cannot
write), and reads back (its tail, for the answer when the child timed out or died) through its own
descriptor: nothing untrusted code leaves at a path (a link to a file only the server may read, a
FIFO, a file that keeps growing) is ever opened by the server (untrusted_files.py). Each file the child
writes, the log included, is capped at 1 GiB (RLIMIT_FSIZE).

What a request is and what its answers say is a `Handler`'s (gpu_workers/zygote.py for the
evaluator, consumers/validator_child.py for the validator).
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import os
import resource
import select
import signal
import struct
import time
from typing import Any, Protocol

import msgspec

from kernelzero.sandbox import confine, untrusted_files
from kernelzero.schemas.messages import Confinement

_PR_SET_CHILD_SUBREAPER = 36
READY = b"ready"
FILE_SIZE_LIMIT = 1 << 30  # RLIMIT_FSIZE of a request's child: bounds its output log, and any file it writes
ANSWER_LIMIT = 1 << 26  # the most a child's answer may hold (evidence is cut far below it): a larger one is not ours


class Handler(Protocol):
    """What one kind of request is: its type, how long it may run, and every answer it can come to."""

    request_type: type

    def preload(self) -> None:
        """In the server, once: import what every fork inherits."""

    def timeout_s(self, request: Any) -> float: ...

    def folders(self, request: Any) -> tuple[list[str], str]:
        """(folders the child may write, its home) for confine.enter; the home lies in the server's own folder."""

    def run(self, request: Any) -> bytes:
        """In the confined child: the request's answer."""

    def refused(self, request: Any, missing: list[str], in_force: str) -> bytes: ...

    def failed(self, request: Any, exc: BaseException) -> bytes:
        """The answer when our own code failed while setting the child up."""

    def timed_out(self, request: Any, output: str) -> bytes:
        """The answer when the child ran out of time (`output`: its output log's tail)."""

    def died(self, request: Any, status: int, output: str) -> bytes:
        """The answer when the child ended without one (wait status `status`; `output`: its output log's tail)."""

    def forged(self, request: Any) -> bytes: ...


def serve(handler: Handler, confinement: Confinement | None) -> None:
    """The server's loop: framed requests on stdin, framed answers on stdout, until stdin ends."""
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    channel_in = os.fdopen(os.dup(0), "rb", buffering=0)
    channel_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints (torch warnings, untrusted output) never corrupt the channel
    handler.preload()
    write_frame(channel_out.fileno(), READY)
    while (body := read_frame(channel_in.fileno())) is not None:
        write_frame(channel_out.fileno(), run_forked(handler, msgspec.msgpack.decode(body, type=handler.request_type),
                                                     confinement))


def confinement_arg(argv: list[str]) -> Confinement | None:
    """The server's CONFINEMENT_JSON argument, None where there is none (containment off)."""
    return msgspec.json.decode(argv[0], type=Confinement) if argv else None


# ---- framing: 4-byte big-endian length, then the bytes ----
def write_frame(fd: int, data: bytes) -> None:
    _write_all(fd, struct.pack("!I", len(data)) + data)


def read_frame(fd: int, deadline: float | None = None) -> bytes | None:
    """One frame's bytes, or None at end of file or past the deadline."""
    head = _read_exactly(fd, 4, deadline)
    return None if head is None else _read_exactly(fd, struct.unpack("!I", head)[0], deadline)


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        if deadline is not None and not select.select([fd], [], [], max(0.0, deadline - time.monotonic()))[0]:
            return None
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# ---- one request in a fork ----
def run_forked(handler: Handler, request: Any, confinement: Confinement | None = None) -> bytes:
    output = untrusted_files.create_output(os.path.dirname(handler.folders(request)[1]))  # before untrusted code
    try:
        return _answer(handler, request, confinement, output)
    finally:
        os.close(output)


def _answer(handler: Handler, request: Any, confinement: Confinement | None, output: int) -> bytes:
    token = os.urandom(32)  # lives only in this frame: the answer is signed with it
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the disposable child: never returns
        os.close(read_fd)
        _child(handler, request, confinement, token, write_fd, output)
    os.close(write_fd)
    data, timed_out = _read_result(read_fd, pid, time.monotonic() + handler.timeout_s(request))
    os.close(read_fd)
    _kill_group(pid)  # out of time, or done sending (a whole frame, or more than any answer of ours): no need to go on
    _, status = os.waitpid(pid, 0)
    _kill_descendants()  # what the untrusted code started, in any session: nothing writes the log any more
    if timed_out:
        return handler.timed_out(request, untrusted_files.tail(output))
    if data:
        size, mac, payload = _frame_size(data), data[4:36], data[36:]
        if len(payload) != size or not hmac.compare_digest(mac, hmac.new(token, payload, hashlib.sha256).digest()):
            return handler.forged(request)
        return payload
    return handler.died(request, status, untrusted_files.tail(output))


def _child(handler: Handler, request: Any, confinement: Confinement | None, token: bytes, write_fd: int,
           output: int):
    code = 0
    try:
        _keep_only(write_fd, output)
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_SIZE_LIMIT, FILE_SIZE_LIMIT))
        os.setsid()  # own process group: a timeout kills what the untrusted code started
        payload = _confine(handler, request, confinement) if confinement is not None else None
        if payload is None:
            payload = handler.run(request)
    except BaseException as exc:  # noqa: BLE001  (setting up the child is our code: its failure is ours)
        payload = handler.failed(request, exc)
    try:
        mac = hmac.new(token, payload, hashlib.sha256).digest()
        _write_all(write_fd, struct.pack("!I", len(payload)) + mac + payload)
    except BaseException:  # noqa: BLE001  (the child must always reach os._exit)
        code = 70
    finally:
        os._exit(code)


def _confine(handler: Handler, request: Any, confinement: Confinement) -> bytes | None:
    """Confine this process; the handler's refusal instead of an answer where required containment is missing."""
    writable, home = handler.folders(request)
    mechanisms = confine.enter(confinement, writable, home)
    missing = confine.missing(confinement.required, mechanisms)
    if not missing:
        return None
    return handler.refused(request, missing, confine.label(confinement.launcher, mechanisms))


def _keep_only(result_fd: int, output: int) -> None:
    """Only the result pipe and the output log (as stdout and stderr) stay open: the server's own channel must be
    out of the untrusted code's reach."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(output, 1)
    os.dup2(output, 2)
    os.close(null)
    os.closerange(3, result_fd)
    os.closerange(result_fd + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _frame_size(data: bytes) -> int:
    """The payload size a result frame announces (length, 32-byte MAC, payload); -1 before 4 bytes came."""
    return struct.unpack("!I", data[:4])[0] if len(data) >= 4 else -1


def _read_result(fd: int, pid: int, deadline: float) -> tuple[bytes, bool]:
    """(what the child sent, timed out?): done once its frame is complete (or announces more than ANSWER_LIMIT)
    or the child is gone.

    Not at end of file: processes the untrusted code forked hold the pipe open too, and a child that closed
    its end may still be running.
    """
    data = bytearray()
    child = os.pidfd_open(pid)
    watched = [fd, child]
    try:
        while not _sent(data):
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(data), True
            ready, _, _ = select.select(watched, [], [], left)
            if fd in ready:
                chunk = os.read(fd, 1 << 20)
                if chunk:
                    data += chunk
                else:
                    watched = [child]  # nothing can come any more: wait for the child's end, or its deadline
            elif child in ready:  # exited: what it sent is in the pipe already
                os.set_blocking(fd, False)
                _drain(fd, data)
                break
    finally:
        os.close(child)
    return bytes(data), False


def _sent(data: bytearray) -> bool:
    """Whether `data` holds a whole frame, or announces one larger than any answer (reading on would be for nothing)."""
    size = _frame_size(data)
    return size > ANSWER_LIMIT or 0 <= size <= len(data) - 36


def _drain(fd: int, data: bytearray) -> None:
    """Add what is in the pipe now to `data`, up to a whole frame (processes left behind may still be writing)."""
    try:
        while not _sent(data) and (chunk := os.read(fd, 1 << 20)):
            data += chunk
    except BlockingIOError:
        pass


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_descendants() -> None:
    """SIGKILL every process below this server and reap it, until none is left (orphans come to us: subreaper)."""
    me = os.getpid()
    while True:
        victims = _descendants(me)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap()
        if not victims:
            return
        time.sleep(0.001)  # killed processes take a moment to exit and reach us as orphans


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # exited meanwhile
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
