"""The module validator: runs a proposed KernelBench-format module in a sandboxed subprocess and accepts or rejects it with a machine-readable reason; it bounds memory and time but is not a security boundary against hostile code.

Checks, in order: the source parses and defines Model, get_inputs and get_init_inputs (static);
it imports and runs; two runs with the same seed agree; outputs are finite and not constant
(a one-element output must change with the input seed); every requested API shows up in an op
trace of `forward` (TorchFunctionMode + TorchDispatchMode names, never text search); the run
fits `[validator]` time and memory bounds. Duplicates (same normalized AST, or same op trace with
the same argument ranks) are dropped by `Deduplicator`, which the service rebuilds from
modules.accepted when it starts.

Library: `validate(source, apis, config)` -> `ModuleVerdict`. Service: `kernelzero serve validator`.
"""

from __future__ import annotations

import ast
import hashlib
import os
import resource
import select
import signal
import subprocess
import sys
import time
from typing import Any, Sequence

import msgspec

from kernelzero.config import ValidatorConfig

REASONS = (
    "syntax_error", "import_error", "missing_model", "missing_get_inputs", "missing_get_init_inputs",
    "runtime_error", "timeout", "non_deterministic", "non_finite", "constant_output", "api_not_called",
    "too_slow", "too_much_memory", "duplicate",
)
REQUIRED = {"Model": "missing_model", "get_inputs": "missing_get_inputs", "get_init_inputs": "missing_get_init_inputs"}
_KEEP_NAMES = {"self", "Model", "forward", "get_inputs", "get_init_inputs", "torch", "nn", "F", "super"}


class ModuleVerdict(msgspec.Struct, kw_only=True):
    ok: bool
    reason: str = ""  # one of REASONS, "api_not_called:<api>" for an API never traced
    detail: str = ""
    op_trace: list[str] = []  # function-level torch calls seen in forward, first appearance order
    ast_hash: str = ""
    trace_hash: str = ""
    runtime_ms: float = 0.0
    peak_memory_mb: float = 0.0
    device: str = ""

    @property
    def fingerprint(self) -> str:
        return f"{self.ast_hash}:{self.trace_hash}"


class ValidationRequest(msgspec.Struct, kw_only=True):
    """The validator to its sandbox's zygote (msgpack on a pipe); the answer is a ModuleVerdict without its ast_hash."""

    source: str
    apis: list[str]
    seed: int
    device: str
    max_runtime_ms: float
    max_memory_gb: float
    cpu_threads: int
    timeout_s: float


# ---- static checks (parent process) ----

def static_check(source: str) -> ModuleVerdict | None:
    """A rejection for source that does not parse or lacks a required name; None when it may run."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as exc:
        return ModuleVerdict(ok=False, reason="syntax_error", detail=f"line {getattr(exc, 'lineno', '?')}: {exc}")
    defined = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))}
    defined |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    for name, reason in REQUIRED.items():
        if name not in defined:
            return ModuleVerdict(ok=False, reason=reason, detail=f"the module defines no top-level {name}")
    return None


class _Canonical(ast.NodeTransformer):
    """Renames the module's own variables, arguments and self attributes to v0, v1, ... in order of appearance."""

    def __init__(self, tree: ast.AST):
        self.names: dict[str, str] = {}
        self.attrs: dict[str, str] = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.arg) and node.arg not in _KEEP_NAMES:
                self.names.setdefault(node.arg, f"v{len(self.names)}")
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id not in _KEEP_NAMES:
                self.names.setdefault(node.id, f"v{len(self.names)}")
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store) \
                    and isinstance(node.value, ast.Name) and node.value.id == "self":
                self.attrs.setdefault(node.attr, f"a{len(self.attrs)}")

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self.names.get(node.arg, node.arg)
        node.annotation = None
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.Attribute:
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "self":
            node.attr = self.attrs.get(node.attr, node.attr)
        return node


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            node.body = body[1:] or [ast.Pass()]


def normalized_ast_hash(source: str) -> str:
    """Hash of the module's AST without docstrings, comments, formatting or the names of its own variables."""
    tree = ast.parse(source)
    _strip_docstrings(tree)
    tree = _Canonical(tree).visit(tree)
    dump = ast.dump(tree, annotate_fields=False, include_attributes=False)
    return hashlib.sha256(dump.encode()).hexdigest()[:16]


# ---- the sandboxed run (child process) ----

def _func_name(func: Any) -> str:
    name = getattr(func, "__name__", None) or str(func)
    return name if name.startswith("__") else name.rstrip("_")


def _aten_name(op: Any) -> str:
    parts = str(op).split(".")
    return (parts[1] if len(parts) > 1 else parts[0]).rstrip("_")


def _make_tracer():
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    import torch

    calls: list[tuple[str, tuple[int, ...]]] = []
    aten: set[str] = set()

    class FunctionTrace(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            name = _func_name(func)
            if not name.startswith("__"):
                calls.append((name, tuple(a.dim() for a in args if isinstance(a, torch.Tensor))))
            return func(*args, **(kwargs or {}))

    class DispatchTrace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            aten.add(_aten_name(func))
            return func(*args, **(kwargs or {}))

    return FunctionTrace(), DispatchTrace(), calls, aten


def _tensors(value: Any, torch) -> list:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return list(value)
    raise TypeError(f"forward returned {type(value).__name__}, not a tensor or a tuple of tensors")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _vm_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


def _run_checks(request: ValidationRequest) -> dict:
    import torch

    from kernelzero.problems import ProblemError, load_problem
    from kernelzero.producers.api_catalog import BY_NAME

    torch.set_num_threads(max(1, request.cpu_threads))
    device = request.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    limit = int(request.max_memory_gb * 2**30)
    if device == "cpu":
        resource.setrlimit(resource.RLIMIT_AS, (_vm_bytes() + limit + 2**30, resource.RLIM_INFINITY))
    rss_before = _rss_bytes()
    result: dict = {"device": device}
    try:
        problem = load_problem(request.source)
    except ProblemError as exc:
        reason = exc.reason if exc.reason in REASONS else REQUIRED.get(exc.reason.split("_", 1)[-1], "import_error")
        return {**result, "reason": reason, "detail": exc.detail}

    def run(seed: int, trace: bool):
        torch.manual_seed(seed)
        model = problem.Model(*problem.get_init_inputs()).to(device)
        torch.manual_seed(seed)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
        modes = _make_tracer() if trace else None
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.no_grad():
            if modes:
                with modes[0], modes[1]:
                    out = model(*inputs)
            else:
                out = model(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed_ms = (time.perf_counter() - start) * 1000
        return [t.detach().to("cpu", copy=True) for t in _tensors(out, torch)], elapsed_ms, modes

    try:
        first, _, (_, _, calls, aten) = run(request.seed, trace=True)
        second, runtime_ms, _ = run(request.seed, trace=False)
    except MemoryError as exc:
        return {**result, "reason": "too_much_memory", "detail": f"MemoryError: {exc}"}
    except Exception as exc:  # the module's own code failed: that is the verdict
        text = f"{type(exc).__name__}: {exc}"[:2000]
        if "out of memory" in text.lower() or "can't allocate" in text.lower():
            return {**result, "reason": "too_much_memory", "detail": text}
        return {**result, "reason": "runtime_error", "detail": text}
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated()
    else:
        peak = max(0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss_before)
    op_trace = list(dict.fromkeys(name for name, _ in calls))
    result.update(
        op_trace=op_trace, runtime_ms=runtime_ms, peak_memory_mb=peak / 2**20,
        trace_hash=hashlib.sha256(repr(calls).encode()).hexdigest()[:16],
    )
    result.update(_judge(request, first, second, runtime_ms, peak, set(op_trace) | aten, BY_NAME, run, torch))
    return result


def _judge(request, first, second, runtime_ms, peak, traced, catalog, run, torch) -> dict:
    if len(first) != len(second) or any(
        a.shape != b.shape or not torch.allclose(a, b, rtol=1e-4, atol=1e-5, equal_nan=True)
        for a, b in zip(first, second)
    ):
        return {"reason": "non_deterministic", "detail": "two runs with the same seed gave different outputs"}
    if any(not bool(torch.isfinite(t).all()) for t in first if t.is_floating_point() or t.is_complex()):
        return {"reason": "non_finite", "detail": "an output holds NaN or Inf"}
    if all(t.numel() > 1 and bool((t == t.reshape(-1)[0]).all()) or t.numel() == 0 for t in first):
        return {"reason": "constant_output", "detail": "every output element is the same value"}
    if all(t.numel() <= 1 for t in first):
        other, _, _ = run(request.seed + 1, trace=False)
        if all(torch.equal(a, b) for a, b in zip(first, other)):
            return {"reason": "constant_output", "detail": "the output does not change with the input seed"}
    missing = [api for api in request.apis if not _traced(api, traced, catalog)]
    if missing:
        return {"reason": f"api_not_called:{missing[0]}", "detail": f"never called: {', '.join(missing)}"}
    if runtime_ms > request.max_runtime_ms:
        return {"reason": "too_slow", "detail": f"forward took {runtime_ms:.1f} ms > {request.max_runtime_ms:g} ms"}
    if peak > request.max_memory_gb * 2**30:
        return {"reason": "too_much_memory", "detail": f"peak {peak / 2**30:.2f} GiB > {request.max_memory_gb:g} GiB"}
    return {"reason": ""}


def trace_names_for(api: str, catalog: dict) -> tuple[str, ...]:
    """Op-trace names that prove `api` ran: the catalog's, else the API name's last component."""
    spec = catalog.get(api)
    if spec is not None:
        return spec.trace_names()
    return (api.split("[")[0].rsplit(".", 1)[-1].lower(),)


def _traced(api: str, traced: set[str], catalog: dict) -> bool:
    return any(name in traced for name in trace_names_for(api, catalog))


def _checks_or_verdict(request: ValidationRequest) -> ModuleVerdict:
    try:
        found = _run_checks(request)
    except MemoryError:
        found = {"reason": "too_much_memory", "detail": "MemoryError outside the module's run"}
    except BaseException as exc:  # report anything rather than die silently
        found = {"reason": "runtime_error", "detail": f"validator child: {type(exc).__name__}: {exc}"[:2000]}
    return ModuleVerdict(ok=not found["reason"], **found)


def _refused(reason: str, detail: str) -> ModuleVerdict:
    return ModuleVerdict(ok=False, reason=reason, detail=detail)


def _write_message(fd: int, obj: Any) -> None:
    data = msgspec.msgpack.encode(obj)
    view = memoryview(len(data).to_bytes(8, "little") + data)
    while view:
        view = view[os.write(fd, view):]


def _read_exactly(fd: int, n: int, deadline: float | None) -> bytes | None:
    """n bytes from fd, or None at end of file or past the deadline."""
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                return None
        chunk = os.read(fd, n - got)
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _read_message(fd: int, kind: type, deadline: float | None = None) -> Any:
    header = _read_exactly(fd, 8, deadline)
    if header is None:
        return None
    body = _read_exactly(fd, int.from_bytes(header, "little"), deadline)
    return None if body is None else msgspec.msgpack.decode(body, type=kind)


def _run_forked(request: ValidationRequest) -> ModuleVerdict:
    """In the zygote: fork a child that runs the checks; kill it at the timeout."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read_end)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        _write_message(write_end, _checks_or_verdict(request))
        os._exit(0)
    os.close(write_end)
    try:
        result = _read_message(read_end, ModuleVerdict, time.monotonic() + request.timeout_s)
    finally:
        os.close(read_end)
    if result is None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    _, status = os.waitpid(pid, 0)
    if result is not None:
        return result
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
        return _refused("timeout", f"no result within {request.timeout_s:g} s")
    return _refused("runtime_error", f"the run died (wait status {status})")


def zygote_main() -> None:
    """The sandbox's long-lived process: imports torch once, then forks one child per request."""
    import torch

    import kernelzero.problems  # noqa: F401
    import kernelzero.producers.api_catalog  # noqa: F401

    # One traced op here imports the tracing machinery once, not in every fork; one thread, so
    # that no OpenMP worker threads exist when the zygote forks.
    torch.set_num_threads(1)
    function_mode, dispatch_mode, _, _ = _make_tracer()
    with torch.no_grad(), function_mode, dispatch_mode:
        torch.nn.functional.layer_norm(torch.randn(4, 8), (8,)).sum()
    requests, replies = 0, int(sys.argv[1])
    while (request := _read_message(requests, ValidationRequest)) is not None:
        _write_message(replies, _run_forked(request))


class Sandbox:
    """A zygote process that has imported torch; each validation runs in a fresh fork of it, so that
    a module that crashes, hangs, leaks or patches torch affects only its own run."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | None = None
        self._replies = -1

    def _start(self) -> subprocess.Popen:
        read_end, write_end = os.pipe()
        code = "from kernelzero.consumers.validator import zygote_main; zygote_main()"
        process = subprocess.Popen(
            [sys.executable, "-c", code, str(write_end)], stdin=subprocess.PIPE, pass_fds=(write_end,),
            stdout=subprocess.DEVNULL,
        )
        os.close(write_end)
        self._process, self._replies = process, read_end
        return process

    def run(self, request: ValidationRequest) -> ModuleVerdict:
        process = self._process if self._process and self._process.poll() is None else self._start()
        _write_message(process.stdin.fileno(), request)
        reply = _read_message(self._replies, ModuleVerdict, time.monotonic() + request.timeout_s + 120)
        if reply is None:  # the zygote itself died or hung: start afresh next time
            self.close()
            return _refused("runtime_error", "the validator sandbox died")
        return reply

    def close(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            os.close(self._replies)
            self._process = None


_DEFAULT_SANDBOX: Sandbox | None = None


def _default_sandbox() -> Sandbox:
    global _DEFAULT_SANDBOX
    if _DEFAULT_SANDBOX is None:
        _DEFAULT_SANDBOX = Sandbox()
    return _DEFAULT_SANDBOX


def validate(
    source: str, apis: Sequence[str], config: ValidatorConfig | None = None, seed: int = 0,
    sandbox: Sandbox | None = None,
) -> ModuleVerdict:
    """Judge one module (no duplicate check: see Deduplicator); not thread-safe per sandbox."""
    config = config or ValidatorConfig()
    rejected = static_check(source)
    if rejected is not None:
        return rejected
    ast_hash = normalized_ast_hash(source)
    request = ValidationRequest(source=source, apis=list(apis), seed=seed, device=config.device,
                                max_runtime_ms=config.max_runtime_ms, max_memory_gb=config.max_memory_gb,
                                cpu_threads=config.cpu_threads, timeout_s=config.timeout_s)
    verdict = (sandbox or _default_sandbox()).run(request)
    return msgspec.structs.replace(verdict, ast_hash=ast_hash)


class Deduplicator:
    """Remembers accepted modules by normalized AST hash and by op-trace hash; a match on either is a duplicate."""

    def __init__(self) -> None:
        self._ast: dict[str, str] = {}
        self._trace: dict[str, str] = {}

    def __len__(self) -> int:
        return len(self._ast)

    def duplicate_of(self, module_id: str, verdict: ModuleVerdict) -> str | None:
        """The module id this one duplicates; None when it is new (or is that same module seen again)."""
        for seen, key in ((self._ast, verdict.ast_hash), (self._trace, verdict.trace_hash)):
            other = seen.get(key) if key else None
            if other is not None and other != module_id:
                return other
        return None

    def add(self, module_id: str, fingerprint: str) -> None:
        ast_hash, _, trace_hash = fingerprint.partition(":")
        if ast_hash:
            self._ast.setdefault(ast_hash, module_id)
        if trace_hash:
            self._trace.setdefault(trace_hash, module_id)


# ---- the service ----

class ValidatorStage:
    """modules.proposed -> modules.accepted | modules.rejected."""

    name = "validator"
    topics = ("modules.proposed",)

    def __init__(self, config: ValidatorConfig, dedup: Deduplicator | None = None):
        self.config = config
        self.dedup = dedup or Deduplicator()

    async def handle(self, event):
        import anyio

        from kernelzero.schemas import ModuleAccepted, ModuleRejected, make_event

        proposed = event.payload
        verdict = await anyio.to_thread.run_sync(validate, proposed.source, proposed.apis, self.config)
        if verdict.ok:
            original = self.dedup.duplicate_of(proposed.module_id, verdict)
            if original is not None:
                verdict = msgspec.structs.replace(verdict, ok=False, reason="duplicate", detail=f"same as {original}")
        if verdict.ok:
            self.dedup.add(proposed.module_id, verdict.fingerprint)
            payload: Any = ModuleAccepted(
                module_id=proposed.module_id, source=proposed.source, apis=proposed.apis,
                fingerprint=verdict.fingerprint, op_trace=verdict.op_trace, ref_runtime_ms=verdict.runtime_ms,
                level=proposed.level,
            )
        else:
            payload = ModuleRejected(module_id=proposed.module_id, reason=verdict.reason, detail=verdict.detail,
                                     apis=proposed.apis)
        return [make_event(payload, correlation_id=proposed.module_id, producer=self.name,
                           causation_id=event.event_id)]


async def rebuild_dedup(log) -> Deduplicator:
    """The seen fingerprints, read from modules.accepted from its beginning (nothing is committed)."""
    from kernelzero.log import read_to_end
    from kernelzero.schemas import decode

    dedup = Deduplicator()
    async for record in read_to_end(log, "modules.accepted", reader="validator-seen"):
        try:
            accepted = decode(record.value).payload
        except Exception:  # undecodable history is the stage runner's business, not ours
            continue
        dedup.add(accepted.module_id, accepted.fingerprint)
    return dedup


def serve(args, config) -> int:
    """`kernelzero serve validator`: run until interrupted (or --idle-exit seconds with nothing to do)."""
    from contextlib import asynccontextmanager

    import anyio

    from kernelzero.stage import host_stage

    @asynccontextmanager
    async def stage(log):
        yield ValidatorStage(config.validator, await rebuild_dedup(log))

    anyio.run(lambda: host_stage(config.log.url, stage, idle_exit_s=getattr(args, "idle_exit", None),
                                 session_timeout_s=config.log.session_timeout_s))
    return 0
