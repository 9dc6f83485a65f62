"""One evaluation inside a fresh, disposable worker process: reference first, then the candidate; never call it in a process you keep.

Order matters: the problem is loaded, its inputs drawn on the device from seeds and its
reference outputs computed (and checked for determinism and non-constancy) BEFORE candidate
code is imported, with the comparison functions and instruments bound beforehand too. The
candidate then sees one set of input buffers, refilled in place with new values per trial.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import time
import traceback
import warnings
from typing import Any

import msgspec
import torch

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import compare, device_turns, headers, instruments
from kernelzero.gpu_workers.result import EVALUATOR_VERSION, EvalResult, ProblemFailed
from kernelzero.problems import ProblemError, load_problem

CANDIDATE_MODULE = "kz_candidate"
SCALES = {"scaled_up": 1e5, "scaled_down": 1e-5}  # other input distributions: fp16 overflows, underflows
TIMING_SET_BYTES = 8e9  # extra input sets for rotation while timing, at most this much memory
# work the caller's stream does not wait for (a side stream never joined back): a reader on that stream
# could see the output unfinished. Both bounds must be exceeded: the shorter one absorbs timer noise.
UNJOINED_MIN_MS = 0.003
UNJOINED_SHARE = 0.2
# bound before candidate code loads, like compare.py's functions: a candidate cannot rebind them
_set_deterministic = torch.use_deterministic_algorithms
_deterministic_enabled = torch.are_deterministic_algorithms_enabled
_deterministic_warn_only = torch.is_deterministic_algorithms_warn_only_enabled


class Job(msgspec.Struct, kw_only=True):
    problem_src: str
    candidate_src: str
    device: str  # "cpu" or "cuda:N"
    scratch_dir: str
    config: EvaluatorConfig
    gpu: str = ""
    extensions_dir: str = ""  # prebuilt CUDA extensions (load_inline finds them there)
    arch_list: str = ""  # TORCH_CUDA_ARCH_LIST the extensions were built for
    slim_headers: bool = False  # the extensions were built with gpu_workers/headers.py's lighter headers


class Verdict(Exception):
    """Ends an evaluation with a verdict other than `correct`."""

    def __init__(self, verdict: str, reason: str, **evidence: Any):
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason
        self.evidence = {k: str(v)[:2000] for k, v in evidence.items()}


def _tensors(values: list[Any]) -> list[torch.Tensor]:
    return [v for v in values if isinstance(v, torch.Tensor)]


def _permute_chunk(t: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Same values, a quarter of them shuffled inside (n/2, n-1): sum, min, max, first and last elements keep."""
    out = t.clone()
    flat = out.view(-1)
    n = flat.numel()
    if n < 8:
        return out
    length = max(2, n // 4)
    room = n - 1 - n // 2 - length  # the chunk ends before the last element
    start = n // 2 + int(torch.randint(0, max(1, room + 1), (1,), generator=gen, device=t.device))
    perm = torch.randperm(length, generator=gen, device=t.device)
    flat[start:start + length] = flat[start:start + length][perm].clone()
    return out


class Evaluation:
    def __init__(self, job: Job):
        self.job = job
        self.cfg = job.config
        self.device = torch.device(job.device)
        self.checks: list[str] = []
        self.result = EvalResult(verdict="correct", reason="ok", device=self.device.type, gpu=job.gpu)
        self.launches = instruments.LaunchLog()
        self.ref_calls = 0

    # ---- reference side (before candidate code exists in this process) ----
    def _draw(self, seed: int) -> list[Any]:
        torch.manual_seed(seed)
        with torch.device(self.device):
            values = list(self.problem.get_inputs())
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def _inputs(self, trial: int) -> list[Any]:
        """Trial inputs, regenerated from seeds on the device (only one set lives at a time)."""
        name = self.trials[trial]
        if name.startswith("seed"):
            return self._draw(self.cfg.seed + 1000 + int(name[4:]))
        if name == "permuted":
            gen = torch.Generator(device=self.device).manual_seed(self.cfg.seed + 7)
            return [_permute_chunk(v, gen) if isinstance(v, torch.Tensor) else v for v in self._inputs(0)]
        scale = SCALES[name]
        return [v * scale if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in self._inputs(1)]

    def _model(self, cls: type) -> torch.nn.Module:
        torch.manual_seed(self.cfg.seed)
        with torch.device(self.device):
            model = cls(*self.init_inputs)
        return model.to(self.device)

    def _reference(self, inputs: list[Any]) -> list[Any]:
        self.ref_calls += 1
        torch.manual_seed(10_000_019 + self.ref_calls)  # a reference that draws randomness differs run to run
        with torch.no_grad():
            out = self.ref_model(*inputs)  # inputs are freshly drawn: nothing else sees them
        self._sync()
        return [t.clone() if isinstance(t, torch.Tensor) else t for t in compare.flatten_outputs(out)]

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # device-wide: side streams included

    def prepare_reference(self) -> None:
        try:
            self.problem = load_problem(self.job.problem_src)
            torch.manual_seed(self.cfg.seed)
            self.init_inputs = list(self.problem.get_init_inputs())
            self.ref_model = self._model(self.problem.Model)
            natives = max(self.cfg.trials, 2)
            self.trials = [f"seed{i}" for i in range(natives)] + ["permuted", *SCALES]
            self.expected = [self._reference(self._inputs(t)) for t in range(len(self.trials))]
            again = self._reference(self._inputs(0))
            input_bytes = sum(v.numel() * v.element_size() for v in _tensors(self._inputs(0)))
            sets = min(self.cfg.timing_input_sets - 1, int(TIMING_SET_BYTES // max(input_bytes, 1)))
            self.timing_sets = [self._draw(self.cfg.seed + 5000 + i) for i in range(max(sets, 1))] \
                if self.device.type == "cuda" else []
        except ProblemError as exc:
            raise ProblemFailed(exc.reason, exc.detail) from None
        except Exception as exc:
            raise ProblemFailed("reference_failed", f"{type(exc).__name__}: {exc}") from None
        check = compare.compare_outputs(self.expected[0], again, self.cfg.rtol / 10, self.cfg.atol / 10)
        if not check.ok:
            raise ProblemFailed("non_deterministic", check.detail)
        outs = self.expected[:natives]
        if all(compare.is_constant(t) or t.numel() <= 1 for out in outs for t in _tensors(out)) and \
                all(compare.compare_outputs(outs[0], o, 0, 0).ok for o in outs[1:]):
            raise ProblemFailed("constant_output", "the reference output does not depend on the inputs")
        self.ref_ops = self._ref_compute_ops()
        self.checks.append("reference")

    def _ref_compute_ops(self) -> set[str]:
        recorder = instruments.OpRecorder(instruments.LaunchLog())
        with torch.no_grad(), recorder:
            self.ref_model(*self._inputs(0))
        return set(recorder.compute_ops)

    # ---- candidate side ----
    def import_candidate(self) -> None:
        instruments.install_triton_hooks(self.launches)
        headers.use(self.job.slim_headers)  # the build's sources exactly, or load_inline rebuilds
        self.snapshot = instruments.integrity_snapshot()
        self.threads = instruments.thread_count()
        path = os.path.join(self.job.scratch_dir, f"{CANDIDATE_MODULE}.py")
        with open(path, "w") as f:
            f.write(self.job.candidate_src)
        if self.job.extensions_dir:
            os.environ["TORCH_EXTENSIONS_DIR"] = self.job.extensions_dir
            os.environ["TORCH_CUDA_ARCH_LIST"] = self.job.arch_list  # same flags as the build: no rebuild
        started = time.perf_counter()
        try:
            spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[CANDIDATE_MODULE] = module
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise Verdict("compile_error", "syntax_error", error=f"line {exc.lineno}: {exc.msg}") from None
        except Exception as exc:
            raise Verdict("compile_error", "import_failed", error=_short(exc)) from None
        finally:
            self.result.compile_s = round(time.perf_counter() - started, 3)
        self._check_integrity("import")
        model_new = getattr(module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise Verdict("compile_error", "no_model_new", error="the candidate defines no class ModelNew")
        try:
            self.model = self._model(model_new)
        except Exception as exc:
            raise Verdict("runtime_error", "init_failed", error=_short(exc)) from None
        self.buffers = self._inputs(0)
        weights = [*self.model.parameters(), *self.model.buffers()]
        self.launches.protected = [instruments.storage_range(t) for t in [*_tensors(self.buffers), *weights]]
        self.checks.append("import")

    def _check_integrity(self, when: str) -> None:
        changed = instruments.integrity_violations(self.snapshot)
        if changed:
            raise Verdict("rejected", "runtime:monkey_patch", when=when, changed=", ".join(changed[:10]))
        if instruments.thread_count() > self.threads:
            raise Verdict("rejected", "background_thread", when=when, threads=instruments.thread_count())

    def _poison_allocator(self, outputs: list[Any]) -> None:
        """Freed blocks of each output's size full of 0xFF: an output allocated but not written shows the pattern.

        The CUDA caching allocator hands such blocks back; malloc on the CPU often does not, which
        is why `_unwritten_or` also compares a run with filled memory.
        """
        blocks = []
        for t in _tensors(outputs):
            for _ in range(2):
                block = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=t.device)
                block.fill_(compare.POISON_BYTE)
                blocks.append(block)
        self._sync()
        del blocks

    def _refill(self, trial: int) -> list[Any]:
        """Copy the trial's values into the candidate's buffers: same objects and addresses, new contents."""
        values = self._inputs(trial)
        for buf, src in zip(self.buffers, values):
            if isinstance(buf, torch.Tensor):
                buf.copy_(src)
        return values

    def _call(self, trial: int, recorder: instruments.OpRecorder | None = None,
              fill: bool = False) -> tuple[Any, list[Any]]:
        values = self._refill(trial)
        self._poison_allocator(self.expected[trial])
        self.launches.reset()
        try:
            with torch.no_grad(), _filled_memory(fill):
                if recorder is None:
                    out = self.model(*self.buffers)
                else:
                    with recorder:
                        out = self.model(*self.buffers)
            self._sync()
        except Verdict:
            raise
        except (torch.OutOfMemoryError, MemoryError) as exc:
            raise Verdict("runtime_error", "out_of_memory", trial=self.trials[trial], error=_short(exc)) from None
        except Exception as exc:
            raise _classify(exc, self.trials[trial]) from None
        self._check_integrity(self.trials[trial])
        return out, values

    def run_trials(self) -> None:
        recorder = instruments.OpRecorder(self.launches)
        worst = compare.Comparison(True)
        for t, name in enumerate(self.trials):
            out, inputs = self._call(t, recorder if t == 0 else None)
            if t == 0:
                self.own_launches = self.launches.own(CANDIDATE_MODULE)
                self.compute_ops = sorted(set(recorder.compute_ops))
            changed = [i for i, (buf, src) in enumerate(zip(self.buffers, inputs))
                       if isinstance(buf, torch.Tensor) and not _same(buf, src)]
            if changed:
                raise Verdict("rejected", "input_mutated", trial=name, inputs=changed)
            result = compare.compare_outputs(self.expected[t], out, self.cfg.rtol, self.cfg.atol)
            self.result.trials = t + 1
            if not result.ok:
                self._fail_trial(t, out, result)
            worst = compare.Comparison(True, "ok", max(worst.max_abs_err, result.max_abs_err),
                                       max(worst.rel_err, result.rel_err))
        self.result.max_abs_err, self.result.rel_err = worst.max_abs_err, worst.rel_err
        self.checks += ["inputs_unchanged", "outputs", f"trials:{len(self.trials)}"]

    def _fail_trial(self, t: int, out: Any, result: compare.Comparison) -> None:
        name = self.trials[t]
        self.result.max_abs_err, self.result.rel_err = result.max_abs_err, result.rel_err
        if result.reason == "output_not_plain_tensor":
            raise Verdict("rejected", "tensor_subclass", trial=name, detail=result.detail)
        for earlier in range(t):
            if compare.compare_outputs(self.expected[earlier], out, self.cfg.rtol, self.cfg.atol).ok:
                raise Verdict("rejected", "memoized_output", trial=name,
                              detail=f"the output equals the reference for trial {self.trials[earlier]}")
        raise Verdict("incorrect", self._unwritten_or(result.reason, t, out), trial=name, detail=result.detail)

    def _unwritten_or(self, reason: str, t: int, out: Any) -> str:
        """`unwritten_output` when a re-run with filled new memory shows elements the candidate never wrote.

        The allocator poisoning of `_call` usually shows them already; malloc on the CPU, or an
        output carved from a larger allocation, can escape it. The verdict is settled before this
        re-run, so a candidate that notices the fill cannot change it.
        """
        if reason not in ("output_mismatch", "nan_parity"):
            return reason
        try:
            filled, _ = self._call(t, fill=True)
        except Verdict:
            return reason
        return "unwritten_output" if compare.unwritten_between(out, filled) else reason

    def proof_of_work(self) -> None:
        """The candidate's own kernels ran, did the work, and torch did not do it instead."""
        allowed = set(self.cfg.allowed_torch_ops)
        forbidden = [op for op in self.compute_ops if not (instruments.op_tokens(op) & allowed)]
        profiled = self._profile() if self.device.type == "cuda" else []
        custom = sorted({launch.name for launch in self.own_launches} | set(profiled))
        self.result.evidence.update(custom_kernels=", ".join(custom)[:500], torch_ops=", ".join(self.compute_ops)[:500])
        if not custom:
            raise Verdict("rejected", "no_custom_kernel", torch_ops=", ".join(self.compute_ops))
        if forbidden:
            raise Verdict("rejected", "torch_compute_in_forward", ops=", ".join(sorted(set(forbidden))))
        library = {op for op in self.compute_ops if instruments.op_tokens(op) & allowed}
        ref_work = {op for op in self.ref_ops if not any(instruments.op_tokens(op) & instruments.op_tokens(lib)
                                                           for lib in library)}
        if library and not ref_work:
            raise Verdict("rejected", "torch_does_the_work", ops=", ".join(sorted(library)))
        self.checks.append("custom_kernel_ran")
        if self.own_launches:
            self._ablate()

    def _ablate(self) -> None:
        """Re-run trial 0 with every custom kernel's outputs overwritten after it ran: the result must change."""
        self.launches.ablate = True
        try:
            out, _ = self._call(0)
            unchanged = compare.compare_outputs(self.expected[0], out, self.cfg.rtol, self.cfg.atol).ok
        except Verdict:
            unchanged = False  # the poisoned values broke the forward: they were used
        finally:
            self.launches.ablate = False
        if unchanged:
            raise Verdict("rejected", "kernel_output_unused",
                          detail="the output stays correct when the custom kernels' results are overwritten")
        self.checks.append("kernel_output_used")

    def _profile(self) -> list[str]:
        """Kernel names the profiler saw that no library (aten, cuBLAS, cuDNN, CUTLASS) launched; share as evidence."""
        from torch.profiler import ProfilerActivity, profile
        from kernelzero.gpu_workers.kernels import is_library_kernel
        self._refill(0)
        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            self.model(*self.buffers)
            torch.cuda.synchronize()
        kernels = _kernel_times(prof)
        own = [k for k in kernels if not is_library_kernel(k)]
        total = sum(kernels.values()) or 1.0
        self.result.evidence["custom_time_share"] = f"{sum(kernels[k] for k in own) / total:.3f}"
        self.result.evidence["kernels"] = ", ".join(sorted(kernels))[:800]
        self.checks.append("profiler")
        return own

    def time_it(self) -> None:
        from kernelzero.gpu_workers import timing
        sets = [self.buffers, *self.timing_sets]  # drawn before the candidate was imported
        with torch.no_grad(), self.turns.exclusive():
            measured = timing.measure(
                self.model, self.ref_model, sets, budget_s=self.cfg.timing_budget_s,
                min_reps=self.cfg.timing_min_reps, max_reps=self.cfg.timing_max_reps, rel_se=self.cfg.timing_rel_se,
            )
        self._check_integrity("timing")
        r, cand = self.result, measured.candidate
        r.runtime_ms, r.runtime_iqr_ms, r.timing_n = cand.median_ms, cand.iqr_ms, cand.n
        r.ref_eager_ms = measured.reference.median_ms
        r.speedup = measured.speedup
        r.evidence["off_stream_ms"] = f"{measured.off_stream_ms:.4g}"
        r.evidence["warmup_s"] = f"{measured.warmup_s:.3g}"
        if measured.off_stream_ms > max(UNJOINED_MIN_MS, UNJOINED_SHARE * cand.median_ms):
            raise Verdict("rejected", "unjoined_stream", off_stream_ms=f"{measured.off_stream_ms:.4g}",
                          runtime_ms=f"{cand.median_ms:.4g}",
                          detail="forward returned before its work was ordered on the caller's stream")
        nbytes = sum(t.numel() * t.element_size() for t in [*_tensors(self.buffers), *_tensors(self.expected[0])])
        floor = timing.physical_floor_ms(self.job.gpu, nbytes, self.ref_flops)
        r.evidence["physical_floor_ms"] = f"{floor:.4g}"
        self.checks.append("timing")
        if cand.median_ms < self.cfg.physical_slack * floor:
            raise Verdict("rejected", "beyond_physical_limit", runtime_ms=f"{cand.median_ms:.4g}",
                          floor_ms=f"{floor:.4g}", speedup=f"{r.speedup:.3g}")

    def count_ref_flops(self) -> None:
        from torch.utils.flop_counter import FlopCounterMode
        counter = FlopCounterMode(display=False)
        with torch.no_grad(), counter:
            self.ref_model(*self._inputs(0))
        self.ref_flops = float(counter.get_total_flops())

    def _conclude(self, v: Verdict) -> None:
        self.result.verdict, self.result.reason = v.verdict, v.reason
        self.result.evidence.update(v.evidence)

    def run(self) -> EvalResult:
        if self.device.type == "cuda":
            self.turns = device_turns.for_device(self.device.index or 0)
            self.turns.share()
        self.prepare_reference()
        if self.device.type == "cuda":
            self.count_ref_flops()
        try:
            self.import_candidate()
            self.run_trials()
            self.proof_of_work()
            if self.device.type == "cuda":
                self.time_it()
        except Verdict as v:
            self._conclude(v)
        except (torch.OutOfMemoryError, MemoryError) as exc:  # raised outside the guarded trial calls
            self._conclude(Verdict("runtime_error", "out_of_memory", error=_short(exc)))
        except Exception as exc:  # profiling, ablation or timing calls of the candidate
            self._conclude(_classify(exc, "after_trials"))
        self.result.checks = self.checks
        self.result.evaluator_version = EVALUATOR_VERSION
        return self.result


def _kernel_times(prof) -> dict[str, float]:
    """Device microseconds per kernel name, from device events (or the kernels attached to CPU ops)."""
    times: dict[str, float] = {}
    events = list(prof.events())
    for e in events:
        if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
            times[e.name] = times.get(e.name, 0.0) + float(e.time_range.elapsed_us())
    if not times:
        for e in events:
            for k in getattr(e, "kernels", []):
                times[k.name] = times.get(k.name, 0.0) + float(k.duration)
    return times


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        return bool(torch.all((a == b) | (torch.isnan(a) & torch.isnan(b))))
    return bool(torch.equal(a, b))


def _short(exc: BaseException) -> str:
    lines = traceback.format_exception_only(type(exc), exc)
    return "".join(lines).strip()[-1500:]


def _classify(exc: Exception, trial: str) -> Verdict:
    text = _short(exc)
    kind = type(exc).__module__ + "." + type(exc).__name__
    if "CompilationError" in kind or "triton.compiler" in kind:
        return Verdict("compile_error", "triton_compile", trial=trial, error=text)
    if "out of memory" in text.lower() or "can't allocate memory" in text.lower():
        return Verdict("runtime_error", "out_of_memory", trial=trial, error=text)
    if "CUDA error" in text or "AcceleratorError" in kind:
        return Verdict("runtime_error", "cuda_error", trial=trial, error=text)
    return Verdict("runtime_error", "exception", trial=trial, error=text)


def run_job(job: Job) -> bytes:
    """The msgpack-encoded outcome: an EvalResult, or {"problem_error": reason, "detail": ...}."""
    try:
        return msgspec.msgpack.encode(Evaluation(job).run())
    except ProblemFailed as exc:
        return msgspec.msgpack.encode({"problem_error": exc.reason, "detail": exc.detail})
    except SystemExit as exc:
        return msgspec.msgpack.encode(EvalResult(verdict="runtime_error", reason="sys_exit",
                                                 evidence={"code": str(exc.code)}, device=torch.device(job.device).type))


@contextlib.contextmanager
def _filled_memory(enabled: bool):
    """Inside, every new tensor starts as torch's deterministic fill (NaN, integer max) when `enabled`.

    The switch is visible to the candidate, so only the re-run of a trial that already failed uses it.
    """
    if not enabled:
        yield
        return
    before = _deterministic_enabled(), _deterministic_warn_only()
    _set_deterministic(True, warn_only=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        _set_deterministic(before[0], warn_only=before[1])
