"""All configuration, typed: a TOML file overlaid by KERNELZERO_<SECTION>_<KEY> environment variables.

Every environment variable the project reads is read here. Validation happens once, at start;
an error names the bad key (and the variable or file it came from). Values are not checked for
semantic sense beyond their type and the bounds stated in `__post_init__` hooks.
"""

from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path
from typing import Any, Literal, Mapping

import msgspec

ENV_PREFIX = "KERNELZERO_"


class Section(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


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
    memory_limit_gb: float = 16.0  # host address-space limit for candidate processes
    build_workers: int = 0  # CUDA extension builds in parallel; 0 = one per CPU core
    slim_headers: bool = True  # build against torch/types.h, not torch/extension.h (gpu_workers/headers.py)
    cache_dir: str = "~/.cache/kernelzero"
    workers_per_gpu: int = 1
    static_checks: bool = True  # AST rules; off only to test the run-time defences behind them
    allowed_torch_ops: list[str] = msgspec.field(default_factory=lambda: [  # aten compute allowed beside a custom kernel
        "mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "convolution"])
    timing_rel_se: float = 0.002  # stop timing once the speedup's standard error is this share of it
    timing_input_sets: int = 4  # input sets rotated between timed calls
    physical_slack: float = 0.5  # reject runtimes below this share of the bytes/bandwidth, flops/peak bound
    # what the evaluator may use of a GPU's memory (torch caching allocator): workers sharing the GPU each
    # get an equal share, and an evaluation that needs more runs alone with all of it (gpu_workers/memory.py)
    gpu_memory_fraction: float = 0.9
    time_compiled_reference: bool = False  # also time torch.compile(reference), interleaved (KernelBench reports both)

    def __post_init__(self) -> None:
        if not 0.0 < self.gpu_memory_fraction <= 1.0:
            raise ValueError("evaluator gpu_memory_fraction must be in (0, 1]")
        if self.workers_per_gpu < 1 or self.timing_input_sets < 1:
            raise ValueError("evaluator workers_per_gpu and timing_input_sets must be at least 1")


class CoderConfig(Section):
    backend: Literal["transformers", "vllm", "openai"] = "transformers"
    model: str = ""  # a local directory in Hugging Face layout, or the served model's name (openai)
    target: Literal["cuda", "triton"] = "triton"
    group_size: int = 8
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    repair_turns: int = 0
    max_inflight_groups: int = 4
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


class ProposerConfig(Section):
    backend: Literal["synth", "transformers", "vllm", "openai"] = "synth"
    model: str = ""
    api_set_size: int = 3
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 1024
    seed: int = 0
    scale: float = 1.0  # problem size: 1 = GPU-sized (~2**26 elements); the CPU demo uses ~2**-13
    explore: float = 0.2  # share of API draws spread by inverse attempts (rarely tried APIs first)
    batch: int = 8  # modules proposed per round
    max_pending: int = 32  # stop proposing while this many modules wait for the validator
    rounds: int = 0  # `serve proposer` stops after this many rounds; 0 = run until interrupted


class ValidatorConfig(Section):
    timeout_s: float = 60.0
    max_runtime_ms: float = 5000.0
    max_memory_gb: float = 8.0
    device: Literal["auto", "cpu", "cuda"] = "auto"
    cpu_threads: int = 1  # torch threads of a validation run on the CPU


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
    learning_rate: float = 1e-5
    clip_eps: float = 0.2
    kl_beta: float = 0.0
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


class AnalyticsConfig(Section):
    db: str = "runs/default/analytics.duckdb"
    band_low: float = 0.2
    band_high: float = 0.8
    target: float = 0.5
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    explore: float = 0.5  # frontier weight bonus per unit of posterior std relative to the prior's
    frontier_versions: int = 0  # frontier over the last N Coder policy versions; 0 = all
    group: str = "analytics"  # consumer group of the projection (its offsets live in DuckDB)
    batch_records: int = 5000  # records per projection transaction
    snapshot_every: int = 64  # the projector publishes frontier.snapshot after this many new evaluations
    snapshot_max_entries: int = 256  # highest-weight frontier entries per snapshot

    def __post_init__(self) -> None:
        if not 0.0 <= self.band_low <= self.target <= self.band_high <= 1.0:
            raise ValueError("analytics needs 0 <= band_low <= target <= band_high <= 1")
        if self.prior_alpha <= 0 or self.prior_beta <= 0:
            raise ValueError("analytics prior_alpha and prior_beta must be positive")
        if self.batch_records < 1 or self.snapshot_every < 1 or self.snapshot_max_entries < 1:
            raise ValueError("analytics batch_records, snapshot_every and snapshot_max_entries must be at least 1")


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
        if "unknown field" in message:
            field = re.search(r"`([^`]+)`", message)
            key = f"{key}.{field.group(1)}" if key and field else (field.group(1) if field else key)
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
