"""EvaluatorPool: one persistent worker per GPU (or one on the CPU), CUDA builds on a CPU pool, result and build caches.

`await pool.evaluate(problem_src, candidate_src)` never raises for anything the candidate or the
problem does: an unusable problem is a `problem_error` result (and every later candidate of that
problem gets the same answer without a run), a fault of the evaluator's own an `evaluator_error`
result. It raises SandboxUnavailable (at start, or if a job finds less containment than required)
when candidate code would run less contained than `require_sandbox` asks. Workers and builds start
in the pool's sandbox (kernelzero/sandbox/launcher.py); every result names it in evidence["sandbox"].
A worker that dies or stops answering is replaced. Results are cached on disk by (problem hash,
candidate hash, GPU, evaluator version, rule-relevant config, containment), signed
(gpu_workers/signed_cache.py: an entry that does not verify is evaluated again); timeouts, lost
workers, evaluator errors and memory shortages are not cached, and `use_cache=False` neither reads
nor writes results; with the cache, an evaluation asked while the same one runs waits for its
verdict. An evaluation that ran short of memory in a share while the candidate stayed
within its allowance (gpu_workers/memory.py) is run once more, alone on its GPU from the start. On a
GPU, a problem's reference is timed once by a job of its own and every sample of it is timed alone
against those times (gpu_workers/reference_times.py keeps them, signed, per problem, GPU and settings).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import sys
import time
import uuid
from pathlib import Path
from typing import NamedTuple

import msgspec

from kernelzero.config import EvaluatorConfig
from kernelzero.gpu_workers import headers, prebuilt_headers
from kernelzero.gpu_workers.device_turns import TURNS_INSIDE, turns_dir
from kernelzero.gpu_workers.memory import card_bytes
from kernelzero.gpu_workers.reference_times import ReferenceTimes
from kernelzero.gpu_workers.result import EVALUATOR_VERSION, evaluation
from kernelzero.gpu_workers.signed_cache import SignedFiles
from kernelzero.gpu_workers.ast_rules import check_source
from kernelzero.sandbox import untrusted_files
from kernelzero.sandbox.client import ForkServerClient
from kernelzero.sandbox.launcher import Sandbox, SandboxUnavailable
from kernelzero.sandbox.workspace import EXTENSIONS, PRECOMPILED
from kernelzero.schemas import Evaluation
from kernelzero.schemas.messages import (BUILD_LINE, CONFINED, REFUSED, BuildOutcome, Built, Job, JobAnswer,
                                         ReferenceTiming, SandboxRefusal)

NOT_CACHED = {"timeout", "evaluator_error"}
NOT_CACHED_PREFIX = ("worker_lost", "reference_out_of_memory", "evaluation_out_of_memory")  # the GPU may have been busy
BUILD_OUTPUT_KEPT = 1 << 16  # bytes kept of each end of a build's output: our first line, its last lines
_CONFIG_NOT_IN_KEY = {"cache_dir", "time_heldout", "build_workers", "workers_per_gpu", "cpu_workers", "device", "timeout_s",
                      "compile_timeout_s", "build_headers", "precompiled_headers_dir", "require_sandbox", "bwrap", "candidate_uid", "sandbox_binds"}


def _transient_shortfall(result: Evaluation) -> bool:
    """A memory shortfall that another run may not meet: without the whole GPU, or within a candidate's allowance."""
    return result.evidence.get("whole_gpu") == "no" or "memory_shortfall" in result.evidence


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# an H100 (80 GB, 16 cores) judged KernelBench levels 1 and 2 with 4 workers, every problem as expected
# (docs/BENCHMARKS.md, issue 26); a bigger card gets more, never past a core per worker
WORKER_BYTES = 16 * 2**30


def workers_per_gpu(config: EvaluatorConfig, gpu_bytes: int, gpus: int, gpu_processes: int = 1) -> int:
    """`[evaluator] workers_per_gpu`, or where it is 0, as many as the usable memory holds at WORKER_BYTES each
    and the cores allow (one each, one left for the host), shared by the `gpu_processes` evaluator processes."""
    if config.workers_per_gpu > 0:
        return config.workers_per_gpu
    usable = config.gpu_memory_fraction * card_bytes(gpu_bytes, config.gpu_memory_cap_gb)
    by_memory = int(usable // WORKER_BYTES)
    by_cores = ((os.cpu_count() or 1) - 1) // max(1, gpus)
    return max(1, min(by_memory, by_cores) // max(1, gpu_processes))


def resolve_devices(device: str, config: EvaluatorConfig, gpu_processes: int = 1) -> tuple[list[str], str, str]:
    """(worker devices, GPU name, CUDA arch list) for 'auto' | 'cpu' | 'cuda' | 'cuda:N', as many as `config` asks."""
    import torch
    if device == "cpu" or (device == "auto" and not torch.cuda.is_available()):
        return ["cpu"] * max(1, config.cpu_workers), "", ""
    if not torch.cuda.is_available():
        raise RuntimeError("device cuda requested but torch sees no CUDA GPU")
    indices = [int(device.split(":")[1])] if ":" in device else list(range(torch.cuda.device_count()))
    major, minor = torch.cuda.get_device_capability(indices[0])
    per_gpu = workers_per_gpu(config, torch.cuda.get_device_properties(indices[0]).total_memory,
                              torch.cuda.device_count(), gpu_processes)
    devices = [f"cuda:{i}" for i in indices for _ in range(per_gpu)]
    return devices, torch.cuda.get_device_name(indices[0]), f"{major}.{minor}"


class _Worker(NamedTuple):
    """A worker: its device and its fork server (`python -m kernelzero.gpu_workers.zygote`) in the pool's sandbox."""

    device: str
    server: ForkServerClient


class EvaluatorPool:
    def __init__(self, config: EvaluatorConfig, *, device: str | None = None, use_cache: bool = True,
                 gpu_processes: int = 1):
        """`gpu_processes`: evaluator processes (each with this pool's `workers_per_gpu`) sharing each GPU."""
        self.config = config
        self.device = device or self.config.device
        self.use_cache = use_cache
        self.gpu_processes = max(1, gpu_processes)
        self.gpu_sharing = 1  # jobs sharing each GPU: known once started
        self._unusable: dict[str, Evaluation] = {}  # problem hash -> its problem_error
        self._running: dict[Path, asyncio.Event] = {}  # result path -> set when its evaluation ends
        self.cache_dir = Path(os.path.expanduser(self.config.cache_dir))
        self.sandbox = Sandbox(self.config, self.cache_dir)  # probed once started
        self._signed = SignedFiles(self.cache_dir)
        self.references = ReferenceTimes(self.cache_dir, self._signed, use_disk=use_cache)
        self._workers: list[_Worker] = []
        self._idle: asyncio.Queue[_Worker] = asyncio.Queue()
        key_fields = {k: v for k, v in msgspec.structs.asdict(self.config).items() if k not in _CONFIG_NOT_IN_KEY}
        self._config_key = sha256(msgspec.json.encode(key_fields).decode())[:16]
        self.gpu = self.arch = self.device_type = ""  # known once started
        # one build per core measured faster on an H200 host than one per two cores (docs/BENCHMARKS.md);
        # two compile jobs each, so a lone build compiles its bindings and kernels side by side
        builds = self.config.build_workers or max(1, os.cpu_count() or 1)
        self._builds = asyncio.Semaphore(builds)
        self._build_jobs = max(2, (os.cpu_count() or 2) // builds)
        self._pch: asyncio.Task | None = None  # the precompiled header's folder on this host, made once per pool

    async def __aenter__(self) -> "EvaluatorPool":
        devices, self.gpu, self.arch = resolve_devices(self.device, self.config, self.gpu_processes)
        self.device_type = "cpu" if devices[0] == "cpu" else "cuda"
        self.gpu_sharing = devices.count(devices[0]) * self.gpu_processes
        for sub in ("results", "builds", "scratch"):
            (self.cache_dir / sub).mkdir(parents=True, exist_ok=True)
        await self.sandbox.probe()
        self._workers = [_Worker(d, self._server(d)) for d in devices]
        try:
            await asyncio.gather(*(w.server.started() for w in self._workers))
        except BaseException:
            await self._stop()
            raise
        for w in self._workers:
            self._idle.put_nowait(w)
        return self

    @property
    def workers(self) -> int:
        """How many evaluations this pool runs at once (one per worker process)."""
        return len(self._workers)

    async def __aexit__(self, *exc) -> None:
        await self._stop()

    def _server(self, device: str) -> ForkServerClient:
        env = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1",  # device queries without cuInit: the worker stays fork-safe
               "TRITON_INTERPRET": "1" if device == "cpu" else None}  # read when the worker imports triton
        cuda = device != "cpu"
        workspace = self.cache_dir / "scratch" / uuid.uuid4().hex
        return ForkServerClient(self.sandbox, "kernelzero.gpu_workers.zygote", workspace, gpu=cuda, env=env,
                                writable=[(turns_dir(), TURNS_INSIDE)] if cuda else [])

    async def _stop(self) -> None:
        await asyncio.gather(*(asyncio.to_thread(w.server.close) for w in self._workers))

    # ---- caches ----
    def _result_path(self, problem_src: str, candidate_src: str, timed: bool = True) -> Path:
        """Where the verdict is cached: an untimed one on a GPU apart from a timed one (on the CPU both are untimed)."""
        untimed = ["untimed"] if not timed and self.device_type == "cuda" else []
        key = "|".join([sha256(problem_src), sha256(candidate_src), self.gpu or "cpu", EVALUATOR_VERSION,
                        self._config_key, self.sandbox.label, *untimed])
        return self.cache_dir / "results" / f"{sha256(key)}.json"

    def _reference_key(self, problem_src: str) -> str:
        """Whose reference times: the problem's text, this GPU, this evaluator and its settings (seed included)."""
        return sha256("|".join([sha256(problem_src), self.gpu, EVALUATOR_VERSION, self._config_key]))

    def _cache_get(self, path: Path) -> Evaluation | None:
        payload = self._signed.read(path) if self.use_cache else None
        if payload is None:
            return None
        try:
            result = msgspec.json.decode(payload, type=Evaluation)
        except msgspec.DecodeError:
            return None
        result.evaluator_version = EVALUATOR_VERSION  # the path is keyed by it; entries of kz-eval-4 omitted it
        result.cached = True
        return result

    def _cache_put(self, path: Path, result: Evaluation) -> None:
        if not self.use_cache or result.verdict in NOT_CACHED or result.reason.startswith(NOT_CACHED_PREFIX):
            return
        self._signed.write(path, msgspec.json.encode(result))

    # ---- evaluation ----
    async def evaluate(self, problem_src: str, candidate_src: str, timed: bool = True) -> Evaluation:
        """The candidate's verdict on the problem; `timed` False judges it as on the CPU, without a clock: no time,
        no speedup, and neither verdict that needs one (`unjoined_stream`, `beyond_physical_limit`), and no job of
        the reference's own."""
        known = self._unusable.get(sha256(problem_src))
        if known is not None:
            return msgspec.structs.replace(known, cached=True)
        static = self._static(candidate_src)
        if static is not None:
            return static
        timed = timed and self.device_type == "cuda"
        path = self._result_path(problem_src, candidate_src, timed)
        while True:
            cached = self._cache_get(path)
            if cached is not None:
                return cached
            running = self._running.get(path)
            if running is None:
                break
            # a sampled group or a held-out measurement often holds the same source twice (a fifth of a GPU
            # demo's held-out samples): the second waits for the first's cached verdict instead of a job of its own
            await running.wait()
        if not self.use_cache:
            return await self._judge(problem_src, candidate_src, timed, path)
        self._running[path] = running = asyncio.Event()
        try:
            return await self._judge(problem_src, candidate_src, timed, path)
        finally:
            del self._running[path]
            running.set()  # a verdict not cached (a timeout, a lost worker) sends the next waiter to a job of its own

    async def _judge(self, problem_src: str, candidate_src: str, timed: bool, path: Path) -> Evaluation:
        """The verdict of a job (and a build, and the reference's timing, where they are needed), cached at `path`."""
        ext_dir, built, compile_s = "", Built(), 0.0
        if self.device_type == "cuda" and ("load_inline" in candidate_src or "cpp_extension" in candidate_src):
            ext_dir, built, compile_s, failure = await self._build(candidate_src)
            if failure is not None:
                self._cache_put(path, failure)
                return failure
        reference = await self._reference_timing(problem_src) if timed else None
        if isinstance(reference, Evaluation):  # every sample of the problem gets the reference's failure
            result = msgspec.structs.replace(reference, evidence=dict(reference.evidence))
        else:
            result = await self._run(problem_src, candidate_src, ext_dir, built, reference=reference, timed=timed)
            if result.reason == "evaluation_out_of_memory" and result.evidence.get("retry_alone") == "yes":
                result = await self._run(problem_src, candidate_src, ext_dir, built, alone=True, reference=reference,
                                         timed=timed)
        result.compile_s = round(result.compile_s + compile_s, 3)
        if ext_dir:
            result.evidence["headers"] = built.headers
            result.evidence["build_s"] = f"{compile_s:.3f}"  # 0: an earlier build served
            result.evidence["build_cpu_s"] = f"{built.cpu_s if compile_s else 0.0:.3f}"
        if result.verdict == "problem_error" and not _transient_shortfall(result):
            self._unusable[sha256(problem_src)] = result
        self._cache_put(path, result)
        return result

    def _base(self, verdict: str, reason: str, **evidence: str) -> Evaluation:
        evidence.setdefault("sandbox", self.sandbox.label)
        return evaluation(verdict, reason, evidence=evidence, device=self.device_type, gpu=self.gpu)

    def _static(self, candidate_src: str) -> Evaluation | None:
        if not self.config.static_checks:
            return None
        try:
            findings = check_source(candidate_src)
        except SyntaxError as exc:
            result = self._base("compile_error", "syntax_error", error=f"line {exc.lineno}: {exc.msg}")
            result.checks = ["static"]
            return result
        if not findings:
            return None
        first = findings[0]
        result = self._base("rejected", f"static:{first.rule}", line=str(first.line), detail=first.detail,
                            findings="; ".join(f"{f.rule}@{f.line}: {f.detail}" for f in findings[:10]))
        result.checks = ["static"]
        return result

    async def _reference_timing(self, problem_src: str) -> ReferenceTiming | Evaluation:
        """The problem's reference timed on this GPU (reference_times.py): its times, or the failure every sample gets."""
        async def measure() -> ReferenceTiming | Evaluation:
            answer = await self._ask(problem_src, "", reference_only=True)
            if answer.reference is not None:
                return answer.reference
            failed = answer.result
            if failed.verdict in ("problem_error", "evaluator_error", "timeout") or failed.reason == "worker_lost":
                failed.evidence.setdefault("sandbox", self.sandbox.label)
                return failed
            # no candidate ran in that job: whatever ended it (a crash, an exit) was the problem's code
            return self._base("problem_error", "reference_failed", job_verdict=f"{failed.verdict} {failed.reason}",
                              output=failed.evidence.get("output", "")[-500:])

        return await self.references.get(self._reference_key(problem_src), measure)

    async def _run(self, problem_src: str, candidate_src: str, ext_dir: str, built: Built = Built(),
                   alone: bool = False, reference: ReferenceTiming | None = None, timed: bool = True) -> Evaluation:
        result = (await self._ask(problem_src, candidate_src, ext_dir, built, alone, reference, timed=timed)).result
        result.evidence["sandbox"] = self.sandbox.label
        if "static" not in result.checks and self.config.static_checks:
            result.checks = ["static", *result.checks]
        return result

    async def _ask(self, problem_src: str, candidate_src: str, ext_dir: str = "", built: Built = Built(),
                   alone: bool = False, reference: ReferenceTiming | None = None,
                   reference_only: bool = False, timed: bool = True) -> JobAnswer:
        """One job on the next idle worker: its answer (a lost worker's is `worker_lost`); a refusal raises."""
        worker = await self._idle.get()

        def job(scratch: str, extensions: str) -> bytes:
            return msgspec.msgpack.encode(Job(
                problem_src=problem_src, candidate_src=candidate_src, device=worker.device, scratch_dir=scratch,
                config=self.config, gpu=self.gpu, extensions_dir=extensions, arch_list=self.arch, headers=built.mode,
                pch=built.pch, gpu_sharing=self.gpu_sharing, alone=alone, reference=reference,
                reference_only=reference_only, timed=timed))

        try:  # the job's own timeout is the worker's; a minute more is the worker's to answer
            answer = await worker.server.ask(job, self.config.timeout_s + 60, ext_dir)
        finally:
            self._idle.put_nowait(worker)
        if answer is None:
            return JobAnswer(result=self._base("runtime_error", "worker_lost",
                                               detail="the worker died or stopped answering; replaced"))
        outcome = msgspec.msgpack.decode(answer, type=JobAnswer)
        if outcome.refusal is not None:
            raise SandboxUnavailable(f"{self.sandbox.refusal(outcome.refusal.missing)} (this job: {outcome.refusal.in_force})")
        return outcome

    async def _build(self, candidate_src: str) -> tuple[str, Built, float, Evaluation | None]:
        """(extension dir, how it was built, compile seconds, failure verdict or None); cached by source and flags.

        Builds try the configured headers mode, then the heavier ones (gpu_workers/headers.py): after
        a split build any failure, after a slim one a missing declaration. The failure reported is
        the last build's, its mode named.
        """
        import torch
        # the sandbox's mode is in the key: a build inside bwrap sits at /kz/ext, one outside at its host path
        flags = "|".join([candidate_src, torch.__version__, str(torch.version.cuda), self.arch,
                          f"headers={self.config.build_headers}", f"pch={bool(self.config.precompiled_headers_dir)}",
                          f"sandbox={self.sandbox.mode}"])
        ext_dir = self.cache_dir / "builds" / sha256(flags)[:24]
        # the mark of a finished build lies beside its folder, signed: the build itself could write in the folder
        marker = ext_dir.with_name(ext_dir.name + ".ok")
        known = self._signed.read(marker)
        if known is not None:
            return str(ext_dir), msgspec.json.decode(known, type=Built), 0.0, None
        ext_dir.mkdir(parents=True, exist_ok=True)
        src_path = ext_dir / "kz_candidate.py"
        untrusted_files.replace_file(str(src_path), candidate_src.encode())  # a failed build may have left a link there
        self.sandbox.own(ext_dir)
        pch_dir = await self._precompiled_header()
        spent = cpu = 0.0
        modes = list(headers.MODES[headers.MODES.index(self.config.build_headers):])
        while modes:
            mode = modes.pop(0)
            outcome = await self._build_once(src_path, ext_dir, mode, pch_dir)
            spent += outcome.compile_s
            cpu += outcome.cpu_s
            if outcome.ok:
                built = Built(mode=mode, headers=outcome.headers or mode, pch=self._pch_inside(pch_dir, mode),
                              cpu_s=round(cpu, 3))
                self._signed.write(marker, msgspec.json.encode(built))
                return str(ext_dir), built, round(spent, 3), None
            took = outcome.headers or mode
            if outcome.timeout or (took == "slim" and not headers.may_need_full_headers(outcome.error + outcome.log)):
                break
            if took == "slim" and modes[:1] == ["slim"]:
                modes.pop(0)  # a split build that split nothing was the slim build
        reason = "build_timeout" if outcome.timeout else "build_failed"
        failure = self._base("compile_error", reason, error=outcome.error, log=outcome.log,
                             headers=outcome.headers or mode, build_cpu_s=f"{cpu:.3f}")
        failure.compile_s = round(spent, 3)
        return "", Built(), 0.0, failure

    async def _precompiled_header(self) -> str:
        """The folder of torch's binding headers precompiled on this host ("" where none can be made); made once."""
        if not self.config.precompiled_headers_dir or self.device_type != "cuda":
            return ""  # CPU pools build C++ only in tests: a precompiled header there would cost more than it saves
        if self._pch is None:
            folder = Path(os.path.expanduser(self.config.precompiled_headers_dir))
            self._pch = asyncio.create_task(asyncio.to_thread(prebuilt_headers.build, folder, True))
        header = await self._pch
        return str(header.parent) if header is not None else ""

    def _pch_inside(self, pch_dir: str, mode: str) -> str:
        """The precompiled header's path as a build sees it: the one `-include` names (a part of the build's hash)."""
        if not pch_dir or mode == "full":
            return ""
        return os.path.join(PRECOMPILED if self.sandbox.mode == "bwrap" else pch_dir, prebuilt_headers.HEADER)

    async def _build_once(self, src_path: Path, ext_dir: Path, mode: str, pch_dir: str) -> BuildOutcome:
        """One build process's outcome, its output's tail in `log`; may raise SandboxUnavailable."""
        env = {"TORCH_CUDA_ARCH_LIST": self.arch, "MAX_JOBS": str(self._build_jobs), "CUDA_VISIBLE_DEVICES": "",
               "TRITON_INTERPRET": None}
        inside = EXTENSIONS if self.sandbox.mode == "bwrap" else str(ext_dir)
        confinement = [] if self.sandbox.mode == "off" else ["--confinement", self.sandbox.confinement_arg()]
        pch = self._pch_inside(pch_dir, mode)
        argv = [sys.executable, "-m", "kernelzero.gpu_workers.build", os.path.join(inside, src_path.name), inside,
                "--headers", mode, *(["--pch", pch] if pch else []), *confinement]
        async with self._builds:
            started = time.perf_counter()
            proc = await self.sandbox.start(argv, env=env, writable=[(str(ext_dir), EXTENSIONS)],
                                            readable=[(pch_dir, PRECOMPILED)] if pch else [],
                                            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
                                            start_new_session=True)
            try:
                out = await asyncio.wait_for(_ends_of_output(proc), timeout=self.config.compile_timeout_s)
            except asyncio.TimeoutError:
                proc.kill()
                await proc.wait()
                return BuildOutcome(ok=False, timeout=True,
                                    error=f"no result within compile_timeout_s={self.config.compile_timeout_s:g}")
        elapsed = time.perf_counter() - started
        text = out.decode(errors="replace")
        marker = text.rfind(BUILD_LINE)
        refused, confined = text.find(REFUSED), text.find(CONFINED)
        if self.sandbox.mode != "off" and refused >= 0 and not 0 <= confined < refused:  # printed before candidate code
            refusal = msgspec.json.decode(text[refused + len(REFUSED):].splitlines()[0], type=SandboxRefusal)
            raise SandboxUnavailable(f"{self.sandbox.refusal(refusal.missing)} (this build: {refusal.in_force})")
        outcome = BuildOutcome(ok=False, error=text[-3000:], compile_s=elapsed)  # the process died before its line
        if marker >= 0:
            try:
                outcome = msgspec.json.decode((text[marker + len(BUILD_LINE):].splitlines() or [""])[0],
                                              type=BuildOutcome)
            except msgspec.DecodeError:
                pass  # whatever the candidate printed after our line is not an outcome
        outcome.log = text[-2000:]
        return outcome


async def _ends_of_output(proc: asyncio.subprocess.Process, kept: int = BUILD_OUTPUT_KEPT) -> bytes:
    """The first and last `kept` bytes of what `proc` prints until it exits: a build's candidate code may print
    without end, and the whole of it would be held in the pool's memory."""
    head, tail = bytearray(), bytearray()
    while chunk := await proc.stdout.read(1 << 16):
        split = max(0, kept - len(head))
        head += chunk[:split]
        tail += chunk[split:]
        del tail[:-kept]
    await proc.wait()
    return bytes(head + tail)


def evaluate(problem_src: str, candidate_src: str, config: EvaluatorConfig, *,
             device: str | None = None, use_cache: bool = True) -> Evaluation:
    """One-off synchronous evaluation (starts and stops its own worker); a bad problem is a `problem_error` result."""
    config = msgspec.structs.replace(config, workers_per_gpu=1)
    device = device or config.device
    if device in ("cuda", "auto"):
        import torch
        device = "cuda:0" if torch.cuda.is_available() else ("cpu" if device == "auto" else device)

    async def one() -> Evaluation:
        async with EvaluatorPool(config, device=device, use_cache=use_cache) as pool:
            return await pool.evaluate(problem_src, candidate_src)

    return asyncio.run(one())
