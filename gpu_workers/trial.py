"""One evaluation inside a fresh, disposable worker process: reference first, then the candidate; never call it in a process you keep.

Order matters: the problem is loaded, its inputs drawn on the device from seeds and its
reference outputs computed (and checked for determinism and non-constancy) BEFORE candidate
code is imported, with the comparison functions and instruments bound beforehand too. The
candidate then sees one set of input buffers, refilled in place with new values per trial.

Blame: problem code is only ever called through `blame.problem_call` (what it raises is the problem's:
`problem_error`), candidate code through `TrialRun._candidate_call` and the import (what it
raises is the candidate's verdict). What this module's own code raises is `evaluator_error`
with the traceback, except where the candidate may have caused it: a device fault (CUDA error,
out of memory) once candidate code has run, or an exception raised through a frame of the
candidate's file; an out-of-memory on CUDA only where the candidate held or asked for more than its
allowance (the reference's own peak, memory.py; counted by memory_ledger.py): within it the shortfall is the evaluator's. It does NOT tell an evaluator bug triggered by odd but valid candidate data
from a fault of that data, beyond compare.py's self-comparison.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import importlib.util
import os
import sys
import time
import traceback
import warnings
from typing import Any, Callable

import torch

from kernelzero.gpu_workers import compare, device_turns, headers, instruments, memory, timing
from kernelzero.gpu_workers.blame import (EarlyVerdict, candidate_verdict, innermost_file, is_device_fault, is_oom,
                                         problem_call, short)
from kernelzero.gpu_workers.memory_ledger import MemoryLedger, nbytes
from kernelzero.gpu_workers.result import ProblemFailed, evaluation
from kernelzero.kit.problems import INPUT_SCALES, load_problem
from kernelzero.kit.tracing import tensors
from kernelzero.schemas import Evaluation
from kernelzero.schemas.messages import Job

CANDIDATE_MODULE = "kz_candidate"
# work the caller's stream does not wait for (a side stream never joined back): a reader on that stream
# could see the output unfinished. Both bounds must be exceeded: the shorter one absorbs timer noise.
UNJOINED_MIN_MS = 0.003
UNJOINED_SHARE = 0.2
# A reference that ran out of memory alone while other evaluations still held some of the GPU is
# tried again after they had a turn; this many times at most, then it is the problem's.
ALONE_ATTEMPTS = 3
WHOLE_GPU = 0.95  # an evaluation alone with at least this share of its usable memory had the GPU
# bound before candidate code loads, like compare.py's functions: a candidate cannot rebind them
_set_deterministic = torch.use_deterministic_algorithms
_deterministic_enabled = torch.are_deterministic_algorithms_enabled
_deterministic_warn_only = torch.is_deterministic_algorithms_warn_only_enabled


class _GoAlone(Exception):
    """The plan needs more than a share: the reference side is released and prepared again alone."""


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
    flat[start:start + length] = flat[start:start + length][perm]  # indexing copies: no overlap
    return out


class TrialRun:
    def __init__(self, job: Job):
        self.job = job
        self.cfg = job.config
        self.device = torch.device(job.device)
        self.checks: list[str] = []
        self.result = evaluation("correct", "ok", device=self.device.type, gpu=job.gpu)
        self.launches = instruments.LaunchLog()
        self.ref_calls = 0
        self.stage = "start"
        self.candidate_path = os.path.join(job.scratch_dir, f"{CANDIDATE_MODULE}.py")
        self.candidate_ran = False  # from the import on, device faults are the candidate's
        self.expected: list[list[Any]] = []
        self.timing_sets: list[list[Any]] = []
        self.ledger = MemoryLedger(self.device)

    # ---- GPU memory by need (gpu_workers/memory.py) ----
    def _start_gpu(self) -> None:
        self.turns = device_turns.for_device(self.device.index or 0)
        self.turns.share()
        free, self.gpu_bytes = torch.cuda.mem_get_info(self.device)
        self.usable = min(int(self.cfg.gpu_memory_fraction * self.gpu_bytes), free)
        self._cap(memory.share_bytes(self.usable, self.job.gpu_sharing))
        if self.job.alone:  # the pool's retry of an evaluation that ran short of memory in a share
            self._go_alone()

    def _cap(self, nbytes: int) -> None:
        torch.cuda.set_per_process_memory_fraction(min(1.0, nbytes / self.gpu_bytes), self.device)
        self.ledger.cap_bytes = nbytes

    def _go_alone(self) -> None:
        """Wait for the GPU to this evaluation alone, then take what is usable of it.

        Alone means no other evaluation runs; one waiting for its timed turn (or to go alone itself,
        having released its reference first) may still hold memory: the cap is what is actually
        free, and the evidence says how much others held.
        """
        self.turns.alone()
        free, _ = torch.cuda.mem_get_info(self.device)
        ours = torch.cuda.memory_reserved(self.device)
        self.usable = min(int(self.cfg.gpu_memory_fraction * self.gpu_bytes), free + ours)
        self.held_by_others = max(0, self.gpu_bytes - free - ours)
        self._cap(self.usable)

    def _yield_turn(self) -> None:
        """Give the GPU back: an evaluation waiting to time (holding its share) goes first; then alone again."""
        self.turns.release()
        self._go_alone()

    def _plan(self, fp: memory.Footprint) -> memory.MemoryPlan:
        kept = len(self.trials) + 1  # every trial's reference output, and the determinism re-run
        if self.device.type != "cuda":
            return memory.MemoryPlan(alone=False, cap_bytes=0, need_bytes=memory.need_bytes(fp, kept), timing_sets=0,
                                     poison_blocks=memory.MAX_POISON_BLOCKS)

        def plan() -> memory.MemoryPlan:
            sharing = 1 if self.turns.is_alone else self.job.gpu_sharing
            return memory.plan_memory(fp, outputs_kept=kept, usable_bytes=self.usable, sharing=sharing,
                                      timing_sets_wanted=self.cfg.timing_input_sets - 1)

        chosen = plan()
        self._cap(chosen.cap_bytes)
        where = "shared"
        if self.turns.is_alone:
            where = "alone" if self._oom_is_final() else \
                f"alone, {getattr(self, 'held_by_others', 0) / memory.GB:.3g} GB held by others"
        self.result.evidence["memory"] = (f"need {chosen.need_bytes / memory.GB:.3g} GB, "
                                          f"cap {chosen.cap_bytes / memory.GB:.3g} GB, {where}, {chosen.timing_sets} "
                                          f"extra timing sets, {chosen.poison_blocks} poisoned blocks"
                                          + ("" if chosen.fits else ", does not fit"))
        if chosen.alone:
            raise _GoAlone()  # released before waiting: a waiting evaluation holds no memory of its own
        if not chosen.fits and not self._oom_is_final():
            raise ProblemFailed("evaluation_out_of_memory", f"the plan does not fit: {self.result.evidence['memory']}")
        return chosen

    def _oom_is_final(self) -> bool:
        """Whether running out of memory now is the problem's: not on CUDA, or alone with (nearly) all the usable memory."""
        if self.device.type != "cuda":
            return True
        return self.turns.is_alone and self.usable >= WHOLE_GPU * self.cfg.gpu_memory_fraction * self.gpu_bytes

    # ---- reference side (before candidate code exists in this process) ----
    def _draw(self, seed: int) -> list[Any]:
        torch.manual_seed(seed)
        with torch.device(self.device):
            values = list(problem_call(self.problem.get_inputs))
        return [v.to(self.device) if isinstance(v, torch.Tensor) else v for v in values]

    def _inputs(self, trial: int) -> list[Any]:
        """Trial inputs, regenerated from seeds on the device (only one set lives at a time)."""
        name = self.trials[trial]
        if name.startswith("seed"):
            return self._draw(self.cfg.seed + 1000 + int(name[4:]))
        if name == "permuted":
            gen = torch.Generator(device=self.device).manual_seed(self.cfg.seed + 7)
            return [_permute_chunk(v, gen) if isinstance(v, torch.Tensor) else v for v in self._inputs(0)]
        scale = INPUT_SCALES[name]
        return [v * scale if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in self._inputs(1)]

    def _reference_model(self) -> torch.nn.Module:
        torch.manual_seed(self.cfg.seed)
        with torch.device(self.device):
            model = problem_call(self.problem.Model, *self.init_inputs)
        return problem_call(model.to, self.device)

    def _forward_reference(self, inputs: list[Any]) -> Any:
        self.ref_calls += 1
        torch.manual_seed(10_000_019 + self.ref_calls)  # a reference that draws randomness differs run to run
        with torch.no_grad():
            out = problem_call(self.ref_model, *inputs)  # inputs are freshly drawn: nothing else sees them
        self._sync()
        return out

    def _reference(self, inputs: list[Any]) -> list[Any]:
        out = self._forward_reference(inputs)
        return [t.clone() if isinstance(t, torch.Tensor) else t for t in problem_call(compare.flatten_outputs, out)]

    def _measured_reference(self) -> tuple[memory.Footprint, list[Any]]:
        """The first reference output and the problem's footprint: its sizes, the forward's and the draws' peak memory."""
        # a native draw, the permuted one (its shuffle), a scaled one
        draws = [functools.partial(self._inputs, t) for t in (0, self.trials.index("permuted"), len(self.trials) - 1)]
        draw_peak = self.ledger.draw_peak(draws)
        inputs = self._inputs(0)
        base = self.ledger.mark()
        out = self._forward_reference(inputs)
        peak = self.ledger.peak_since(base)
        flat = [t.clone() if isinstance(t, torch.Tensor) else t for t in problem_call(compare.flatten_outputs, out)]
        weights = [*self.ref_model.parameters(), *self.ref_model.buffers()]
        fp = memory.Footprint(input_bytes=nbytes(inputs), output_bytes=nbytes(flat), weight_bytes=nbytes(weights),
                              ref_peak_bytes=max(peak, nbytes(flat)), draw_peak_bytes=draw_peak)
        return fp, flat

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # device-wide: side streams included

    def prepare_reference(self) -> None:
        """Reference outputs for every trial, checked; on CUDA in a share of the GPU, or alone when they need more."""
        self.stage = "reference"
        attempts = 0
        while True:
            try:
                self._prepare()
                return
            except _GoAlone:
                pass
            except Exception as exc:  # noqa: BLE001  (only running out of memory is looked at here)
                if not isinstance(exc, ProblemFailed) and not is_oom(exc):
                    raise
                # a fresh exception: the caught one's traceback would keep the reference's tensors alive
                failure = ProblemFailed(exc.reason, exc.detail) if isinstance(exc, ProblemFailed) else \
                    ProblemFailed("evaluation_out_of_memory", f"{short(exc)} ({self.result.evidence.get('memory', '')})")
                if failure.reason not in ("reference_out_of_memory", "evaluation_out_of_memory") or \
                        self._oom_is_final() or attempts >= ALONE_ATTEMPTS:
                    raise failure from None
                attempts += 1
            self._release_reference()  # outside the except: the traceback no longer holds the tensors
            if self.turns.is_alone:
                self._yield_turn()
            else:
                self._go_alone()

    def _prepare(self) -> None:
        self.problem = problem_call(load_problem, self.job.problem_src)
        torch.manual_seed(self.cfg.seed)
        self.init_inputs = list(problem_call(self.problem.get_init_inputs))
        self.ref_model = self._reference_model()
        natives = max(self.cfg.trials, 2)
        self.trials = [f"seed{i}" for i in range(natives)] + ["permuted", *INPUT_SCALES]
        footprint, first = self._measured_reference()
        self.ledger.footprint = footprint
        self.plan = self._plan(footprint)
        self.expected = [first] + [self._reference(self._inputs(t)) for t in range(1, len(self.trials))]
        again = self._reference(self._inputs(0))
        self.timing_sets = [self._draw(self.cfg.seed + 5000 + i) for i in range(self.plan.timing_sets)]
        check = compare.compare_outputs(self.expected[0], again, self.cfg.rtol / 10, self.cfg.atol / 10)
        if not check.ok:
            raise ProblemFailed("non_deterministic", check.detail)
        outs = self.expected[:natives]
        if all(compare.is_constant(t) or t.numel() <= 1 for out in outs for t in tensors(out)) and \
                all(compare.compare_outputs(outs[0], o, 0, 0).ok for o in outs[1:]):
            raise ProblemFailed("constant_output", "the reference output does not depend on the inputs")
        self.ref_ops, self.ref_implied = self._ref_compute_ops()
        self.checks.append("reference")

    def _release_reference(self) -> None:
        self.expected, self.timing_sets = [], []
        self.ref_model = self.init_inputs = self.problem = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _ref_compute_ops(self) -> tuple[set[str], set[str]]:
        """The reference forward's compute ops and what its fused ones also did; its inputs are drawn outside the record."""
        inputs = self._inputs(0)
        recorder = instruments.OpRecorder(instruments.LaunchLog())
        with torch.no_grad(), recorder:
            problem_call(self.ref_model, *inputs)
        return set(recorder.compute_ops), set(recorder.implied)

    def count_ref_flops(self) -> None:
        """FLOPs of one reference forward (inputs drawn outside the count); 0 where the counter fails on it."""
        from torch.utils.flop_counter import FlopCounterMode
        inputs = self._inputs(0)
        counter = FlopCounterMode(display=False)
        try:
            with torch.no_grad(), counter:
                problem_call(self.ref_model, *inputs)
            self.ref_flops = float(counter.get_total_flops())
        except ProblemFailed as exc:  # it ran without the counter: the counter failed, and the floor keeps its bytes
            self.ref_flops = 0.0
            self.result.evidence["flops"] = f"uncounted: {exc.detail}"

    # ---- candidate side ----
    def _candidate_call(self, where: str, fn: Callable, *args: Any) -> Any:
        """Call candidate code: whatever it raises, BaseException included, is the candidate's verdict.

        Except an out-of-memory on CUDA within the candidate's allowance: that is the evaluator's.
        """
        try:
            return fn(*args)
        except BaseException as exc:  # noqa: BLE001  (the candidate's code, whatever it raised)
            if is_oom(exc):
                self._shortfall_or_none(exc, where, self.ledger.call_demand(exc))
            raise self._classify(exc, where) from None

    def _shortfall_or_none(self, exc: BaseException, where: str, demand: int) -> None:
        """Raise the evaluator's out-of-memory (problem_error, not cached, retried alone by the pool) where `demand`
        is within the candidate's allowance; return where it is the candidate's."""
        shortfall = self.ledger.shortfall(demand, where)
        if shortfall is None:
            return
        self.result.evidence["memory_shortfall"] = shortfall
        if not self._oom_is_final():
            self.result.evidence["retry_alone"] = "yes"
        raise ProblemFailed("evaluation_out_of_memory", f"{short(exc)} ({self.result.evidence.get('memory', '')})")

    def import_candidate(self) -> None:
        self.stage = "import"
        instruments.install_triton_hooks(self.launches)
        headers.use(self.job.headers, self.job.pch)  # the build's sources and flags exactly, or load_inline rebuilds
        self.snapshot = instruments.integrity_snapshot()
        self.threads = instruments.threads()
        with open(self.candidate_path, "w") as f:
            f.write(self.job.candidate_src)
        if self.job.extensions_dir:
            os.environ["TORCH_EXTENSIONS_DIR"] = self.job.extensions_dir
            os.environ["TORCH_CUDA_ARCH_LIST"] = self.job.arch_list  # same flags as the build: no rebuild
        started = time.perf_counter()
        before_import = self.ledger.allocated()
        self.candidate_ran = True
        try:
            spec = importlib.util.spec_from_file_location(CANDIDATE_MODULE, self.candidate_path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[CANDIDATE_MODULE] = module
            spec.loader.exec_module(module)
        except SyntaxError as exc:
            raise EarlyVerdict("compile_error", "syntax_error", error=f"line {exc.lineno}: {exc.msg}") from None
        except SystemExit as exc:
            raise EarlyVerdict("runtime_error", "sys_exit", code=exc.code, when="import") from None
        except BaseException as exc:  # noqa: BLE001  (the candidate's module, whatever it raised)
            raise EarlyVerdict("compile_error", "import_failed", error=short(exc)) from None
        finally:
            self.result.compile_s = round(time.perf_counter() - started, 3)
        self._check_integrity("import")
        model_new = getattr(module, "ModelNew", None)
        if not isinstance(model_new, type):
            raise EarlyVerdict("compile_error", "no_model_new", error="the candidate defines no class ModelNew")
        try:
            torch.manual_seed(self.cfg.seed)
            with torch.device(self.device):
                model = model_new(*self.init_inputs)
            self.model = model.to(self.device)
        except BaseException as exc:  # noqa: BLE001  (the candidate's constructor)
            raise EarlyVerdict("runtime_error", "init_failed", error=short(exc)) from None
        self.ledger.after_construction(before_import)
        self.buffers = self._inputs(0)
        self.ledger.hold(nbytes(self.buffers))
        weights = [*self.model.parameters(), *self.model.buffers()]
        self.launches.protected = [instruments.storage_range(t) for t in [*tensors(self.buffers), *weights]]
        self.checks.append("import")

    def _check_integrity(self, when: str) -> None:
        try:
            changed = instruments.integrity_violations(self.snapshot)
        except Exception as exc:  # the same code ran clean before the candidate: it broke a watched namespace
            raise EarlyVerdict("rejected", "runtime:monkey_patch", when=when, error=short(exc)) from None
        if changed:
            raise EarlyVerdict("rejected", "runtime:monkey_patch", when=when, changed=", ".join(changed[:10]))
        if started := instruments.new_threads(self.threads):
            raise EarlyVerdict("rejected", "background_thread", when=when, threads=", ".join(started)[:300])

    def _poison_allocator(self, outputs: list[Any]) -> None:
        """Freed blocks of each output's size full of 0xFF: an output allocated but not written shows the pattern.

        The CUDA caching allocator hands such blocks back; malloc on the CPU often does not, which
        is why `_unwritten_or` also compares a run with filled memory. How many blocks follows the
        memory plan (none where the problem leaves no room).
        """
        blocks = []
        for t in tensors(outputs):
            for _ in range(self.plan.poison_blocks):
                block = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=t.device)
                block.fill_(compare.POISON_BYTE)
                blocks.append(block)
        self._sync()
        del blocks

    def _refill(self, trial: int) -> list[Any]:
        """Copy the trial's values into the candidate's buffers: same objects and addresses, new contents."""
        values = self._inputs(trial)
        for i, (buf, src) in enumerate(zip(self.buffers, values)):
            if isinstance(buf, torch.Tensor):
                if not compare.fits_storage(buf):  # writing there would reach past the storage it left
                    raise EarlyVerdict("rejected", "input_mutated", trial=self.trials[trial], inputs=[i],
                                  detail="the input buffer's storage was shrunk")
                try:
                    buf.copy_(src)
                except RuntimeError as exc:  # the candidate changed the buffer itself (its shape, its strides)
                    raise EarlyVerdict("rejected", "input_mutated", trial=self.trials[trial], inputs=[i],
                                  error=short(exc)) from None
        return values

    def _call(self, trial: int, recorder: instruments.OpRecorder | None = None,
              fill: bool = False) -> tuple[Any, list[Any]]:
        values = self._refill(trial)
        self._poison_allocator(self.expected[trial])
        self.launches.reset()
        self.ledger.start_call(nbytes(values))
        with torch.no_grad(), _filled_memory(fill):
            with recorder if recorder is not None else contextlib.nullcontext():
                out = self._candidate_call(self.trials[trial], self.model, *self.buffers)
            self._candidate_call(self.trials[trial], self._sync)  # asynchronous faults of its kernels surface here
        self.ledger.end_call()
        self._check_integrity(self.trials[trial])
        return out, values

    def run_trials(self) -> None:
        self.stage = "trials"
        recorder = instruments.OpRecorder(self.launches)
        worst = compare.Comparison(True)
        for t, name in enumerate(self.trials):
            out, inputs = self._call(t, recorder if t == 0 else None)
            if t == 0:
                self.own_launches = self.launches.own(CANDIDATE_MODULE)
                self.compute_ops = sorted(set(recorder.compute_ops))
                self.implied = set(recorder.implied)
            changed = [i for i, (buf, src) in enumerate(zip(self.buffers, inputs))
                       if isinstance(buf, torch.Tensor) and not compare.unchanged(buf, src)]
            if changed:
                raise EarlyVerdict("rejected", "input_mutated", trial=name, inputs=changed)
            result = compare.compare_or_blame(self.expected[t], out, self.cfg.rtol, self.cfg.atol)
            self.result.trials = t + 1
            if not result.ok:
                self._fail_trial(t, out, result)
            worst = compare.Comparison(True, "ok", max(worst.max_abs_err, result.max_abs_err),
                                       max(worst.rel_err, result.rel_err))
            del out, inputs  # before the next trial's draw: held over, they were one input set and output beyond the plan
        self.result.max_abs_err, self.result.rel_err = worst.max_abs_err, worst.rel_err
        self.checks += ["inputs_unchanged", "outputs", f"trials:{len(self.trials)}"]

    def _fail_trial(self, t: int, out: Any, result: compare.Comparison) -> None:
        name = self.trials[t]
        self.result.max_abs_err, self.result.rel_err = result.max_abs_err, result.rel_err
        if result.reason == "output_not_plain_tensor":
            raise EarlyVerdict("rejected", "tensor_subclass", trial=name, detail=result.detail)
        for earlier in range(t):
            if compare.compare_or_blame(self.expected[earlier], out, self.cfg.rtol, self.cfg.atol).ok:
                raise EarlyVerdict("rejected", "memoized_output", trial=name,
                              detail=f"the output equals the reference for trial {self.trials[earlier]}")
        raise EarlyVerdict("incorrect", self._unwritten_or(result.reason, t, out), trial=name, detail=result.detail)

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
        except (EarlyVerdict, ProblemFailed):  # the verdict is settled: a fault or shortfall of the re-run keeps it
            return reason
        return "unwritten_output" if compare.unwritten_between(out, filled) else reason

    def proof_of_work(self) -> None:
        """The candidate's own kernels ran, did the work, and torch did not do it instead."""
        self.stage = "proof_of_work"
        allowed = {instruments.base_op(op) for op in self.cfg.allowed_torch_ops}
        library = sorted({op for op in self.compute_ops if instruments.base_op(op) in allowed})
        forbidden = sorted({op for op in self.compute_ops if op not in library})
        profiled = self._profile() if self.device.type == "cuda" else []
        custom = sorted({launch.name for launch in self.own_launches} | set(profiled))
        self.result.evidence.update(custom_kernels=", ".join(custom)[:500], torch_ops=", ".join(self.compute_ops)[:500])
        if not custom:
            raise EarlyVerdict("rejected", "no_custom_kernel", torch_ops=", ".join(self.compute_ops))
        if forbidden:
            raise EarlyVerdict("rejected", "torch_compute_in_forward", ops=", ".join(forbidden))
        if library and not self._reference_work_left(library):
            raise EarlyVerdict("rejected", "torch_does_the_work", ops=", ".join(library),
                          also=", ".join(sorted(self.implied)))
        self.checks.append("custom_kernel_ran")
        if self.own_launches:
            self._ablate()

    def _reference_work_left(self, library: list[str]) -> set[str]:
        """What the reference computes that the candidate's library calls did not: the custom kernels' share.

        Work is counted by family (every matrix product is one) plus what fused calls also do
        (addmm's bias add, a biased convolution's add, alpha/beta scaling).
        """
        work = {instruments.op_family(op) for op in self.ref_ops} | self.ref_implied
        done = {instruments.op_family(op) for op in library} | self.implied
        return work - done

    def _ablate(self) -> None:
        """Re-run trial 0 with every custom kernel's outputs overwritten after it ran: the result must change.

        A forward that raises from its own code on the overwritten values looked at them and bailed
        out, which proves nothing about their use; one that fails inside torch or a kernel used them.
        """
        self.stage = "ablation"
        self.launches.ablate = True
        try:
            out, _ = self._call(0)
            unchanged = compare.compare_or_blame(self.expected[0], out, self.cfg.rtol, self.cfg.atol).ok
            detail = "the output stays correct when the custom kernels' results are overwritten"
        except EarlyVerdict as v:
            unchanged = v.evidence.get("raised_by") == "candidate"
            detail = "the forward raised from its own code when the custom kernels' results were overwritten"
        finally:
            self.launches.ablate = False
        if unchanged:
            raise EarlyVerdict("rejected", "kernel_output_unused", detail=detail)
        self.checks.append("kernel_output_used")

    def _profile(self) -> list[str]:
        """Kernel names the profiler saw that no library (aten, cuBLAS, cuDNN, CUTLASS) launched; share as evidence."""
        from torch.profiler import ProfilerActivity, profile
        from kernelzero.gpu_workers.kernels import is_library_kernel
        self._refill(0)
        self.ledger.start_call()
        with torch.no_grad(), profile(activities=[ProfilerActivity.CUDA]) as prof:
            self._candidate_call("profiler", self.model, *self.buffers)
            self._candidate_call("profiler", torch.cuda.synchronize)
        kernels = instruments.kernel_times(prof)
        own = [k for k in kernels if not is_library_kernel(k)]
        total = sum(kernels.values()) or 1.0
        self.result.evidence["custom_time_share"] = f"{sum(kernels[k] for k in own) / total:.3f}"
        self.result.evidence["kernels"] = ", ".join(sorted(kernels))[:800]
        self.checks.append("profiler")
        return own

    def _compiled_reference(self) -> Callable | None:
        """The reference through torch.compile, compiled by one call here; None (with the reason) where that fails.

        Compiling patches torch.nn.Module itself (dynamo's mutation tracking) and may start threads, so
        the integrity baseline is taken again afterwards, once everything the candidate changed until
        now has been checked; only our compile runs in between.
        """
        self._check_integrity("before_compile")
        try:
            compiled = timing.compiled_in_process(self.ref_model)
            with torch.no_grad():
                compiled(*self.buffers)
            self._sync()
            return compiled
        except Exception as exc:  # the eager reference still times; only the compiled comparison is missing
            self.result.evidence["compile_reference"] = f"failed: {short(exc)}"[:500]
            return None
        finally:
            self.snapshot = instruments.integrity_snapshot()
            self.threads = instruments.threads()

    def time_it(self) -> None:
        self.stage = "timing"
        sets = [self.buffers, *self.timing_sets]  # drawn before the candidate was imported
        compiled = self._compiled_reference() if self.cfg.time_compiled_reference else None

        def candidate(*args: Any) -> Any:
            return self._candidate_call("timing", self.model, *args)

        # one wrapper frame on every side, so that its cost cancels out; what the references raise now,
        # after the candidate ran, is blamed like the rest
        def reference(*args: Any) -> Any:
            return self.ref_model(*args)

        def compiled_reference(*args: Any) -> Any:
            return compiled(*args)

        self.ledger.start_call()  # every call's peak below is the candidate's or the reference's (within the allowance)
        with torch.no_grad(), self.turns.exclusive():
            measured = timing.measure(
                candidate, reference, sets, budget_s=self.cfg.timing_budget_s,
                min_reps=self.cfg.timing_min_reps, max_reps=self.cfg.timing_max_reps, rel_se=self.cfg.timing_rel_se,
                compiled=compiled_reference if compiled is not None else None,
            )
        self._check_integrity("timing")
        r, cand = self.result, measured.candidate
        r.runtime_ms, r.runtime_iqr_ms, r.timing_n = cand.median_ms, cand.iqr_ms, cand.n
        r.ref_eager_ms = measured.reference.median_ms
        r.speedup = measured.speedup
        if measured.compiled is not None:
            r.ref_compile_ms, r.speedup_compile = measured.compiled.median_ms, measured.speedup_compiled
        r.evidence["off_stream_ms"] = f"{measured.off_stream_ms:.4g}"
        r.evidence["warmup_s"] = f"{measured.warmup_s:.3g}"
        if measured.off_stream_ms > max(UNJOINED_MIN_MS, UNJOINED_SHARE * cand.median_ms):
            raise EarlyVerdict("rejected", "unjoined_stream", off_stream_ms=f"{measured.off_stream_ms:.4g}",
                          runtime_ms=f"{cand.median_ms:.4g}",
                          detail="forward returned before its work was ordered on the caller's stream")
        moved = nbytes(self.buffers) + nbytes(self.expected[0])
        floor = timing.physical_floor_ms(self.job.gpu, moved, self.ref_flops)
        r.evidence["physical_floor_ms"] = f"{floor:.4g}"
        self.checks.append("timing")
        if cand.median_ms < self.cfg.physical_slack * floor:
            raise EarlyVerdict("rejected", "beyond_physical_limit", runtime_ms=f"{cand.median_ms:.4g}",
                          floor_ms=f"{floor:.4g}", speedup=f"{r.speedup:.3g}")

    # ---- blame ----
    def _classify(self, exc: BaseException, where: str) -> EarlyVerdict:
        """The candidate's verdict for an exception its code raised (or a device fault it left behind)."""
        verdict = candidate_verdict(exc, where)
        if innermost_file(exc) == self.candidate_path:
            verdict.evidence["raised_by"] = "candidate"
        return verdict

    def _blame(self, exc: BaseException) -> EarlyVerdict:
        """The verdict for an exception that reached `run`: the candidate's where it may have caused it, else ours."""
        if self.candidate_ran and is_oom(exc) and not self._through_candidate(exc):
            try:  # in the evaluator's own code: the candidate's only if it holds more than its allowance
                self._shortfall_or_none(exc, self.stage, self.ledger.held_demand(exc))
            except ProblemFailed as shortfall:
                self.result.evidence["whole_gpu"] = "yes" if self._oom_is_final() else "no"
                return EarlyVerdict("problem_error", shortfall.reason, detail=shortfall.detail)
        if self.candidate_ran and (is_oom(exc) or is_device_fault(exc) or self._through_candidate(exc)):
            return self._classify(exc, self.stage)
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return EarlyVerdict("evaluator_error", "exception", stage=self.stage, error=short(exc)[-500:], traceback=trace[-2000:])

    def _through_candidate(self, exc: BaseException) -> bool:
        tb = exc.__traceback__
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.candidate_path:
                return True
            tb = tb.tb_next
        return False

    def _conclude(self, v: EarlyVerdict) -> None:
        self.result.verdict, self.result.reason = v.verdict, v.reason
        self.result.evidence.update(v.evidence)

    def _stages(self) -> None:
        if self.device.type == "cuda":
            self._start_gpu()
        self.prepare_reference()
        if self.device.type == "cuda":
            self.count_ref_flops()
        self.import_candidate()
        self.run_trials()
        self.proof_of_work()
        if self.device.type == "cuda":
            self.time_it()

    def run(self) -> Evaluation:
        try:
            self._stages()
        except EarlyVerdict as v:
            self._conclude(v)
        except ProblemFailed as exc:
            if exc.reason in ("reference_out_of_memory", "evaluation_out_of_memory") and self.device.type == "cuda":
                self.result.evidence["whole_gpu"] = "yes" if self._oom_is_final() else "no"
            self._conclude(EarlyVerdict("problem_error", exc.reason, detail=exc.detail))
        except BaseException as exc:  # noqa: BLE001  (blamed on the candidate where it may have caused it)
            self._conclude(self._blame(exc))
        self.result.checks = self.checks
        return self.result


def run_job(job: Job) -> Evaluation:
    """The job's result; an exception of ours that escaped `TrialRun.run` is `evaluator_error`."""
    try:
        return TrialRun(job).run()
    except BaseException as exc:  # noqa: BLE001  (Evaluation blames what the candidate or problem raised)
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return evaluation("evaluator_error", "exception", device=torch.device(job.device).type, gpu=job.gpu,
                          evidence={"stage": "run_job", "traceback": trace[-2000:]})


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
