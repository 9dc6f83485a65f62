"""The per-device worker: a long-lived process that never runs candidate code itself; each job runs in a fresh fork of it.

The worker imports torch and Triton once (its parent sets TRITON_INTERPRET=1 for the CPU path) and never
initialises CUDA, so forking it is safe and cheap. Each job's child gets its own session,
resource limits and a scratch directory, and with a CONFINEMENT argument confines itself
(kernelzero/sandbox/confine.py: the candidate's uid, Landlock, seccomp) before candidate code exists in
it; a job that would run with less than the required containment is refused. A timeout kills
it, and a crash, abort or exit without a result becomes a verdict against the candidate (only its
code can end the child early; an exit code proves nothing). An exception of the evaluator's own
while setting the child up is answered as a signed `evaluator_error`. The worker is the subreaper
of everything a job starts, and kills all of it (orphans and new sessions included) before it
answers: no process a candidate starts outlives its job.

Run as `python -m kernelzero.gpu_workers.zygote [CONFINEMENT_JSON]` (gpu_workers/pool.py does).
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

import msgspec

from kernelzero.gpu_workers.messages import Job, JobAnswer, SandboxRefusal
from kernelzero.gpu_workers.result import EvalResult

_PR_SET_CHILD_SUBREAPER = 36


def serve_worker(argv: list[str]) -> None:
    """Entry point: length-prefixed msgpack Jobs on stdin, outcomes on stdout."""
    from kernelzero.sandbox import confine
    confinement = msgspec.json.decode(argv[0], type=confine.Confinement) if argv else None
    if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER) failed")
    channel_in = os.fdopen(os.dup(0), "rb", buffering=0)
    channel_out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)  # stray prints (torch warnings, a candidate's output) never corrupt the channel
    import torch  # noqa: F401  (imported once here, inherited by every fork)
    import torch._dynamo  # noqa: F401  (entering a dispatch mode imports it: 4 s per job otherwise)
    import torch.profiler  # noqa: F401
    import torch.utils.flop_counter  # noqa: F401
    import triton  # noqa: F401
    from kernelzero.gpu_workers import trial  # noqa: F401  (imported once here, inherited by every fork)
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
        send(run_forked(msgspec.msgpack.decode(body, type=Job), confinement))


def _read_exact(stream, n: int) -> bytes | None:
    data = b""
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def run_forked(job, confinement=None) -> bytes:
    from kernelzero.gpu_workers import trial
    token = os.urandom(32)  # lives only in this frame: the result is signed with it
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the disposable child
        os.close(read_fd)
        code = 0
        try:
            _close_inherited_fds(write_fd)
            os.setsid()  # own process group: a timeout kills what the candidate started
            payload = _confine(job, confinement) if confinement is not None else None
            if payload is None:
                _prepare_job(job)
                payload = trial.run_job(job)
        except BaseException as exc:  # noqa: BLE001  (setting up the child is our code: its failure is ours)
            payload = _encode(_evaluator_error(job, exc))
        try:
            mac = hmac.new(token, payload, hashlib.sha256).digest()
            _write_all(write_fd, struct.pack("!I", len(payload)) + mac + payload)
        except BaseException:  # noqa: BLE001  (the child must always reach os._exit)
            code = 70
        finally:
            os._exit(code)
    os.close(write_fd)
    data, timed_out = _read_result(read_fd, pid, time.monotonic() + job.config.timeout_s)
    os.close(read_fd)
    if timed_out:
        _kill_group(pid)
    _, status = os.waitpid(pid, 0)
    _kill_descendants()  # what the candidate started, in any session
    device = "cuda" if job.device.startswith("cuda") else "cpu"
    stderr = _tail(os.path.join(job.scratch_dir, "output.log"))
    if timed_out:
        return _encode(EvalResult(verdict="timeout", reason="timeout", device=device, gpu=job.gpu,
                                  evidence={"timeout_s": str(job.config.timeout_s), "output": stderr}))
    if data:
        size, mac, payload = _frame_size(data), data[4:36], data[36:]
        if len(payload) != size or not hmac.compare_digest(mac, hmac.new(token, payload, hashlib.sha256).digest()):
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


def _confine(job, confinement) -> bytes | None:
    """Confine this job's process; a refusal to send instead of a result where required containment is missing."""
    from kernelzero.gpu_workers import device_turns
    from kernelzero.sandbox import confine
    writable = [p for p in (job.scratch_dir, job.extensions_dir) if p]
    if job.device.startswith("cuda"):
        writable.append(device_turns.TURNS_DIR)
    mechanisms = confine.enter(confinement, writable, job.scratch_dir)
    missing = confine.missing(confinement.required, mechanisms)
    if not missing:
        return None
    in_force = confine.label(confinement.launcher, mechanisms)
    return _encode(JobAnswer(refusal=SandboxRefusal(missing, in_force)))


def _prepare_job(job) -> None:
    # readable by the worker, which may run as another uid than the candidate
    log = os.open(os.path.join(job.scratch_dir, "output.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
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


def _frame_size(data: bytes) -> int:
    """The payload size a result frame announces (length, 32-byte MAC, payload); -1 before 4 bytes came."""
    return struct.unpack("!I", data[:4])[0] if len(data) >= 4 else -1


def _read_result(fd: int, pid: int, deadline: float) -> tuple[bytes, bool]:
    """(what the job's child sent, timed out?): done once its frame is complete or the child is gone.

    Not at end of file: processes the candidate forked hold the pipe open too.
    """
    data = b""
    child = os.pidfd_open(pid)
    try:
        while not 0 <= _frame_size(data) <= len(data) - 36:
            left = deadline - time.monotonic()
            if left <= 0:
                return data, True
            ready, _, _ = select.select([fd, child], [], [], left)
            if fd in ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    break
                data += chunk
            elif child in ready:  # exited: what it sent is in the pipe already
                os.set_blocking(fd, False)
                data += _drain(fd)
                break
    finally:
        os.close(child)
    return data, False


def _drain(fd: int) -> bytes:
    data = b""
    try:
        while chunk := os.read(fd, 1 << 20):
            data += chunk
    except BlockingIOError:
        pass
    return data


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_descendants() -> None:
    """SIGKILL every process below this worker and reap it, until none is left (orphans come to us: subreaper)."""
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


def _encode(answer: EvalResult | JobAnswer) -> bytes:
    return msgspec.msgpack.encode(answer if isinstance(answer, JobAnswer) else JobAnswer(result=answer))


if __name__ == "__main__":
    import sys
    serve_worker(sys.argv[1:])
