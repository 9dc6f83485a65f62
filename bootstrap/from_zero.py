"""Starting from zero, cached by its inputs: distilled SFT sets, a tokenizer, and from-scratch models of both roles warm-started on them.

What `kernelzero demo` (and the experiment) start reinforcement learning from. Each step's result
lives under the cache in a folder named by a hash of everything it depends on (its settings, the
teachers' and synthesizer's source, the evaluator version, the earlier step's key), so a second
run with the same inputs reuses it and a changed input rebuilds only what depends on it. A step
interrupted midway resumes (distillation) or starts over (SFT). It does not check that the SFT
models are any good: the held-out checks in `sft.json` say how good they are.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import hashlib
import json
import multiprocessing
import os
import shutil
import threading
from pathlib import Path
from typing import Any, Callable

import msgspec

from kernelzero.config import Config
from kernelzero.kit.heldout_protocol import MIN_MODULES

# the demo's API pool: activations and row reductions the Coder's teacher lowers
DEMO_APIS = (
    "torch.relu", "torch.sigmoid", "torch.tanh", "torch.exp", "torch.abs", "torch.neg", "torch.square",
    "torch.nn.functional.gelu", "torch.nn.functional.silu", "torch.nn.functional.softplus",
    "torch.nn.functional.elu", "torch.nn.functional.leaky_relu", "torch.nn.functional.hardtanh",
    "torch.sum", "torch.mean", "torch.amax", "torch.logsumexp",
    "torch.nn.functional.softmax", "torch.nn.functional.log_softmax",
)


class SftPlan(msgspec.Struct, frozen=True, kw_only=True):
    """How one role is warm-started (bootstrap/sft.py, stopping rule in bootstrap/sft_stop.py)."""

    epochs: float
    learning_rate: float
    batch_size: int
    check_every: int  # held-out checks every N steps (bootstrap/sft_stop.py); 0: none, train the epochs
    band_low: float
    band_high: float
    heldout_limit: int
    size: str = ""  # this role's model size (kernelzero/kit/models.py MODEL_SIZES); "": the plan's

    def size_in(self, plan: "Plan") -> str:
        return self.size or plan.size


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """Everything the bootstrap depends on besides the code; its hash names the cache folders.

    The default is the experiment's: the Coder trained until the interval of its held-out pass@1 at the sampling
    temperature lies above the band's floor, or three epochs. Small batches at a high rate: on 4,035 distilled rows,
    one epoch in batches of 4 reached a held-out greedy pass rate of 0.11 where batches of 16 reached 0
    (docs/BENCHMARKS.md).
    """

    modules: int = 16000
    api_set_sizes: tuple[int, int] = (1, 3)  # the distilled modules' API sets, whatever sizes the loop proposes
    heldout_share: float = 0.2
    audit_share: float = 0.02
    size: str = "tiny"
    seed: int = 0
    # the Proposer's SFT ends about when the Coder's is half done on a 2-core CPU (117 of 214 s, docs/BENCHMARKS.md)
    coder: SftPlan = SftPlan(epochs=3, learning_rate=2e-3, batch_size=4, check_every=500, band_low=0.2,
                             band_high=0.6, heldout_limit=MIN_MODULES)
    # two epochs left a Proposer that wrote F.silu first whatever it was asked: 0 of 16 loop modules accepted where
    # two more gave 9 of 16 on the same API sets, 18 of 32 held-out modules valid (docs/BENCHMARKS.md). Tiny whatever
    # the Coder's size: the 8-layer small one trained to loss 0.091 (tiny 0.047) and its modules called none of their
    # APIs, 35 of 36 rejected `api_not_called` in an H100 demo, where the tiny one's were 30 of 36 accepted on the CPU
    proposer: SftPlan = SftPlan(epochs=4, learning_rate=2e-3, batch_size=4, check_every=0, band_low=0.5,
                                band_high=1.0, heldout_limit=16, size="tiny")


# The demo's first run must fit in minutes on two cores: fewer modules and the Coder's SFT without checks, three
# epochs (at 1.5 its held-out greedy pass@1 was 0/32, at two 4-11 of 64 against 38-40 at three, docs/BENCHMARKS.md).
# 8,000 modules (3,278 training rows) where 10,000 (3,900) made the bootstrap 43 s longer: held-out pass@1 0.52 and
# 0.39 at version 0 on their own held-out sets. The Proposer's shorter rows train side by side in less time.
DEMO_PLAN = Plan(modules=8000, coder=msgspec.structs.replace(Plan().coder, check_every=0))


class Bootstrap(msgspec.Struct, kw_only=True):
    distill_dir: str
    coder_model: str
    proposer_model: str
    heldout_sets: list[str]
    max_tokens: dict[str, int]  # per role: room for its longest training answer
    sft: dict[str, dict]  # per role: the SFT report (steps, losses, held-out checks, why it stopped)


def _code_hash() -> str:
    """The source of everything that decides the distilled data and its report: teachers, synthesizer, catalog, and
    the whole evaluator (the audit's verdicts are in distill.json)."""
    from kernelzero import bootstrap, gpu_workers, kit, producers

    return _source_digest(path for package in (bootstrap, producers, kit, gpu_workers)
                          for path in sorted(Path(package.__file__).parent.glob("*.py"))
                          if package is gpu_workers or path.stem.startswith(
                              ("teacher", "synthesizer", "api_catalog", "problems", "heldout_protocol")))


def _source_digest(paths) -> str:
    """The files' bytes, in order, hashed: what names a cache folder after the code that fills it."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(Path(path).read_bytes())
    return digest.hexdigest()[:12]


def _key(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def distill_step(config: Config, plan: Plan, cache: Path, beside: Callable[[Path, Any], None] | None = None,
                 audit_after: threading.Event | None = None, audit_workers: int | None = None) -> Path:
    """The distilled sets (bootstrap/distill.py) for the plan, reused when the cache holds them; `beside` runs while
    the audit judges (distill's, which `audit_after` and `audit_workers` go to), only when the sets are made here."""
    from kernelzero.bootstrap.distill import distill

    settings = (plan.modules, plan.heldout_share, plan.audit_share, plan.seed, config.proposer.scale,
                plan.api_set_sizes, config.proposer.apis, config.coder.prompt, config.proposer.prompt,
                config.coder.target, _code_hash())
    out = cache / f"distill-{_key(*settings)}"
    if not (out / "distill.json").exists():
        distill(config, out, plan.modules, plan.heldout_share, plan.audit_share, set_sizes=plan.api_set_sizes,
                beside=beside, audit_after=audit_after, audit_workers=audit_workers)
    return out


def models_key(config: Config, plan: Plan, distill_dir: Path, device: str) -> str:
    """What names the SFT's cache folder: the data, the plan, the device, and the source of what builds, trains and
    stops the models (a size's definition or the stopping rule changes without the plan's names)."""
    from kernelzero.bootstrap import init_model, sft, sft_stop
    from kernelzero.kit import models

    sizes = sorted({plan.coder.size_in(plan), plan.proposer.size_in(plan)})
    return _key(distill_dir.name, msgspec.to_builtins(plan), device, config.coder.temperature, config.coder.dtype,
                config.proposer.dtype,
                _source_digest(m.__file__ for m in (init_model, sft, sft_stop, models)),
                *[(models.MODEL_SIZES[size], models.VOCAB_SIZES[size]) for size in sizes])


def sft_step(config: Config, plan: Plan, distill_dir: Path, cache: Path, device: str,
             progress: Any = None, cores_freed: threading.Event | None = None) -> tuple[Path, dict]:
    """A tokenizer and both roles' from-scratch models, warm-started; reused when the cache holds them. Its bars go
    to `progress` (rich) where given, else to bars of its own; `cores_freed` is set when the first role is done."""
    out = cache / f"models-{models_key(config, plan, distill_dir, device)}"
    done = out / "sft.json"
    if done.exists():
        return out, json.loads(done.read_text())
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    # the two roles train at once, in processes of their own, each on half the cores for all its steps: batches of a
    # few rows keep two cores little busier than one (a second thread made a step 22% faster), so side by side they
    # take about as long as one alone, and the first one's cores go to the audit (bootstrap) when it is done. A
    # thread count fixed for the whole SFT keeps the model independent of timing (threads change the arithmetic)
    roles = ("coder", "proposer")
    spawn = multiprocessing.get_context("spawn")
    with spawn.Manager() as manager, \
            concurrent.futures.ProcessPoolExecutor(len(roles), mp_context=spawn, initializer=quiet_libraries) as pool:
        steps = manager.dict()
        futures = {role: pool.submit(_warm_start, config, plan, role, distill_dir, out, device, len(roles), steps)
                   for role in roles}
        _show_steps(steps, futures, progress, cores_freed)
        reports = {role: future.result() for role, future in futures.items()}
    done.write_text(json.dumps(reports, indent=2))
    return out, reports


def quiet_libraries() -> None:
    """No per-file progress bars or deprecation notes from the libraries: the demo, the experiment and the SFT processes
    (whose bars sft_step draws) tell their own story."""
    import warnings

    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.")


def _show_steps(steps, futures: dict, progress: Any = None, first_done: threading.Event | None = None) -> None:
    """A bar per role (in `progress`, else in bars of its own) of the SFT steps its process reported in `steps`
    (role -> (step, steps)), until all are done; `first_done` is set as soon as one is."""
    from rich.console import Console

    from kernelzero.bootstrap.distill import counting_bars

    with contextlib.nullcontext(progress) if progress is not None else \
            counting_bars(console=Console(stderr=True)) as bars:
        tasks = {role: bars.add_task(f"SFT of the {role}", total=None) for role in futures}
        while True:
            pending = concurrent.futures.wait(futures.values(), timeout=1.0).not_done
            if first_done is not None and len(pending) < len(futures):
                first_done.set()
            finished = not pending
            for role, (step, total) in dict(steps).items():
                bars.update(tasks[role], completed=step, total=total)
            if finished:
                return


def _warm_start(config: Config, plan: Plan, role: str, distill_dir: Path, out: Path, device: str, sharing: int,
                steps) -> dict:
    """One role's tokenizer, from-scratch model and SFT, in a process that shares the machine with `sharing` - 1 others;
    its steps go to `steps[role]` as they are taken."""
    import torch

    from kernelzero.bootstrap.heldout_judge import HeldOutJudge, read_heldout
    from kernelzero.bootstrap.init_model import init_model
    from kernelzero.bootstrap.sft import run_sft
    from kernelzero.bootstrap.sft_stop import BandStop

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // sharing))
    corpus = [str(distill_dir / f"{name}_train.jsonl") for name in ("coder", "proposer")]
    settings: SftPlan = getattr(plan, role)
    init_model(str(out / f"{role}-init"), settings.size_in(plan), corpus, seed=plan.seed)
    data = distill_dir / f"{role}_train.jsonl"
    max_tokens = longest_answer(out / f"{role}-init", data)
    judge = HeldOutJudge(role, read_heldout(distill_dir / f"{role}_heldout.jsonl", settings.heldout_limit), config,
                         max_tokens=max_tokens)
    stop = BandStop(judge, band_low=settings.band_low, band_high=settings.band_high,
                    check_every=settings.check_every) if settings.check_every > 0 else None
    try:
        report = run_sft(str(data), str(out / f"{role}-init"), str(out / role),
                         epochs=settings.epochs, learning_rate=settings.learning_rate, batch_size=settings.batch_size,
                         lora_rank=0, device=device, dtype=getattr(config, role).dtype, seed=plan.seed, stop=stop,
                         progress=lambda step, total: steps.update({role: (step, total)}))
    finally:
        judge.close()
    return {**msgspec.to_builtins(report), "max_tokens": max_tokens}


def longest_answer(model_dir: Path, rows: Path, margin: float = 1.25) -> int:
    """Tokens a role must be allowed to write: its longest training completion (with the stop token), plus a margin."""
    from kernelzero.kit.models import load_tokenizer

    tokenizer = load_tokenizer(model_dir)
    completions = [json.loads(line)["completion"] for line in rows.read_text().splitlines() if line.strip()]
    longest = max(len(ids) for ids in tokenizer(completions, add_special_tokens=False)["input_ids"]) + 1
    return int(longest * margin)


def _trains_on_gpu(device: str) -> bool:
    """Whether the SFT trains on a GPU, asked through NVML: CUDA must not start in this process, which forks the
    distillation's workers after."""
    if device != "auto":
        return device == "cuda"
    os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")
    import torch

    return torch.cuda.is_available()


def bootstrap(config: Config, plan: Plan, cache: Path, device: str = "auto") -> Bootstrap:
    """Distill, then warm-start both roles, each step from the cache when it holds the result. The SFT runs while the
    distillation's audit judges (it needs only the sets, and the audit drops none of their rows). With a GPU the audit
    starts at once: on an H100 the bootstrap took 255 s so, over 430 s one after the other. On a CPU it waits for the
    cores of the first role done: three busy processes on two cores took the demo's bootstrap 391 s against 319 s one
    after the other (docs/BENCHMARKS.md)."""
    trained: list[tuple[Path, dict]] = []
    on_gpu = _trains_on_gpu(device)
    cores_freed = None if on_gpu else threading.Event()

    def warm_start(sets: Path, bars: Any) -> None:
        trained.append(sft_step(config, plan, sets, cache, device, bars, cores_freed))

    cores = os.cpu_count() or 1
    distill_dir = distill_step(config, plan, cache, beside=warm_start, audit_after=cores_freed,
                               audit_workers=None if on_gpu else max(1, cores - cores // 2))
    models, reports = trained[0] if trained else sft_step(config, plan, distill_dir, cache, device)
    report = json.loads((distill_dir / "distill.json").read_text())
    return Bootstrap(distill_dir=str(distill_dir), coder_model=str(models / "coder"),
                     proposer_model=str(models / "proposer"), heldout_sets=report["heldout_sets"],
                     max_tokens={role: reports[role]["max_tokens"] for role in reports}, sft=reports)
