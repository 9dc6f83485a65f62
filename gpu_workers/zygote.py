"""The evaluator's fork server: what one evaluation job is to kernelzero/sandbox/forkserver.py; the server never runs candidate code itself, each job runs in a fresh fork of it.

The worker imports torch and Triton once (its parent sets TRITON_INTERPRET=1 for the CPU path) and never
initialises CUDA, so forking it is safe and cheap. Each job's child (forkserver.py: own session,
confined before candidate code exists in it, killed with everything it started at the timeout)
gets resource limits and its scratch directory here. A crash, abort or exit without a result
becomes a verdict against the candidate (only its code can end the child early; an exit code
proves nothing); its evidence `output` is the tail of the job's output as the server holds it (forkserver.py:
a file without a name), never a file the candidate left in its scratch. An exception of the evaluator's own while
setting the child up is answered as a signed `evaluator_error`; a job that would run with less than the
required containment is refused.

Run as `python -m kernelzero.gpu_workers.zygote [CONFINEMENT_JSON]` (gpu_workers/pool.py does).
"""

from __future__ import annotations

import ctypes
import os
import resource
import signal

import msgspec

from kernelzero.gpu_workers.result import evaluation
from kernelzero.sandbox import forkserver
from kernelzero.schemas import Evaluation
from kernelzero.schemas.messages import Job, JobAnswer, SandboxRefusal


class EvaluationJobs:
    """forkserver.Handler for evaluation Jobs: answers are msgpack JobAnswers."""

    request_type = Job

    def preload(self) -> None:
        import torch  # noqa: F401  (imported once here, inherited by every fork)
        import torch._dynamo  # noqa: F401  (entering a dispatch mode imports it: 4 s per job otherwise)
        import torch.profiler  # noqa: F401
        import torch.utils.flop_counter  # noqa: F401
        import triton  # noqa: F401
        from kernelzero.gpu_workers import trial  # noqa: F401  (imported once here, inherited by every fork)
        if os.environ.get("TRITON_INTERPRET") != "1" and os.path.exists("/dev/nvidiactl"):
            # Triton's CUDA helpers are a C module it compiles into its cache on first use; each job's cache is a
            # fresh folder, so every Triton job paid that compile again (0.3-0.5 s on an H100, docs/BENCHMARKS.md).
            # Making the driver asks torch whether CUDA is available: through NVML, or cuInit would poison every
            # fork (without NVIDIA's devices torch falls back to the CUDA runtime, which marks forks bad: not asked)
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
            from triton.runtime import driver
            driver.active  # noqa: B018  (made here, without initialising CUDA, and inherited by every fork)
        if torch.cuda.is_initialized():
            raise RuntimeError("CUDA was initialised in the worker: forking it would be unsafe")

    def timeout_s(self, job: Job) -> float:
        return job.config.timeout_s

    def folders(self, job: Job) -> tuple[list[str], str]:
        from kernelzero.gpu_workers import device_turns
        writable = [p for p in (job.scratch_dir, job.extensions_dir) if p]
        if job.device.startswith("cuda"):
            writable.append(device_turns.TURNS_DIR)
        return writable, job.scratch_dir

    def run(self, job: Job) -> bytes:
        from kernelzero.gpu_workers import trial
        _prepare_job(job)
        return _encode(trial.run_job(job))

    def refused(self, job: Job, missing: list[str], in_force: str) -> bytes:
        return _encode(JobAnswer(refusal=SandboxRefusal(missing, in_force)))

    def failed(self, job: Job, exc: BaseException) -> bytes:
        return _encode(_evaluator_error(job, exc))

    def timed_out(self, job: Job, output: str) -> bytes:
        return _encode(evaluation("timeout", "timeout", device=_device(job), gpu=job.gpu,
                                  evidence={"timeout_s": str(job.config.timeout_s), "output": output}))

    def died(self, job: Job, status: int, output: str) -> bytes:
        if os.WIFSIGNALED(status):
            reason = f"worker_crashed:{signal.Signals(os.WTERMSIG(status)).name}"
        else:
            reason = f"worker_exited:{os.WEXITSTATUS(status)}"
        return _encode(evaluation("runtime_error", reason, device=_device(job), gpu=job.gpu,
                                  evidence={"output": output}))

    def forged(self, job: Job) -> bytes:
        return _encode(evaluation("rejected", "forged_result", device=_device(job), gpu=job.gpu,
                                  evidence={"detail": "the result channel held bytes the evaluator did not sign"}))


JOBS = EvaluationJobs()


def serve_worker(argv: list[str]) -> None:
    """Entry point: length-prefixed msgpack Jobs on stdin, JobAnswers on stdout."""
    forkserver.serve(JOBS, forkserver.confinement_arg(argv))


def run_forked(job: Job, confinement=None) -> bytes:
    """One job in a fork of this process, as the worker runs it."""
    return forkserver.run_forked(JOBS, job, confinement)


def _device(job: Job) -> str:
    return "cuda" if job.device.startswith("cuda") else "cpu"


def _prepare_job(job) -> None:
    os.chdir(job.scratch_dir)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
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


def _evaluator_error(job, exc: BaseException) -> Evaluation:
    import traceback
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return evaluation("evaluator_error", "exception", gpu=job.gpu,
                      device="cuda" if job.device.startswith("cuda") else "cpu",
                      evidence={"stage": "sandbox", "traceback": trace[-2000:]})


def _encode(answer: Evaluation | JobAnswer) -> bytes:
    """A JobAnswer as msgpack."""
    return msgspec.msgpack.encode(JobAnswer(result=answer) if isinstance(answer, Evaluation) else answer)


if __name__ == "__main__":
    import sys
    serve_worker(sys.argv[1:])
