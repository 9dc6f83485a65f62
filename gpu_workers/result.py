"""The evaluator's verdict type (EvalResult: the schema's Evaluation, stamped with this version) and errors.

A service turns an EvalResult into a SampleEvaluated (an Evaluation plus the sample's ids) with
`msgspec.structs.asdict`.
"""

from __future__ import annotations

from kernelzero.schemas import Evaluation

# Bump when a rule changes what a candidate's verdict would be: the result cache keys on it.
EVALUATOR_VERSION = "kz-eval-2"  # 2: unjoined side streams rejected; unwritten outputs found by a re-run


class EvalResult(Evaluation, kw_only=True):
    evaluator_version: str = EVALUATOR_VERSION


class ProblemFailed(RuntimeError):
    """The reference problem itself is unusable (fails, non-deterministic, constant); not the candidate's fault."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"problem {reason}: {detail}" if detail else f"problem {reason}")
        self.reason = reason
        self.detail = detail
