"""What runs in the validator's sandbox: the run-time checks of one Proposer module, in a confined fork of the validator's fork server; it judges what it sees, the sandbox (kernelzero/sandbox/) contains it.

The server (`python -m kernelzero.consumers.validator_child [CONFINEMENT_JSON]`, started by
consumers/validator.py through kernelzero/sandbox/client.py) imports torch and the problem loader
once; each ValidationRequest runs in a fork that confines itself to its scratch folder before
the module's code exists in it and answers a ValidationAnswer. A module that crashes, hangs,
leaks or patches torch affects only its own run; the detail of a run that died or timed out ends
with the tail of what it printed, read through the server's own descriptor of its output log.
"""

from __future__ import annotations

import hashlib
import os
import resource
import signal
import time

import msgspec

from kernelzero.consumers.validator import REASONS, REQUIRED, trace_names_for
from kernelzero.kit.tracing import CallTrace, OpTrace, tensors
from kernelzero.sandbox import forkserver
from kernelzero.schemas.messages import ModuleVerdict, SandboxRefusal, ValidationAnswer, ValidationRequest


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _run_checks(request: ValidationRequest) -> dict:
    import torch

    from kernelzero.kit.api_catalog import BY_NAME
    from kernelzero.kit.problems import ProblemError, load_problem

    torch.set_num_threads(max(1, request.cpu_threads))
    device = request.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    limit = int(request.max_memory_gb * 2**30)
    if device == "cpu":
        resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + limit + 2**30, resource.RLIM_INFINITY))
    rss_before = _rss_bytes()
    result: dict = {"device": device}
    try:
        problem = load_problem(request.source)
    except ProblemError as exc:
        reason = exc.reason if exc.reason in REASONS else REQUIRED.get(exc.reason.split("_", 1)[-1], "import_error")
        return {**result, "reason": reason, "detail": exc.detail}

    def run(seed: int, trace: bool):
        torch.manual_seed(seed)
        model = problem.Model(*problem.get_init_inputs()).to(device)
        torch.manual_seed(seed)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
        modes = (CallTrace(), OpTrace()) if trace else None
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            if modes:
                with modes[0], modes[1]:
                    out = model(*inputs)
            else:
                out = model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed_ms = (time.perf_counter() - start) * 1000
        return [t.detach().to("cpu", copy=True) for t in tensors(out, strict=True)], elapsed_ms, modes

    try:
        first, _, (called, dispatched) = run(request.seed, trace=True)
        calls, aten = called.calls, {name.rstrip("_") for name in dispatched.ops}
        second, runtime_ms, _ = run(request.seed, trace=False)
    except MemoryError as exc:
        return {**result, "reason": "too_much_memory", "detail": f"MemoryError: {exc}"}
    except Exception as exc:  # the module's own code failed: that is the verdict
        text = f"{type(exc).__name__}: {exc}"[:2000]
        if "out of memory" in text.lower() or "can't allocate" in text.lower():
            return {**result, "reason": "too_much_memory", "detail": text}
        return {**result, "reason": "runtime_error", "detail": text}
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before)
    op_trace = list(dict.fromkeys(name for name, _ in calls))
    result.update(
        op_trace=op_trace, runtime_ms=runtime_ms, peak_memory_mb=peak / 2**20,
        trace_hash=hashlib.sha256(repr(calls).encode()).hexdigest()[:16],
    )
    result.update(_judge(request, first, second, runtime_ms, peak, set(op_trace) | aten, BY_NAME, run, torch))
    return result


def _judge(request, first, second, runtime_ms, peak, traced, catalog, run, torch) -> dict:
    if len(first) != len(second) or any(
        a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
        for a, b in zip(first, second)
    ):
        return {"reason": "non_deterministic", "detail": "two runs with the same seed gave different outputs"}
    if any(not bool(torch.isfinite(t).all()) for t in first if t.is_floating_point() or t.is_complex()):
        return {"reason": "non_finite", "detail": "an output holds NaN or Inf"}
    if all(t.numel() > 1 and bool((t == t.reshape(-1)[0]).all()) or t.numel() == 0 for t in first):
        return {"reason": "constant_output", "detail": "every output element is the same value"}
    if all(t.numel() <= 1 for t in first):
        other, _, _ = run(request.seed + 1, trace=False)
        if all(torch.equal(a, b) for a, b in zip(first, other)):
            return {"reason": "constant_output", "detail": "the output does not change with the input seed"}
    missing = [api for api in request.apis if not _traced(api, traced, catalog)]
    if missing:
        return {"reason": f"api_not_called:{missing[0]}", "detail": f"never called: {', '.join(missing)}"}
    if runtime_ms > request.max_runtime_ms:
        return {"reason": "too_slow", "detail": f"forward took {runtime_ms:.1f} ms > {request.max_runtime_ms:g} ms"}
    if peak > request.max_memory_gb * 2**30:
        return {"reason": "too_much_memory", "detail": f"peak {peak / 2**30:.2f} GiB > {request.max_memory_gb:g} GiB"}
    return {"reason": ""}


def _traced(api: str, traced: set[str], catalog: dict) -> bool:
    return any(name in traced for name in trace_names_for(api, catalog))


def _checks_or_verdict(request: ValidationRequest) -> ModuleVerdict:
    try:
        found = _run_checks(request)
    except MemoryError:
        found = {"reason": "too_much_memory", "detail": "MemoryError outside the module's run"}
    except BaseException as exc:  # report anything rather than die silently
        found = {"reason": "runtime_error", "detail": f"validator child: {type(exc).__name__}: {exc}"[:2000]}
    return ModuleVerdict(ok=not found["reason"], **found)


def _answer(verdict: ModuleVerdict | None = None, refusal: SandboxRefusal | None = None) -> bytes:
    return msgspec.msgpack.encode(ValidationAnswer(verdict=verdict, refusal=refusal))


def _refused(reason: str, detail: str) -> bytes:
    return _answer(ModuleVerdict(ok=False, reason=reason, detail=detail))


def _with_output(detail: str, output: str) -> str:
    """`detail`, and the tail of what the run printed (the fork server's copy: forkserver.py) where it printed."""
    return f"{detail}; output: {output}" if output else detail


class ModuleChecks:
    """forkserver.Handler for ValidationRequests: answers are msgpack ValidationAnswers."""

    request_type = ValidationRequest

    def preload(self) -> None:
        import torch

        import kernelzero.kit.api_catalog  # noqa: F401
        import kernelzero.kit.problems  # noqa: F401

        # One traced op here imports the tracing machinery once, not in every fork; one thread, so
        # that no OpenMP worker threads exist when the server forks.
        torch.set_num_threads(1)
        with torch.no_grad(), CallTrace(), OpTrace():
            torch.nn.functional.layer_norm(torch.randn(4, 8), (8,)).sum()

    def timeout_s(self, request: ValidationRequest) -> float:
        return request.timeout_s

    def folders(self, request: ValidationRequest) -> tuple[list[str], str]:
        return [request.scratch_dir], request.scratch_dir

    def run(self, request: ValidationRequest) -> bytes:
        os.chdir(request.scratch_dir)
        return _answer(_checks_or_verdict(request))

    def refused(self, request: ValidationRequest, missing: list[str], in_force: str) -> bytes:
        return _answer(refusal=SandboxRefusal(missing, in_force))

    def failed(self, request: ValidationRequest, exc: BaseException) -> bytes:
        return _refused("runtime_error", f"validator child: {type(exc).__name__}: {exc}"[:2000])

    def timed_out(self, request: ValidationRequest, output: str) -> bytes:
        return _refused("timeout", _with_output(f"no result within {request.timeout_s:g} s", output))

    def died(self, request: ValidationRequest, status: int, output: str) -> bytes:
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:  # as the kernel's OOM killer ends it
            return self.timed_out(request, output)
        return _refused("runtime_error", _with_output(f"the run died (wait status {status})", output))

    def forged(self, request: ValidationRequest) -> bytes:
        return _refused("runtime_error", "the result channel held bytes the validator did not sign")


if __name__ == "__main__":
    import sys
    forkserver.serve(ModuleChecks(), forkserver.confinement_arg(sys.argv[1:]))
