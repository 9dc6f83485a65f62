"""The evaluator's verdict type (EvalResult) and version; field names mirror schemas.SampleEvaluated, nothing more.

A service copies an EvalResult onto a SampleEvaluated with `msgspec.structs.asdict`; the test
suite checks that every field here exists there.
"""

from __future__ import annotations

from typing import Literal

import msgspec

# Bump when a rule changes what a candidate's verdict would be: the result cache keys on it.
EVALUATOR_VERSION = "kz-eval-1"

Verdict = Literal["correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected"]


class EvalResult(msgspec.Struct, kw_only=True):
    verdict: Verdict
    reason: str  # machine-readable: ok, output_mismatch, static:monkey_patch, worker_crashed:SIGSEGV, ...
    checks: list[str] = []  # the checks that ran, in order
    evidence: dict[str, str] = {}
    compile_s: float = 0.0
    trials: int = 0
    max_abs_err: float | None = None
    rel_err: float | None = None
    runtime_ms: float | None = None
    runtime_iqr_ms: float | None = None
    timing_n: int = 0
    ref_eager_ms: float | None = None
    speedup: float | None = None
    gpu: str = ""
    device: str = "cpu"
    evaluator_version: str = EVALUATOR_VERSION
    cached: bool = False


class ProblemFailed(RuntimeError):
    """The reference problem itself is unusable (fails, non-deterministic, constant); not the candidate's fault."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"problem {reason}: {detail}" if detail else f"problem {reason}")
        self.reason = reason
        self.detail = detail
