"""The evaluator: compile, check and time candidate kernels; a library first, knows nothing of the log.

Public API (stable; other stages and benchmarks code against it):
    SandboxUnavailable, EVALUATOR_VERSION, evaluate(problem_src, candidate_src, config, device=),
    EvaluatorPool (async context manager; await pool.evaluate(problem_src, candidate_src)); both
    return the schema's Evaluation (kernelzero.schemas), stamped with EVALUATOR_VERSION.
Neither raises for a bad problem or a fault of the evaluator's own: those are results with the
verdicts `problem_error` and `evaluator_error` (schemas.UNCHARGED_VERDICTS: never the candidate's).
SandboxUnavailable: the containment `[evaluator] require_sandbox` asks for is missing (the pool refuses to start).
Importing this package does not import torch.
"""

from kernelzero.gpu_workers.pool import EvaluatorPool, evaluate
from kernelzero.gpu_workers.result import EVALUATOR_VERSION
from kernelzero.sandbox.launcher import SandboxUnavailable

__all__ = ["EVALUATOR_VERSION", "EvaluatorPool", "SandboxUnavailable", "evaluate"]
