"""Every event payload KernelZero puts on the log, as msgspec Structs; the wire contract, imports nothing of the project.

Adding a field: give it a default (old events decode). Changing a field's meaning: bump the
type's version in `SCHEMA_VERSIONS` and write the step that upcasts the old version in
`schemas.envelope` (none exists: every type is at version 1).
"""

from __future__ import annotations

from typing import Literal, get_args

import msgspec

Backend = Literal["cuda", "triton"]
Verdict = Literal["correct", "incorrect", "compile_error", "runtime_error", "timeout", "rejected",
                  "evaluator_error", "problem_error"]
VERDICTS: tuple[str, ...] = get_args(Verdict)  # the one list of verdicts, in this order
# Nobody's fault but the evaluator's (its own code raised) or the problem's (its reference cannot be
# evaluated): such a sample is never charged, rewarded or trained on, and is no attempt in the frontier.
UNCHARGED_VERDICTS: tuple[str, ...] = ("evaluator_error", "problem_error")
Role = Literal["coder", "proposer"]
# "heldout": a module (and its samples) for evaluation only: answered and judged like any, never trained on,
# never counted by the frontier (held-out pass rates: analytics' heldout_curve view). "probe": the same for a module
# of the training distribution, measuring what training keeps (`kernelzero experiment`)
Split = Literal["train", "heldout", "probe"]
API_SET_SEPARATOR = " + "  # an API set as one string (analytics' api_set, [proposer] exclude_sets)


def api_set_key(apis: list[str]) -> str:
    """The canonical string of an API set: its distinct APIs, sorted, joined by API_SET_SEPARATOR."""
    return API_SET_SEPARATOR.join(sorted(set(apis)))


class Payload(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of every payload: keyword-only so fields can be added with defaults in any order."""


class ModuleProposed(Payload, tag="modules.proposed"):
    module_id: str
    source: str  # KernelBench format: Model, get_inputs, get_init_inputs
    apis: list[str]  # the API set the module was asked to use
    generator: str = "llm"  # "llm" or "synth"
    level: int = 1
    prompt_hash: str = ""
    token_ids: list[int] = []
    logprobs: list[float] = []
    prompt_token_ids: list[int] = []  # what the Proposer trainer needs to score token_ids again
    temperature: float = 1.0  # the sampling temperature the logprobs were taken at


class ModuleAccepted(Payload, tag="modules.accepted"):
    module_id: str
    source: str
    apis: list[str]
    fingerprint: str  # normalized AST + op trace; duplicates share it
    op_trace: list[str] = []  # torch ops seen while running the reference
    ref_runtime_ms: float = 0.0
    level: int = 1
    split: Split = "train"
    greedy: bool = False  # a held-out measurement of greedy decoding: one sample at temperature 0, not a group
    # the Coder samples this module's group with these random numbers (None: fresh ones); a held-out module keeps
    # its seed in every measurement, so two policy versions are compared on the same draws
    sampling_seed: int | None = None


class ModuleRejected(Payload, tag="modules.rejected"):
    module_id: str
    reason: str  # machine-readable: syntax_error, missing_get_inputs, non_deterministic, ...
    detail: str = ""
    apis: list[str] = []


class SampleGenerated(Payload, tag="samples.generated"):
    sample_id: str
    module_id: str
    backend: Backend
    source: str | None  # None when the response held no usable code (see reason)
    problem_source: str  # the reference module, so the evaluator needs no other topic
    reason: str = ""  # "no_code" when source is None
    group_size: int = 1
    group_index: int = 0
    turn: int = 0
    prompt_hash: str = ""
    prompt_token_ids: list[int] = []
    token_ids: list[int] = []
    logprobs: list[float] = []  # one per generated token, under the generating policy
    temperature: float = 1.0
    apis: list[str] = []
    level: int = 1
    split: Split = "train"


class Evaluation(Payload, kw_only=True):
    """What the evaluator concludes about one candidate; the evaluator library returns exactly this."""

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
    speedup: float | None = None  # over the eager reference
    ref_compile_ms: float | None = None  # the torch.compile'd reference, when it was timed too
    speedup_compile: float | None = None
    gpu: str = ""
    device: str = "cpu"
    evaluator_version: str = ""
    cached: bool = False


class SampleEvaluated(Evaluation, tag="samples.evaluated", kw_only=True):
    sample_id: str
    module_id: str
    backend: Backend
    apis: list[str] = []
    level: int = 1
    group_size: int = 1
    turn: int = 0  # the sample's repair turn (0: a first answer), copied from samples.generated
    split: Split = "train"  # copied from samples.generated


class ScoredSample(msgspec.Struct, kw_only=True, omit_defaults=True):
    sample_id: str
    verdict: Verdict
    reward: float
    advantage: float
    speedup: float | None = None
    policy_version: int = 0
    weight: float = 1.0  # importance weight for stale samples; 0 when dropped


class GroupScored(Payload, tag="groups.scored"):
    module_id: str
    policy_version: int
    samples: list[ScoredSample]
    pass_rate: float
    gate_open: bool
    partial: bool = False  # closed by the deadline before all G results arrived
    rule: str = ""  # the CA-GRPO configuration that produced the rewards, as text
    turn: int = 0  # the repair turn of every sample in the group (0: first answers)
    informative: bool = True  # some sample has a non-zero advantage; uninformative groups are not trained on


class PolicyUpdated(Payload, tag="policy.updated"):
    role: Role
    version: int
    uri: str  # a path or URI to the weights; weights never travel through the log
    sha256: str
    step: int = 0
    metrics: dict[str, float] = {}


class FrontierEntry(msgspec.Struct, kw_only=True, omit_defaults=True):
    apis: list[str]  # one API or a pair
    attempts: int
    passes: int
    pass_mean: float
    weight: float


class FrontierSnapshot(Payload, tag="frontier.snapshot"):
    entries: list[FrontierEntry]
    band_low: float
    band_high: float
    target: float = 0.5


class DeadLetter(Payload, tag="deadletter"):
    topic: str
    partition: int
    offset: int
    reason: str  # undecodable, handler_error, ...
    error: str = ""
    key: bytes | None = None
    value: bytes = b""
    group: str = ""


PAYLOAD_TYPES: tuple[type[Payload], ...] = (
    ModuleProposed, ModuleAccepted, ModuleRejected, SampleGenerated, SampleEvaluated,
    GroupScored, PolicyUpdated, FrontierSnapshot, DeadLetter,
)

# The event type is also the topic it lives on: one topic per type keeps replay and lag simple.
SCHEMA_VERSIONS: dict[str, int] = {t.__struct_config__.tag: 1 for t in PAYLOAD_TYPES}
