"""Every message between the project's processes, typed: the sandbox's lines and probe report, the evaluator's jobs and builds, the validator's requests, the trainer's orders to its ranks; shapes only, no behaviour.

Who sends each to whom (events between stages are schemas/events.py's, on the log):
- the sandbox's launcher (kernelzero/sandbox/launcher.py) gives every process it starts for
  untrusted code its Confinement (JSON, on the command line), the evaluator's Vantage inside;
- a confined process (a build, a job's fork, a validator run) prints CONFINED before untrusted code
  runs, or REFUSED and a SandboxRefusal as JSON and runs nothing; the start-up probe
  (kernelzero/sandbox/probe.py) prints a ProbeReport to its launcher (kernelzero/sandbox/launcher.py);
- the evaluator's pool (gpu_workers/pool.py) sends a Job to a worker (gpu_workers/zygote.py, msgpack),
  which answers a JobAnswer (a reference-only job's holds the problem's ReferenceTiming); a build process
  (gpu_workers/build.py) prints BUILD_LINE and its BuildOutcome as JSON; the pool keeps how a candidate's
  extensions were Built beside them;
- the validator (consumers/validator.py) sends a ValidationRequest to its fork server
  (consumers/validator_child.py, msgpack), which answers a ValidationAnswer holding a ModuleVerdict;
- the trainer's rank 0 (consumers/data_parallel.py) sends every other rank a RankOrder (msgpack, through
  torch.distributed): step on these TrainingSamples, wait, or stop.
"""

from __future__ import annotations

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.schemas.events import Evaluation

# ---- the sandbox (kernelzero/sandbox/) ----

CONFINED, REFUSED = "KZ_CONFINED", "KZ_REFUSED "  # printed before untrusted code runs; REFUSED + SandboxRefusal JSON


class SandboxRefusal(msgspec.Struct):
    """A job's or build's process could not get the containment required of it, and ran nothing of the candidate."""

    missing: list[str]  # the mechanisms (confine.REQUIRED names) that did not hold
    in_force: str  # what did hold (confine.label)


class ProbeReport(msgspec.Struct):
    """The start-up probe to its launcher (probe.py's last line, JSON): what holds for an untrusted process here."""

    in_force: list[str]  # confine.MECHANISMS names, in that order
    compiler: str  # the C compiler that ran inside, "" when none did


class Vantage(msgspec.Struct, frozen=True):
    """Where the evaluator itself stands; a candidate process standing elsewhere is contained by that much."""

    namespaces: dict[str, int]
    uid: int
    seccomp_filters: int


class Confinement(msgspec.Struct, frozen=True, kw_only=True):
    """The launcher to every process it starts for untrusted code (JSON, its first argument; kernelzero/sandbox/confine.py
    applies it): what the process applies to itself, and what it must find in force."""

    launcher: str  # "bwrap 0.8.0" when started in bubblewrap, "none" otherwise
    switch_id: int = -1  # uid and gid the candidate takes in its user namespace; -1 keeps the evaluator's
    max_processes: int
    max_open_files: int
    required: list[str] = []
    also_writable: list[str] = []  # beside a process's own folders, e.g. the job's /dev/shm in bubblewrap
    evaluator: Vantage


# ---- the evaluator (gpu_workers/) ----

BUILD_LINE = "KZ_BUILD "  # a build process's last line: this, then its BuildOutcome as JSON


class ReferenceTiming(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The reference's times on one GPU, measured by a job that ran no candidate code; the pool keeps it per problem and GPU."""

    eager_ms: float  # median of the timed calls, the synchronization's fixed cost (measured on them) subtracted
    eager_iqr_ms: float
    n: int
    warmup_s: float
    compiled_ms: float = 0.0  # the torch.compile'd reference, when timed (0: not asked for, or its compile failed)
    compile_error: str = ""
    clock_ms: float = 0.0  # the clock probe's time after the reference's warm-up (gpu_workers/timing.py, _warm_up)


class Job(msgspec.Struct, kw_only=True):
    """The pool to a worker (msgpack over its stdin): one evaluation, or with `reference_only` the reference's timing alone."""

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
    reference: ReferenceTiming | None = None  # the reference's times from a reference-only job; None: timed before import
    reference_only: bool = False  # prepare and time the reference, then answer its ReferenceTiming (no candidate)
    timed: bool = True  # False: judged as on the CPU, no clock (the timed calls made unclocked, `cpu_timed_calls`)


class JobAnswer(msgspec.Struct, omit_defaults=True):
    """A worker to the pool (msgpack, signed by the job's child): the job's result, or its refusal to run."""

    result: Evaluation | None = None  # stamped with the evaluator's version (gpu_workers/result.py)
    reference: ReferenceTiming | None = None  # a reference-only job's answer when the reference could be timed
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


# ---- the module validator (consumers/validator.py) ----

class ModuleVerdict(msgspec.Struct, kw_only=True):
    """A Proposer module accepted or rejected, and what its run showed; the validator's rules make it."""

    ok: bool
    reason: str = ""  # one of validator.REASONS, "api_not_called:<api>" for an API never traced
    detail: str = ""
    op_trace: list[str] = []  # function-level torch calls seen in forward, first appearance order
    ast_hash: str = ""
    trace_hash: str = ""
    runtime_ms: float = 0.0
    peak_memory_mb: float = 0.0
    device: str = ""


class ValidationRequest(msgspec.Struct, kw_only=True):
    """The validator to its fork server (consumers/validator_child.py, msgpack on a pipe); the answer is a ValidationAnswer."""

    source: str
    apis: list[str]
    seed: int
    device: str
    max_runtime_ms: float
    max_memory_gb: float
    cpu_threads: int
    timeout_s: float
    scratch_dir: str = ""  # the run's own folder, the only one it may write


class ValidationAnswer(msgspec.Struct, omit_defaults=True):
    """The fork server's answer: the module's verdict (without its ast_hash), or the refusal to run it uncontained."""

    verdict: ModuleVerdict | None = None
    refusal: SandboxRefusal | None = None


# ---- the trainer's ranks (consumers/data_parallel.py) ----

class TrainingSample(msgspec.Struct, frozen=True, kw_only=True):
    """One scored completion ready for the policy update (the Coder's and the Proposer's alike)."""

    sample_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]  # per generated token, under the behaviour policy
    advantage: float
    reward: float = 0.0
    weight: float = 1.0
    policy_version: int = 0  # the behaviour policy; staleness is judged again at update time
    temperature: float = 1.0


class RankStep(msgspec.Struct, tag="step"):
    """Rank 0 to the others: step the `role`'s learner on these samples (each rank trains on its share)."""

    role: str
    samples: list[TrainingSample]


class RankWait(msgspec.Struct, tag="wait"):
    """Rank 0 to the others while it waits for data: nothing to do, keep waiting (the collective does not time out)."""


class RankStop(msgspec.Struct, tag="stop"):
    """Rank 0 to the others: the service is stopping."""


RankOrder = RankStep | RankWait | RankStop
