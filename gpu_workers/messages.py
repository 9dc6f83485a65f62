"""Every message between the evaluator's processes, typed: the pool's Job to a worker, the worker's JobAnswer, a build process's BuildOutcome and a SandboxRefusal from either; shapes only, no behaviour and no torch."""

from __future__ import annotations

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers.result import EvalResult

BUILD_LINE = "KZ_BUILD "  # a build process's last line: this, then its BuildOutcome as JSON
CONFINED, REFUSED = "KZ_CONFINED", "KZ_REFUSED "  # printed before candidate code runs; REFUSED + SandboxRefusal JSON


class Job(msgspec.Struct, kw_only=True):
    """The pool to a worker (msgpack over its stdin): one evaluation."""

    problem_src: str
    candidate_src: str
    device: str  # "cpu" or "cuda:N"
    scratch_dir: str
    config: EvaluatorConfig
    gpu: str = ""
    extensions_dir: str = ""  # prebuilt CUDA extensions (load_inline finds them there)
    arch_list: str = ""  # TORCH_CUDA_ARCH_LIST the extensions were built for
    slim_headers: bool = False  # the extensions were built with gpu_workers/headers.py's lighter headers
    gpu_sharing: int = 1  # evaluator workers sharing this GPU: each has a share of its memory (memory.py)
    alone: bool = False  # take the GPU alone from the start: the retry of an evaluation that ran short of memory


class SandboxRefusal(msgspec.Struct):
    """A job's or build's process could not get the containment required of it, and ran nothing of the candidate."""

    missing: list[str]  # the mechanisms (confine.REQUIRED names) that did not hold
    in_force: str  # what did hold (confine.label)


class JobAnswer(msgspec.Struct, omit_defaults=True):
    """A worker to the pool (msgpack, signed by the job's child): the job's result, or its refusal to run."""

    result: EvalResult | None = None
    refusal: SandboxRefusal | None = None


class BuildOutcome(msgspec.Struct, omit_defaults=True):
    """What one build of a candidate's CUDA extensions came to (the build process's last line, and the pool's record)."""

    ok: bool
    error: str = ""
    compile_s: float = 0.0
    timeout: bool = False
    log: str = ""  # the build's output, its tail (filled in by the pool)
