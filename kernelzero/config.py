"""All configuration, typed: a TOML file overlaid by KERNELZERO_<SECTION>_<KEY> environment variables.

Every environment variable the project reads is read here. Validation happens once, at start;
an error names the bad key (and the variable or file it came from). Values are not checked for
semantic sense beyond their type and each section's `rules()` (values that would silently break a run).

The sections live here, in the foundation, not with the stage each is named after: like the
events in schemas/, they are a contract several stages read. The trainer reads the Coder's and
Proposer's model settings (it trains those models), the validator and the sandbox launcher the
evaluator's containment settings, the Proposer's trainer the frontier's band, and an evaluation
Job carries the evaluator's section across processes. A stage that registered its own section
would make each of those readers import another stage, or read untyped dictionaries.
"""

from __future__ import annotations

import os
import sys
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, Mapping

import msgspec

ENV_PREFIX = "KERNELZERO_"


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    def __post_init__(self) -> None:
        for key, (ok, rule) in self.rules().items():
            if not ok:
                raise ValueError(f"`{key}` {rule} (got {getattr(self, key)!r})")

    def rules(self) -> dict[str, tuple[bool, str]]:
        """{key: (holds, what it must be)}: values the types admit but that would silently break a run."""
        return {}


def _positive(value: float) -> tuple[bool, str]:
    return value > 0, "must be > 0"


def _at_least(value: float, low: float) -> tuple[bool, str]:
    return value >= low, f"must be >= {low:g}"


def _fraction(value: float) -> tuple[bool, str]:
    return 0.0 <= value <= 1.0, "must be between 0 and 1"


class LogConfig(Section):
    url: str = "embedded:runs/default/log.sqlite"  # or kafka://127.0.0.1:9092
    session_timeout_s: float = 10.0  # a silent group member loses its partitions after this


class EvaluatorConfig(Section):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    timeout_s: float = 120.0  # one candidate, compile excluded
    compile_timeout_s: float = 600.0
    trials: int = 3  # correctness trials with fresh seeds
    seed: int = 0
    rtol: float = 1e-2
    atol: float = 1e-2
    timing_budget_s: float = 2.0
    timing_min_reps: int = 20
    timing_max_reps: int = 1000
    # nothing is timed on the CPU, so no speed is earned there; this many calls are still made and judged as
    # timed calls would be, to test the timed-call check without a GPU (each runs the Triton interpreter)
    cpu_timed_calls: int = 0
    memory_limit_gb: float = 16.0  # host address-space limit for candidate processes
    build_workers: int = 0  # CUDA extension builds in parallel; 0 = one per CPU core
    build_headers: Literal["split", "slim", "full"] = "split"  # lightest first, heavier on failure (gpu_workers/headers.py)
    # torch's binding headers compiled once per machine, shared by every pool (gpu_workers/prebuilt_headers.py); "": none
    precompiled_headers_dir: str = "~/.cache/kernelzero/pch"
    cache_dir: str = "~/.cache/kernelzero"
    workers_per_gpu: int = 0  # 0: from the GPU's memory and the CPU count (gpu_workers/pool.py, workers_per_gpu)
    cpu_workers: int = 1  # workers on a machine without a GPU (Triton's interpreter): one per core pays
    static_checks: bool = True  # AST rules; off only to test the run-time defences behind them
    allowed_torch_ops: list[str] = msgspec.field(default_factory=lambda: [  # aten compute allowed beside a custom kernel
        "mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution"])
    # stop timing once the median's standard error is this share of it (or 0.5 us); separate jobs of one kernel agree
    # only to 1-7% (clocks differ between jobs), so a finer stop (0.002 before) bought no agreement (docs/BENCHMARKS.md)
    timing_rel_se: float = 0.01
    timing_input_sets: int = 4  # input sets rotated between timed calls
    physical_slack: float = 0.5  # reject runtimes below this share of the bytes/bandwidth, flops/peak bound
    # what the evaluator may use of a GPU's memory (torch caching allocator): workers sharing the GPU each
    # get an equal share, and an evaluation that needs more runs alone with all of it (gpu_workers/memory.py)
    gpu_memory_fraction: float = 0.9
    # evaluate as if the GPU had this many GB (0: its own size): the plan for a smaller card, tested on any card
    gpu_memory_cap_gb: float = 0.0
    time_compiled_reference: bool = False  # also time torch.compile(reference), once per problem (KernelBench reports both)
    # held-out samples timed on a GPU (their speedups); false: judged as on the CPU, without a clock, for pass rates
    # alone: timing takes the GPU in turns, about 1 s a tiny module's sample (docs/evaluator.md, Untimed evaluations)
    time_heldout: bool = True
    # containment of candidate processes (kernelzero/sandbox/launcher.py, confine.py; docs/evaluator.md, Containment)
    sandbox: bool = True  # off only to measure what containment costs; needs require_sandbox = false
    require_sandbox: bool | Literal["auto"] = "auto"  # auto: required wherever bwrap is found
    bwrap: str = ""  # path to bubblewrap; empty: `bwrap` on PATH, then .sandbox-tools/bwrap in the project
    candidate_uid: int = 65534  # host uid (and gid) candidate code runs as when the evaluator runs as root
    max_processes: int = 1024  # RLIMIT_NPROC of a candidate's uid (threads count too)
    max_open_files: int = 4096  # RLIMIT_NOFILE of a candidate process
    sandbox_binds: list[str] = []  # extra host paths candidate processes see, read-only

    def rules(self) -> dict[str, tuple[bool, str]]:
        return {
            "timeout_s": _positive(self.timeout_s),
            "compile_timeout_s": _positive(self.compile_timeout_s),
            "trials": _at_least(self.trials, 1),
            "gpu_memory_fraction": (0.0 < self.gpu_memory_fraction <= 1.0, "must be in (0, 1]"),
            "gpu_memory_cap_gb": _at_least(self.gpu_memory_cap_gb, 0),
            "workers_per_gpu": _at_least(self.workers_per_gpu, 0),
            "cpu_workers": _at_least(self.cpu_workers, 1),
            "timing_input_sets": _at_least(self.timing_input_sets, 1),
            "cpu_timed_calls": _at_least(self.cpu_timed_calls, 0),
            "sandbox": (self.sandbox or self.require_sandbox is False,
                        "= false needs require_sandbox = false: containment is required otherwise"),
            "candidate_uid": (self.candidate_uid > 0, "must be a uid other than root"),
            "max_processes": _at_least(self.max_processes, 1),
            "max_open_files": _at_least(self.max_open_files, 16),
        }


class GenerationConfig(Section):
    """What the shared generation interface needs (producers/generation.py); [coder] and [proposer] both have it."""

    model: str = ""  # a local directory in Hugging Face layout, or the served model's name (openai)
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    openai_base_url: str = "http://127.0.0.1:8000/v1"
    openai_api_key: str = ""
    request_timeout_s: float = 120.0
    max_retries: int = 4
    concurrency: int = 8
    device: Literal["auto", "cpu", "cuda"] = "auto"  # transformers backend; auto = cuda when available
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: bfloat16 on CUDA, float32 on CPU
    adapter: str = ""  # a LoRA adapter directory (peft) loaded on top of `model`
    chat: bool = False  # wrap the prompt in the tokenizer's chat template (/v1/chat/completions for openai)
    allow_download: bool = False  # let a hub id in `model` download; off: only local dirs and the HF cache
    seed: int = 0
    openai_token_ids: bool = True  # ask for vLLM/SGLang token-id extensions; off for servers rejecting them
    vllm_gpu_memory_utilization: float = 0.85

    def rules(self) -> dict[str, tuple[bool, str]]:
        # log-probabilities of T <= 0 do not exist: nothing sampled greedily can be trained on (docs/trainer.md)
        return {
            "temperature": _positive(self.temperature),
            "top_p": (0.0 < self.top_p <= 1.0, "must be in (0, 1]"),
            "max_tokens": _at_least(self.max_tokens, 1),
            "concurrency": _at_least(self.concurrency, 1),
        }


class CoderConfig(GenerationConfig):
    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    target: Literal["cuda", "triton"] = "triton"
    prompt: Literal["full", "compact"] = "full"  # compact: the reference alone, for from-scratch models
    group_size: int = 8
    repair_turns: int = 0
    max_inflight_groups: int = 4  # modules polled at once, and sampled in one generation per kind

    def rules(self) -> dict[str, tuple[bool, str]]:
        return super().rules() | {
            "group_size": _at_least(self.group_size, 1),
            "repair_turns": _at_least(self.repair_turns, 0),
            "max_inflight_groups": _at_least(self.max_inflight_groups, 1),
        }


class ProposerConfig(GenerationConfig):
    backend: Literal["synth", "transformers", "vllm", "openai"] = "synth"
    api_set_size: int = 3
    min_api_set_size: int = 0  # sets get a size drawn uniformly from [this, api_set_size]; 0 = api_set_size always
    scale: float = 1.0  # problem size: 1 = GPU-sized (~2**26 elements); the CPU demo uses ~2**-13
    sampling: Literal["frontier", "uniform"] = "frontier"  # uniform: API sets drawn without the frontier (a baseline)
    explore: float = 0.2  # share of API draws spread by inverse attempts (rarely tried APIs first)
    batch: int = 8  # modules proposed per round
    max_pending: int = 32  # stop proposing while this many modules wait for the validator
    rounds: int = 0  # `serve proposer` stops after this many rounds; 0 = run until interrupted
    apis: list[str] = []  # the API pool sets are drawn from; empty = the whole catalog (kernelzero/kit/api_catalog.py)
    exclude_sets: list[str] = []  # API sets never proposed (held out), each as its sorted APIs joined by " + "
    prompt: Literal["full", "compact"] = "full"  # compact: the API list alone, for from-scratch models

    def rules(self) -> dict[str, tuple[bool, str]]:
        return super().rules() | {
            "api_set_size": _at_least(self.api_set_size, 1),
            "min_api_set_size": (0 <= self.min_api_set_size <= self.api_set_size, "must be in [0, api_set_size]"),
            "scale": _positive(self.scale),
            "explore": _fraction(self.explore),
            "batch": _at_least(self.batch, 1),
            "max_pending": _at_least(self.max_pending, 1),
            "rounds": _at_least(self.rounds, 0),
        }


class ValidatorConfig(Section):
    timeout_s: float = 60.0
    max_runtime_ms: float = 5000.0
    max_memory_gb: float = 8.0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    cpu_threads: int = 1  # torch threads of a validation run on the CPU
    workers: int = 0  # modules validated at once, each in a sandbox of its own; 0: one per core, at most 4

    def rules(self) -> dict[str, tuple[bool, str]]:
        return {"workers": _at_least(self.workers, 0)}


class TrainerConfig(Section):
    group_deadline_s: float = 600.0
    gate: Literal["group", "window"] = "group"
    gate_window: int = 64
    tau: float = 0.5  # correctness gate threshold
    perf_lambda: float = 0.5
    log2_speedup_min: float = -1.0
    log2_speedup_max: float = 2.0
    rejected_penalty: float = -0.5
    scale_std: bool = True
    eps: float = 1e-4
    staleness_k: int = 4
    stale: Literal["drop", "importance_weight"] = "drop"
    learning_rate: float = 1e-5  # full fine-tuning (lora_rank = 0)
    lora_learning_rate: float = 1e-4  # a LoRA adapter's weights start at zero and move ten times less per step
    clip_eps: float = 0.2
    kl_beta: float = 0.0
    # trust region: after a step, the mean per-token KL of the policy to the one it started from (on the step's
    # own tokens) stays within this; a step that would leave it is shrunk by halves, then undone (0: off)
    kl_max: float = 0.0
    lora_rank: int = 16  # 0 = full fine-tuning
    checkpoint_dir: str = "runs/default/checkpoints"
    coder_steps: int = 1  # alternation: N Coder steps, then M Proposer steps
    proposer_steps: int = 1
    min_group_results: int = 2  # a group closed by the deadline with fewer results is dropped
    is_cap: float = 2.0  # truncation of the importance weight of stale samples (stale = importance_weight)
    groups_per_step: int = 4  # scored Coder groups gathered into one policy update
    proposer_batch: int = 8  # scored proposed modules gathered into one Proposer update
    novelty_bonus: float = 0.2  # Proposer reward for a module whose fingerprint was not seen before
    micro_batch_size: int = 4  # sequences per forward/backward; gradients accumulate over the step
    max_grad_norm: float = 1.0
    lora_alpha: int = 32
    gradient_checkpointing: bool = False
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"  # auto: bfloat16 on CUDA, float32 on the CPU
    device: Literal["auto", "cpu", "cuda"] = "auto"
    # several ranks: a collective waiting longer fails; rank 0 pings the others at a quarter of it while idle
    collective_timeout_s: float = 600.0
    # speedups of one group within this relative distance count as equal: the evaluator's spread between
    # evaluations of one kernel was 0.4-1.3% on an H200 (docs/BENCHMARKS.md), so noise earns no advantage
    speedup_tolerance: float = 0.02

    def rules(self) -> dict[str, tuple[bool, str]]:
        return {
            "group_deadline_s": _positive(self.group_deadline_s),
            "gate_window": _at_least(self.gate_window, 1),
            "tau": _fraction(self.tau),
            "perf_lambda": _at_least(self.perf_lambda, 0),
            "log2_speedup_max": (self.log2_speedup_min <= self.log2_speedup_max, "must be >= log2_speedup_min"),
            "rejected_penalty": (self.rejected_penalty <= 0, "must be <= 0 (a penalty)"),
            "eps": _positive(self.eps),
            "staleness_k": _at_least(self.staleness_k, 0),
            "learning_rate": _at_least(self.learning_rate, 0),
            "lora_learning_rate": _at_least(self.lora_learning_rate, 0),
            "kl_max": _at_least(self.kl_max, 0),
            "clip_eps": _positive(self.clip_eps),
            "kl_beta": _at_least(self.kl_beta, 0),
            "lora_rank": _at_least(self.lora_rank, 0),
            "lora_alpha": _at_least(self.lora_alpha, 1),
            "coder_steps": (self.coder_steps >= 0 and self.coder_steps + self.proposer_steps > 0,
                            "must be >= 0, and not 0 together with proposer_steps"),
            "proposer_steps": _at_least(self.proposer_steps, 0),
            "min_group_results": _at_least(self.min_group_results, 1),
            "is_cap": _positive(self.is_cap),
            "groups_per_step": _at_least(self.groups_per_step, 1),
            "proposer_batch": _at_least(self.proposer_batch, 1),
            "novelty_bonus": _at_least(self.novelty_bonus, 0),
            "micro_batch_size": _at_least(self.micro_batch_size, 1),
            "max_grad_norm": _positive(self.max_grad_norm),
            "collective_timeout_s": _positive(self.collective_timeout_s),
            "speedup_tolerance": _at_least(self.speedup_tolerance, 0),
        }


class AnalyticsConfig(Section):
    db: str = "runs/default/analytics.duckdb"
    band_low: float = 0.2
    band_high: float = 0.8
    target: float = 0.5
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    explore: float = 0.5  # frontier weight bonus per unit of posterior std relative to the prior's
    frontier_versions: int = 0  # frontier over the last N Coder policy versions; 0 = all
    batch_records: int = 5000  # records per projection transaction
    snapshot_every: int = 64  # the projector publishes frontier.snapshot after this many new evaluations
    snapshot_max_entries: int = 256  # highest-weight frontier entries per snapshot
    frontier_turns: Literal["first", "all"] = "first"  # repair turns count towards the frontier only with "all"

    def rules(self) -> dict[str, tuple[bool, str]]:
        return {
            "band_low": (0.0 <= self.band_low < self.band_high, "must be >= 0 and < band_high"),
            "band_high": (self.band_high <= 1.0, "must be <= 1"),
            "target": (self.band_low <= self.target <= self.band_high, "must lie in [band_low, band_high]"),
            "prior_alpha": _positive(self.prior_alpha),
            "prior_beta": _positive(self.prior_beta),
            "explore": _at_least(self.explore, 0),
            "frontier_versions": _at_least(self.frontier_versions, 0),
            "batch_records": _at_least(self.batch_records, 1),
            "snapshot_every": _at_least(self.snapshot_every, 1),
            "snapshot_max_entries": _at_least(self.snapshot_max_entries, 1),
        }


class Config(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    log: LogConfig = msgspec.field(default_factory=LogConfig)
    evaluator: EvaluatorConfig = msgspec.field(default_factory=EvaluatorConfig)
    coder: CoderConfig = msgspec.field(default_factory=CoderConfig)
    proposer: ProposerConfig = msgspec.field(default_factory=ProposerConfig)
    validator: ValidatorConfig = msgspec.field(default_factory=ValidatorConfig)
    trainer: TrainerConfig = msgspec.field(default_factory=TrainerConfig)
    analytics: AnalyticsConfig = msgspec.field(default_factory=AnalyticsConfig)


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and where it came from."""


def _sections() -> dict[str, type[Section]]:
    return {f.name: f.type for f in msgspec.structs.fields(Config)}


def _env_overrides(env: Mapping[str, str]) -> dict[str, dict[str, tuple[str, str]]]:
    """{section: {key: (raw value, variable name)}} from KERNELZERO_SECTION_KEY variables."""
    sections = _sections()
    out: dict[str, dict[str, tuple[str, str]]] = {}
    for name, value in env.items():
        if not name.startswith(ENV_PREFIX):
            continue
        rest = name[len(ENV_PREFIX):].lower()
        section, _, key = rest.partition("_")
        if section not in sections or not key:
            raise ConfigError(f"{name}: no such setting (sections: {', '.join(sections)})")
        known = {f.name for f in msgspec.structs.fields(sections[section])}
        if key not in known:
            raise ConfigError(f"{name}: [{section}] has no key {key!r} (keys: {', '.join(sorted(known))})")
        out.setdefault(section, {})[key] = (value, name)
    return out


def _where(err: msgspec.ValidationError) -> str:
    match = re.search(r"at `\$\.([^`]+)`", str(err))
    return match.group(1) if match else ""


def load_config(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Read TOML at `path` (optional), overlay KERNELZERO_* variables, validate; raises ConfigError."""
    env = os.environ if env is None else env
    data: dict[str, Any] = {}
    source = "defaults"
    if path is not None:
        source = str(path)
        try:
            data = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    origin: dict[str, str] = {}
    for section, keys in _env_overrides(env).items():
        target = data.setdefault(section, {})
        if not isinstance(target, dict):
            raise ConfigError(f"{source}: [{section}] must be a table")
        for key, (raw, var) in keys.items():
            target[key] = _parse_env_value(raw)
            origin[f"{section}.{key}"] = var
    try:
        return msgspec.convert(data, Config, strict=False)
    except msgspec.ValidationError as exc:
        key = _where(exc)
        came_from = origin.get(key, source)
        message = str(exc).split(" - at ")[0]
        field = re.match(r"(?:Object contains unknown field )?`([^`]+)`", message)
        if field:  # an unknown key, or a rule of Section.rules(): both name the field first
            key = f"{key}.{field.group(1)}" if key else field.group(1)
            came_from = origin.get(key, source)
        raise ConfigError(f"config key {key or '?'} ({came_from}): {message}") from None


def _parse_env_value(raw: str) -> Any:
    """Environment values are TOML scalars when they parse as one (5, 0.5, true), else plain strings."""
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw


def dump_config(config: Config) -> str:
    """The effective configuration as TOML (for `kernelzero config` and run directories)."""
    lines: list[str] = []
    for section, values in msgspec.to_builtins(config).items():
        lines.append(f"[{section}]")
        lines += [f"{key} = {msgspec.json.encode(value).decode()}" for key, value in values.items()]
        lines.append("")
    return "\n".join(lines)  # JSON scalars are valid TOML scalars


class LaunchRanks(msgspec.Struct, frozen=True):
    """Where this process sits in a multi-process launch (torchrun, `accelerate launch`); one process: 0 of 1."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0


def launch_ranks(env: Mapping[str, str] | None = None) -> LaunchRanks:
    """The launcher's RANK, WORLD_SIZE and LOCAL_RANK (set by torchrun and `accelerate launch`)."""
    env = os.environ if env is None else env
    try:
        ranks = LaunchRanks(int(env.get("RANK", "0")), int(env.get("WORLD_SIZE", "1")), int(env.get("LOCAL_RANK", "0")))
    except ValueError as exc:
        raise ConfigError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers: {exc}") from None
    if not 0 <= ranks.rank < ranks.world_size:
        raise ConfigError(f"RANK {ranks.rank} is outside WORLD_SIZE {ranks.world_size}")
    return ranks


def load_for_command(path: str | None, broker: str | None, command: str) -> Config | None:
    """A command's configuration: its --config file, its --broker over the log's URL; None after printing why it is bad."""
    try:
        config = load_config(path)
    except ConfigError as exc:
        print(f"{command}: {exc}", file=sys.stderr)
        return None
    if broker:
        config.log.url = broker
    return config
