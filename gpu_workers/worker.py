"""The per-device worker: a long-lived process that never runs candidate code itself; each job runs in a fresh fork of it.

The worker imports torch and Triton once (its parent sets TRITON_INTERPRET=1 for the CPU path) and never
initialises CUDA, so forking it is safe and cheap. Each job's child gets its own session
(killed as a group), resource limits and a scratch directory; a timeout kills it, and a crash,
abort or exit without a result becomes a verdict against the candidate (only its code can end the
child early; an exit code proves nothing). An exception of the evaluator's own while setting the
child up is answered as a signed `evaluator_error`. Nothing a candidate does survives its job.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import os
import resource
import select
import signal
import time

import msgspec

from kernelzero.gpu_workers.result import EvalResult


def serve_worker() -> None:
    """Entry point (`python -m kernelzero.gpu_workers.worker`): length-prefixed msgpack Jobs on stdin, outcomes on stdout."""
    import struct
    channel_in = os.fdopen(os.dup(0), "rb", buffering=0)
    channel_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints (torch warnings, a candidate's output) never corrupt the channel
    import torch  # noqa: F401  (imported once here, inherited by every fork)
    import torch._dynamo  # noqa: F401  (entering a dispatch mode imports it: 4 s per job otherwise)
    import torch.profiler  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    import triton  # noqa: F401
    from kernelzero.gpu_workers import trial
    if torch.cuda.is_initialized():
        raise RuntimeError("CUDA was initialised in the worker: forking it would be unsafe")

    def send(data: bytes) -> None:
        channel_out.write(struct.pack("!I", len(data)) + data)

    send(b"ready")
    while True:
        head = _read_exact(channel_in, 4)
        if head is None:
            return
        body = _read_exact(channel_in, struct.unpack("!I", head)[0])
        if body is None:
            return
        send(run_forked(msgspec.msgpack.decode(body, type=trial.Job)))


def _read_exact(stream, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def run_forked(job) -> bytes:
    from kernelzero.gpu_workers import trial
    token = os.urandom(32)  # lives only in this frame: the result is signed with it
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the disposable child
        os.close(read_fd)
        code = 0
        try:
            _close_inherited_fds(write_fd)
            _enter_sandbox(job)
            payload = trial.run_job(job)
        except BaseException as exc:  # noqa: BLE001  (setting up the child is our code: its failure is ours)
            payload = _encode(_evaluator_error(job, exc))
        try:
            _write_all(write_fd, hmac.new(token, payload, hashlib.sha256).digest() + payload)
        except BaseException:  # noqa: BLE001  (the child must always reach os._exit)
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    data, timed_out = _read_until(read_fd, time.monotonic() + job.config.timeout_s)
    os.close(read_fd)
    if timed_out:
        _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    _kill_group(pid)  # leftovers the candidate may have started
    device = "cuda" if job.device.startswith("cuda") else "cpu"
    stderr = _tail(os.path.join(job.scratch_dir, "output.log"))
    if timed_out:
        return _encode(EvalResult(verdict="timeout", reason="timeout", device=device, gpu=job.gpu,
                                  evidence={"timeout_s": str(job.config.timeout_s), "output": stderr}))
    if data:
        mac, payload = data[:32], data[32:]
        if not hmac.compare_digest(mac, hmac.new(token, payload, hashlib.sha256).digest()):
            return _encode(EvalResult(verdict="rejected", reason="forged_result", device=device, gpu=job.gpu,
                                      evidence={"detail": "the result channel held bytes the evaluator did not sign"}))
        return payload
    if os.WIFSIGNALED(status):
        name = signal.Signals(os.WTERMSIG(status)).name
        reason = f"worker_crashed:{name}"
    else:
        reason = f"worker_exited:{os.WEXITSTATUS(status)}"
    return _encode(EvalResult(verdict="runtime_error", reason=reason, device=device, gpu=job.gpu,
                              evidence={"output": stderr}))


def _close_inherited_fds(keep: int) -> None:
    """Only the result pipe stays open: the worker's own channel to the pool must be out of the candidate's reach."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.closerange(3, keep)
    os.closerange(keep + 1, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def _enter_sandbox(job) -> None:
    os.setsid()  # own process group: a timeout kills everything the candidate started
    log = os.open(os.path.join(job.scratch_dir, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.chdir(job.scratch_dir)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 30, 1 << 30))
    if job.device.startswith("cuda"):
        import torch
        torch.cuda.set_device(torch.device(job.device))  # the memory cap follows the problem (trial.py)
        return
    # CPU: cap the address space above what torch already maps; keep freed blocks on the heap
    # (no mmap) so the allocator poisoning in trial.py reaches later allocations.
    limit = _vm_size() + int(job.config.memory_limit_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    libc = ctypes.CDLL(None)
    libc.mallopt(-3, 1 << 30)  # M_MMAP_THRESHOLD
    libc.mallopt(-1, 1 << 30)  # M_TRIM_THRESHOLD


def _vm_size() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _read_until(fd: int, deadline: float) -> tuple[bytes, bool]:
    chunks: list[bytes] = []
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return b"".join(chunks), True
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return b"".join(chunks), False
        chunks.append(chunk)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(path: str, limit: int = 1500) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _evaluator_error(job, exc: BaseException) -> EvalResult:
    import traceback
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return EvalResult(verdict="evaluator_error", reason="exception", gpu=job.gpu,
                      device="cuda" if job.device.startswith("cuda") else "cpu",
                      evidence={"stage": "sandbox", "traceback": trace[-2000:]})


def _encode(result: EvalResult) -> bytes:
    return msgspec.msgpack.encode(result)


if __name__ == "__main__":
    serve_worker()
