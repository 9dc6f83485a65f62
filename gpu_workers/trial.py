"""One evaluation inside a fresh, disposable worker process: reference first, then the candidate; never call it in a process you keep.

Order matters: the problem is loaded, its inputs drawn on the device from seeds and its
reference outputs computed (and checked for determinism and non-constancy) BEFORE candidate
code is imported, with the comparison functions and instruments bound beforehand too; so is the
reference's timing on CUDA, unless the job brought it from a reference-only job (gpu_workers/reference_times.py
shares one per problem and GPU): the candidate is timed alone against it. The
candidate then sees one set of input buffers, refilled in place with new values before every call.
Every call is judged the same way, timed or not (`_before_call`, `_judge`): the same buffers,
poisoned memory, its inputs checked unchanged and its output against the reference computed for
that set before import (whole, or a digest where the plan keeps only trial 0's whole); so a
candidate that tells timed calls from the others (by count, time, pointers) gains nothing by it.

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

from kernelzero.gpu_workers import compare, device_turns, digest, headers, instruments, memory, timing
from kernelzero.gpu_workers.blame import (EarlyVerdict, candidate_verdict, innermost_file, is_device_fault, is_oom,
                                         problem_call, short)
from kernelzero.gpu_workers.input_sets import BrokenBuffer, InputSets
from kernelzero.gpu_workers.memory_ledger import MemoryLedger, nbytes
from kernelzero.gpu_workers.result import ProblemFailed, evaluation
from kernelzero.kit.problems import load_problem
from kernelzero.kit.seeding import seed_generators
from kernelzero.kit.tracing import tensors
from kernelzero.schemas import Evaluation
from kernelzero.schemas.messages import Job, JobAnswer, ReferenceTiming

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
        self.input_key = int.from_bytes(os.urandom(8), "little")  # weighs the inputs' checksums (compare.fingerprint)
        self.expected: list[list[Any]] = []  # per input set: the reference's outputs, whole or as digests
        self.calls = 0  # the candidate's forward calls so far
        self.least = job.alone  # the retry of a shortfall keeps the least: trial 0's output whole, the rest digests
        self.ledger = MemoryLedger(self.device)
        self.reference_timing = job.reference  # the candidate's timing is measured against it

    # ---- GPU memory by need (gpu_workers/memory.py) ----
    def _start_gpu(self) -> None:
        # the cap counts memory the allocator reserved and holds free: in fixed segments a 4 GB request failed
        # beside 3.6 GB of them within a 17 GB cap (KernelBench level 1 cumsum, H100, 4 workers); segments that
        # grow in place let a request use them
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
        torch.cuda.init()  # seed_generators seeds CUDA only once it is initialised: before the first seeding
        self.turns = device_turns.for_device(self.device.index or 0)
        self.turns.share()
        free, self.device_bytes = torch.cuda.mem_get_info(self.device)
        self.gpu_bytes = memory.card_bytes(self.device_bytes, self.cfg.gpu_memory_cap_gb)
        self.usable = min(int(self.cfg.gpu_memory_fraction * self.gpu_bytes), free)
        self._cap(memory.share_bytes(self.usable, self.job.gpu_sharing))
        if self.job.alone:  # the pool's retry of an evaluation that ran short of memory in a share
            self._go_alone()

    def _cap(self, nbytes: int) -> None:
        torch.cuda.set_per_process_memory_fraction(min(1.0, nbytes / self.device_bytes), self.device)
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
        self.held_by_others = max(0, self.device_bytes - free - ours)
        self._cap(self.usable)

    def _yield_turn(self) -> None:
        """Give the GPU back: an evaluation waiting to time (holding its share) goes first; then alone again."""
        self.turns.release()
        self._go_alone()

    def _plan(self, fp: memory.Footprint) -> memory.MemoryPlan:
        expected = len(self.sets.names)
        if self.device.type != "cuda":
            return memory.MemoryPlan(alone=False, cap_bytes=0, need_bytes=memory.need_bytes(fp, expected, expected),
                                     whole_outputs=expected, poison_blocks=memory.MAX_POISON_BLOCKS)
        sharing = 1 if self.turns.is_alone else self.job.gpu_sharing
        chosen = memory.plan_memory(fp, expected=expected, usable_bytes=self.usable, sharing=sharing, least=self.least)
        self._cap(chosen.cap_bytes)
        where = "shared"
        if self.turns.is_alone:
            where = "alone" if self._oom_is_final() else \
                f"alone, {getattr(self, 'held_by_others', 0) / memory.GB:.3g} GB held by others"
        self.result.evidence["memory"] = (
            f"need {chosen.need_bytes / memory.GB:.3g} GB (floor {memory.floor_bytes(fp) / memory.GB:.3g} GB: inputs, "
            f"reference and candidate outputs), cap {chosen.cap_bytes / memory.GB:.3g} GB, {where}, "
            f"{chosen.whole_outputs} of {expected} reference outputs whole (the rest as digests), "
            f"{chosen.poison_blocks} poisoned blocks" + ("" if chosen.fits else ", does not fit"))
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
    def _reference_model(self) -> torch.nn.Module:
        seed_generators(self.cfg.seed)
        with torch.device(self.device):
            model = problem_call(self.problem.Model, *self.init_inputs)
        return problem_call(model.to, self.device)

    def _forward_reference(self, inputs: list[Any]) -> Any:
        self.ref_calls += 1
        seed_generators(10_000_019 + self.ref_calls)  # a reference that draws randomness differs run to run
        with torch.no_grad():
            out = problem_call(self.ref_model, *inputs)  # inputs are freshly drawn: nothing else sees them
        self._sync()
        return out

    def _reference(self, inputs: list[Any]) -> list[Any]:
        """The reference's flat outputs as it returned them (they may be its inputs or buffers: read or copy them at once)."""
        return problem_call(compare.flatten_outputs, self._forward_reference(inputs))

    def _measured_reference(self) -> tuple[memory.Footprint, list[Any]]:
        """The first reference output and the problem's footprint: its sizes, the forward's and a draw's peak memory."""
        draw_peak = self.ledger.draw_peak([functools.partial(self.sets.values, 0)])  # derived sets are made in place
        inputs = self.sets.values(0)
        base = self.ledger.mark()
        out = self._forward_reference(inputs)
        peak = self.ledger.peak_since(base)
        flat = _whole(problem_call(compare.flatten_outputs, out))
        weights = [*self.ref_model.parameters(), *self.ref_model.buffers()]
        fp = memory.Footprint(input_bytes=nbytes(inputs), output_bytes=nbytes(flat), weight_bytes=nbytes(weights),
                              ref_peak_bytes=max(peak, nbytes(flat)), draw_peak_bytes=draw_peak,
                              digest_bytes=sum(digest.nbytes_for(t) for t in tensors(flat)))
        return fp, flat

    def _sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize()  # device-wide: side streams included

    def prepare_reference(self) -> None:
        """Reference outputs for every input set, checked; on CUDA in a share of the GPU, or alone when they need more."""
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
                self.least = True  # tried again with the least the evaluation keeps
            self._release_reference()  # outside the except: the traceback no longer holds the tensors
            if self.turns.is_alone:
                self._yield_turn()
            else:
                self._go_alone()

    def _prepare(self) -> None:
        self.problem = problem_call(load_problem, self.job.problem_src)
        seed_generators(self.cfg.seed)
        self.init_inputs = list(problem_call(self.problem.get_init_inputs))
        self.ref_model = self._reference_model()
        self.sets = InputSets(self.problem, self.cfg.seed, self.device, natives=max(self.cfg.trials, 2),
                              timing=self.cfg.timing_input_sets)
        footprint, first = self._measured_reference()
        self.ledger.footprint = footprint
        self.plan = self._plan(footprint)
        self.expected = [first]
        if self.job.reference_only:  # its times need the model and the inputs; each candidate's job checks the rest
            return
        check = compare.compare_outputs(first, self._reference(self.sets.values(0)), self.cfg.rtol / 10,
                                        self.cfg.atol / 10)  # read as returned: nothing else runs in between
        if not check.ok:
            raise ProblemFailed("non_deterministic", check.detail)
        natives = [_constancy(first)]
        for s in range(1, len(self.sets.names)):  # one output at a time: copied whole, or only its digest kept
            out = self._reference(self.sets.values(s))
            if s < self.sets.natives:
                natives.append(_constancy(out))
            self.expected.append(_whole(out) if s < self.plan.whole_outputs else digest.of_outputs(out))
            del out
        if all(c[0] for c in natives) and all(c[1] == natives[0][1] for c in natives) and \
                all(compare.compare_outputs(natives[0][2], c[2], 0, 0).ok for c in natives[1:]):
            raise ProblemFailed("constant_output", "the reference output does not depend on the inputs")
        self.ref_ops, self.ref_implied = self._ref_compute_ops()
        self.checks.append("reference")

    def _release_reference(self) -> None:
        self.expected = []
        self.ref_model = self.init_inputs = self.problem = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def _ref_compute_ops(self) -> tuple[set[str], set[str]]:
        """The reference forward's compute ops and what its fused ones also did; its inputs are drawn outside the record."""
        inputs = self.sets.values(0)
        recorder = instruments.OpRecorder(instruments.LaunchLog())
        with torch.no_grad(), recorder:
            problem_call(self.ref_model, *inputs)
        return set(recorder.compute_ops), set(recorder.implied)

    def count_ref_flops(self) -> None:
        """FLOPs of one reference forward (inputs drawn outside the count); 0 where the counter fails on it."""
        from torch.utils.flop_counter import FlopCounterMode
        inputs = self.sets.values(0)
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
        self.buffers = self.sets.values(0)  # the candidate's inputs, refilled before every call
        largest = max([t.numel() * (2 if t.is_complex() else 1) for t in tensors(self.buffers)], default=0)
        self.input_weights = compare.position_weights(min(compare.CHUNK, largest), self.input_key, self.device)
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
            seed_generators(self.cfg.seed)
            with torch.device(self.device):
                model = model_new(*self.init_inputs)
            self.model = model.to(self.device)
        except BaseException as exc:  # noqa: BLE001  (the candidate's constructor)
            raise EarlyVerdict("runtime_error", "init_failed", error=short(exc)) from None
        self.ledger.after_construction(before_import)
        # every call, timed or not, follows the same L2 flush (timing.py): its buffer lives from the first call on
        self.flush = timing.flush_buffer() if self.device.type == "cuda" else None
        self.ledger.hold(nbytes([self.flush]))
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
        memory plan. `outputs` is trial 0's reference, always kept whole: every set's outputs have its sizes.
        """
        blocks = []
        for t in tensors(outputs):
            for _ in range(self.plan.poison_blocks):
                block = torch.empty(t.numel() * t.element_size(), dtype=torch.uint8, device=t.device)
                block.fill_(compare.POISON_BYTE)
                blocks.append(block)
        self._sync()
        del blocks

    def _refill(self, s: int) -> list[Any]:
        """Set `s` copied into the candidate's buffers (same objects and addresses); a buffer it broke is `input_mutated`."""
        try:
            self.sets.refill(self.buffers, s)
        except BrokenBuffer as broken:
            raise EarlyVerdict("rejected", "input_mutated", trial=self.sets.names[s], inputs=[broken.index],
                               detail=broken.detail) from None
        return self.buffers

    def _before_call(self, s: int) -> list[Any]:
        """What precedes every candidate call, timed or not: set `s` refilled into the buffers, their checksums, memory poisoned."""
        self._refill(s)
        self.input_prints = {i: compare.fingerprint(t, self.input_weights) for i, t in enumerate(self.buffers)
                             if isinstance(t, torch.Tensor)}
        self._poison_allocator(self.expected[0])
        self.launches.reset()
        self.ledger.start_call()
        self.calls += 1
        return self.buffers

    def _judge(self, s: int, out: Any) -> compare.Comparison:
        """Every call's output: its inputs unchanged, then its output against the reference for set `s` (a mismatch raises)."""
        self.ledger.end_call()
        if changed := self._changed_inputs():
            raise EarlyVerdict("rejected", "input_mutated", trial=self.sets.names[s], inputs=changed, call=self.calls)
        result = compare.compare_or_blame(self.expected[s], out, self.cfg.rtol, self.cfg.atol)
        if not result.ok:
            self._fail(s, out, result)
        return result

    def _changed_inputs(self) -> list[int]:
        """Which input tensors the call changed: their form or bits (compare.fingerprint), or left unreadable."""
        changed = []
        for i, before in self.input_prints.items():
            try:
                after = compare.fingerprint(self.buffers[i], self.input_weights)
            except RuntimeError:  # it was read before the call: the call broke it
                after = None
            if after != before:
                changed.append(i)
        return changed

    def _call(self, s: int, within: contextlib.AbstractContextManager | None = None, fill: bool = False) -> Any:
        """One untimed candidate call on set `s` (inside `within`: the op recorder, the profiler); its integrity checked."""
        name = self.sets.names[s]
        args = self._before_call(s)
        if self.flush is not None:  # as timing.py flushes before a timed call
            self.flush.zero_()
        with torch.no_grad(), _filled_memory(fill):
            with within if within is not None else contextlib.nullcontext():
                out = self._candidate_call(name, self.model, *args)
                self._candidate_call(name, self._sync)  # asynchronous faults of its kernels surface here
        self._check_integrity(name)
        return out

    def run_trials(self) -> None:
        self.stage = "trials"
        recorder = instruments.OpRecorder(self.launches)
        worst = compare.Comparison(True)
        for t in range(self.sets.trials):
            out = self._call(t, recorder if t == 0 else None)
            if t == 0:
                self.own_launches = self.launches.own(CANDIDATE_MODULE)
                self.compute_ops = sorted(set(recorder.compute_ops))
                self.implied = set(recorder.implied)
            result = self._judge(t, out)
            self.result.trials = t + 1
            worst = compare.Comparison(True, "ok", max(worst.max_abs_err, result.max_abs_err),
                                       max(worst.rel_err, result.rel_err))
            del out  # before the next trial's draw: held over, it was an output beyond the plan
        self.result.max_abs_err, self.result.rel_err = worst.max_abs_err, worst.rel_err
        self.checks += ["inputs_unchanged", "outputs", f"trials:{self.sets.trials}"]

    def _fail(self, s: int, out: Any, result: compare.Comparison) -> None:
        """The verdict for a wrong output on set `s`: another set's answer is memoized, else incorrect (or unwritten)."""
        name = self.sets.names[s]
        where = {"trial": name} if s < self.sets.trials else {"trial": name, "phase": "timing", "call": self.calls}
        self.result.max_abs_err, self.result.rel_err = result.max_abs_err, result.rel_err
        if result.reason == "output_not_plain_tensor":
            raise EarlyVerdict("rejected", "tensor_subclass", **where, detail=result.detail)
        for other in range(len(self.expected)):
            if other != s and compare.compare_or_blame(self.expected[other], out, self.cfg.rtol, self.cfg.atol).ok:
                raise EarlyVerdict("rejected", "memoized_output", **where,
                                   detail=f"the output equals the reference for set {self.sets.names[other]}")
        raise EarlyVerdict("incorrect", self._unwritten_or(result.reason, s, out), **where, detail=result.detail)

    def _unwritten_or(self, reason: str, s: int, out: Any) -> str:
        """`unwritten_output` when a re-run with filled new memory shows elements the candidate never wrote.

        The allocator poisoning before each call usually shows them already; malloc on the CPU, or an
        output carved from a larger allocation, can escape it. The verdict is settled before this
        re-run, so a candidate that notices the fill cannot change it, and a re-run that fails or runs
        out of memory (it holds the first output besides its own) keeps it.
        """
        if reason not in ("output_mismatch", "nan_parity"):
            return reason
        try:
            filled = self._call(s, fill=True)
        except Exception as exc:  # noqa: BLE001  (the verdict is settled: a fault or shortfall of the re-run keeps it)
            if isinstance(exc, (EarlyVerdict, ProblemFailed)) or is_oom(exc):
                return reason
            raise
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
            out = self._call(0)
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
        prof = profile(activities=[ProfilerActivity.CUDA])
        self._judge(0, self._call(0, prof))
        kernels = instruments.kernel_times(prof)
        own = [k for k in kernels if not is_library_kernel(k)]
        total = sum(kernels.values()) or 1.0
        self.result.evidence["custom_time_share"] = f"{sum(kernels[k] for k in own) / total:.3f}"
        self.result.evidence["kernels"] = ", ".join(sorted(kernels))[:800]
        self.checks.append("profiler")
        return own

    # ---- timing (timing.py): the reference before candidate code exists here, the candidate alone against it ----
    def _timed_set(self, rep: int) -> int:
        first = self.sets.trials
        return first + rep % (len(self.sets.names) - first)

    def _compiled_reference(self, inputs: list[Any]) -> tuple[Callable | None, str]:
        """The reference through torch.compile, compiled by one call on `inputs`; None and the reason where that fails."""
        try:
            compiled = timing.compiled_in_process(self.ref_model)
            with torch.no_grad():
                compiled(*inputs)
            self._sync()
            return compiled, ""
        except Exception as exc:  # the eager reference still times; only the compiled comparison is missing
            return None, f"failed: {short(exc)}"[:500]

    def time_reference(self) -> None:
        """The reference's times on this GPU (eager, and compiled when asked for), unless the job brought them.

        Measured before candidate code exists in this process, so that the times a reference-only job
        answers (gpu_workers/reference_times.py shares them with every sample of the problem) are the
        reference's alone; its sets are refilled before each call as the candidate's are.
        """
        if not self._clocked() or self.reference_timing is not None:
            return
        self.stage = "reference_timing"
        buffers = self.sets.values(0)
        compiled, compile_error = self._compiled_reference(buffers) if self.cfg.time_compiled_reference else (None, "")

        def refilled(rep: int) -> list[Any]:
            problem_call(self.sets.refill, buffers, self._timed_set(rep))
            return buffers

        sides = [timing.Side(functools.partial(problem_call, self.ref_model), refilled)]
        if compiled is not None:
            sides.append(timing.Side(functools.partial(problem_call, compiled), refilled))
        with torch.no_grad(), self.turns.exclusive():
            measured = timing.measure(sides, timing.flush_buffer(), budget_s=self.cfg.timing_budget_s,
                                      min_reps=self.cfg.timing_min_reps, max_reps=self.cfg.timing_max_reps,
                                      rel_se=self.cfg.timing_rel_se)
        eager = measured.sides[0]
        self.reference_timing = ReferenceTiming(
            eager_ms=eager.median_ms, eager_iqr_ms=eager.iqr_ms, n=eager.n, warmup_s=measured.warmup_s,
            compiled_ms=measured.sides[1].median_ms if compiled is not None else 0.0, compile_error=compile_error,
            clock_ms=measured.clock_ms)
        self.checks.append("reference_timing")

    def _timed_candidate(self) -> timing.Side:
        """The candidate judged on every call like a trial, on the timing sets in turn."""
        def candidate(*args: Any) -> Any:
            return self._candidate_call("timing", self.model, *args)

        return timing.Side(candidate, lambda rep: self._before_call(self._timed_set(rep)),
                           lambda rep, out: self._judge(self._timed_set(rep), out))

    def _clocked(self) -> bool:
        """Whether this job times: on a GPU unless the job is untimed (a correctness-only evaluation)."""
        return self.device.type == "cuda" and self.job.timed

    def time_it(self) -> None:
        """Timed calls, every output judged; on the CPU, or untimed, the same calls judged without a clock (no timing
        claims)."""
        self.stage = "timing"
        calls = self.calls
        if not self._clocked():
            with torch.no_grad():  # as every other call (tests/evaluator/candidates/timed_call_context.py tells)
                timing.untimed(self._timed_candidate(), self.cfg.cpu_timed_calls)
            self.checks.append(f"timed_calls_judged:{self.calls - calls}")
            return
        asked = time.monotonic()
        with torch.no_grad(), self.turns.exclusive():
            granted = time.monotonic()
            measured = timing.measure(
                [self._timed_candidate(), timing.sync_probe()], self.flush, budget_s=self.cfg.timing_budget_s,
                min_reps=self.cfg.timing_min_reps, max_reps=self.cfg.timing_max_reps, rel_se=self.cfg.timing_rel_se,
                sync_side=1)
        # where a group's time goes: timing holds the GPU alone, so these add up across the samples of one GPU
        self.result.evidence["turn_wait_s"] = f"{granted - asked:.3g}"
        self.result.evidence["timing_s"] = f"{time.monotonic() - granted:.3g}"
        self._check_integrity("timing")
        self.checks.append(f"timed_calls_judged:{self.calls - calls}")
        self._record(measured)

    def _record(self, measured: timing.Measured) -> None:
        """The timing's numbers in the result; a side stream left unjoined or a time beyond physics rejected."""
        r, cand, ref = self.result, measured.sides[0], self.reference_timing
        off_stream_ms = measured.off_stream_ms[0]
        r.runtime_ms, r.runtime_iqr_ms, r.timing_n = cand.median_ms, cand.iqr_ms, cand.n
        r.ref_eager_ms, r.speedup = ref.eager_ms, ref.eager_ms / cand.median_ms
        if ref.compiled_ms:
            r.ref_compile_ms, r.speedup_compile = ref.compiled_ms, ref.compiled_ms / cand.median_ms
        if ref.compile_error:
            r.evidence["compile_reference"] = ref.compile_error
        r.evidence["off_stream_ms"] = f"{off_stream_ms:.4g}"
        r.evidence["warmup_s"] = f"{measured.warmup_s:.3g}"
        if ref.clock_ms:  # above 1: this job's clock was slower than the reference's (its time is the clock's inverse)
            r.evidence["clock_vs_reference"] = f"{measured.clock_ms / ref.clock_ms:.3g}"
        if off_stream_ms > max(UNJOINED_MIN_MS, UNJOINED_SHARE * cand.median_ms):
            raise EarlyVerdict("rejected", "unjoined_stream", off_stream_ms=f"{off_stream_ms:.4g}",
                               runtime_ms=f"{cand.median_ms:.4g}",
                               detail="forward returned before its work was ordered on the caller's stream")
        moved = nbytes(self.buffers) + nbytes(self.expected[0])
        floor = timing.physical_floor_ms(self.job.gpu, moved, self.ref_flops)
        r.evidence["physical_floor_ms"] = f"{floor:.4g}"
        self.checks.append("timing")
        if timing.beyond_physical_limit(cand.median_ms, floor, self.cfg.physical_slack):
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
        self.time_reference()
        if self.job.reference_only:
            return
        if self._clocked():  # for the physical floor of a time
            self.count_ref_flops()
        self.import_candidate()
        self.run_trials()
        self.proof_of_work()
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


def _whole(outputs: list[Any]) -> list[Any]:
    """A reference's outputs copied, so that nothing it keeps or returns of its inputs changes them later."""
    return [t.clone() if isinstance(t, torch.Tensor) else t for t in outputs]


def _constancy(out: list[Any]) -> tuple[bool, list[tuple[int, ...]], list[Any]]:
    """Whether every tensor of a reference output is constant (or has one element), their shapes, their first elements.

    Native trials whose outputs are all constant and agree on these do not depend on the inputs.
    """
    shapes = [tuple(t.shape) for t in tensors(out)]
    constant = all(t.numel() <= 1 or compare.is_constant(t) for t in tensors(out))
    heads = [t.reshape(-1)[:1].clone() if isinstance(t, torch.Tensor) else t for t in out]
    return constant, shapes, heads


def run_job(job: Job) -> JobAnswer:
    """The job's result, or a reference-only job's times; an exception of ours that escaped `TrialRun.run` is `evaluator_error`."""
    try:
        run = TrialRun(job)
        result = run.run()
        if job.reference_only and result.verdict == "correct" and run.reference_timing is not None:
            return JobAnswer(reference=run.reference_timing)
        return JobAnswer(result=result)
    except BaseException as exc:  # noqa: BLE001  (Evaluation blames what the candidate or problem raised)
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return JobAnswer(result=evaluation("evaluator_error", "exception", device=torch.device(job.device).type,
                                           gpu=job.gpu, evidence={"stage": "run_job", "traceback": trace[-2000:]}))


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
