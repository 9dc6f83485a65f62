"""Who an exception inside a trial is charged to: the problem (`ProblemFailed`), the candidate (an `EarlyVerdict`), or us; it reads the exception, not what led to it.

trial.py decides from where an exception surfaced (problem code, candidate code, our own) and
asks here what kind it is. A kind says nothing about whether the candidate could have caused a
fault seen in our code: that rule (device faults and memory once candidate code has run) is
trial.py's.
"""

from __future__ import annotations

import traceback
from typing import Any, Callable

import torch

from kernelzero.gpu_workers.result import ProblemFailed
from kernelzero.kit.problems import ProblemError


class EarlyVerdict(Exception):
    """Ends an evaluation with a verdict other than `correct`."""

    def __init__(self, verdict: str, reason: str, **evidence: Any):
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason
        self.evidence = {k: str(v)[:2000] for k, v in evidence.items()}


def problem_call(fn: Callable, *args: Any) -> Any:
    """Call problem code (its module, get_inputs, get_init_inputs, Model): whatever it raises is the problem's."""
    try:
        return fn(*args)
    except ProblemError as exc:
        raise ProblemFailed(exc.reason, exc.detail) from None
    except BaseException as exc:  # noqa: BLE001  (the problem's code, whatever it raised)
        reason = "reference_out_of_memory" if is_oom(exc) else "reference_failed"
        raise ProblemFailed(reason, short(exc)) from None


def short(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-1500:]


def is_oom(exc: BaseException) -> bool:
    text = str(exc).lower()
    return isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or "out of memory" in text or \
        "can't allocate memory" in text


def is_device_fault(exc: BaseException) -> bool:
    kind = type(exc).__module__ + "." + type(exc).__name__
    return "CUDA error" in str(exc) or "AcceleratorError" in kind


def innermost_file(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb.tb_frame.f_code.co_filename if tb is not None else ""


def candidate_verdict(exc: BaseException, trial: str) -> EarlyVerdict:
    """The verdict for an exception the candidate's code raised (or caused) during `trial`."""
    if isinstance(exc, SystemExit):
        return EarlyVerdict("runtime_error", "sys_exit", trial=trial, code=exc.code)
    text = short(exc)
    kind = type(exc).__module__ + "." + type(exc).__name__
    if "CompilationError" in kind or "triton.compiler" in kind:
        return EarlyVerdict("compile_error", "triton_compile", trial=trial, error=text)
    if is_oom(exc):
        return EarlyVerdict("runtime_error", "out_of_memory", trial=trial, error=text)
    if is_device_fault(exc):
        return EarlyVerdict("runtime_error", "cuda_error", trial=trial, error=text)
    return EarlyVerdict("runtime_error", "exception", trial=trial, error=text)
