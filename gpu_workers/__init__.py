"""The evaluator: compile, check and time candidate kernels; a library first, knows nothing of the log.

Public API (stable; other stages and benchmarks code against it):
    EvalResult, ProblemFailed, SandboxUnavailable, EVALUATOR_VERSION, evaluate(problem_src, candidate_src, config,
    device=), EvaluatorPool (async context manager; await pool.evaluate(problem_src, candidate_src)).
Importing this package does not import torch.
"""

from kernelzero.gpu_workers.pool import EvaluatorPool, evaluate
from kernelzero.gpu_workers.result import EVALUATOR_VERSION, EvalResult, ProblemFailed
from kernelzero.gpu_workers.sandbox import SandboxUnavailable

__all__ = ["EVALUATOR_VERSION", "EvalResult", "EvaluatorPool", "ProblemFailed", "SandboxUnavailable", "evaluate"]
