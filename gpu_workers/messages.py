"""Every message between the evaluator's processes, typed: the pool's Job to a worker, the worker's JobAnswer, a build process's BuildOutcome (a SandboxRefusal from either is kernelzero/sandbox/messages.py's); shapes only, no behaviour and no torch."""

from __future__ import annotations

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers.result import EvalResult
from kernelzero.sandbox.messages import SandboxRefusal

BUILD_LINE = "KZ_BUILD "  # a build process's last line: this, then its BuildOutcome as JSON


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
    headers: str = "full"  # the gpu_workers/headers.py mode the extensions were built in
    pch: str = ""  # the precompiled header the build passed to g++ (its path is part of the build's hash)
    gpu_sharing: int = 1  # evaluator workers sharing this GPU: each has a share of its memory (memory.py)
    alone: bool = False  # take the GPU alone from the start: the retry of an evaluation that ran short of memory


class JobAnswer(msgspec.Struct, omit_defaults=True):
    """A worker to the pool (msgpack, signed by the job's child): the job's result, or its refusal to run."""

    result: EvalResult | None = None
    refusal: SandboxRefusal | None = None


class Built(msgspec.Struct, omit_defaults=True):
    """How a candidate's extensions were built (the pool's signed mark beside them): what a worker needs to load them."""

    mode: str = "full"  # the gpu_workers/headers.py mode the build ran in
    headers: str = "full"  # the mode in effect, for evidence ("slim" where nothing could be split)
    pch: str = ""  # the precompiled header the build passed to g++, as the build saw it
    cpu_s: float = 0.0  # CPU seconds its builds took, every mode tried


class BuildOutcome(msgspec.Struct, omit_defaults=True):
    """What one build of a candidate's CUDA extensions came to (the build process's last line, and the pool's record)."""

    ok: bool
    error: str = ""
    compile_s: float = 0.0
    timeout: bool = False
    log: str = ""  # the build's output, its tail (filled in by the pool)
    headers: str = ""  # the mode in effect: "split" only where a CUDA source was split (gpu_workers/headers.py)
    cpu_s: float = 0.0  # CPU seconds of the build process and the compilers it waited for
