"""The module validator: runs a proposed KernelBench-format module in the sandbox and accepts or rejects it with a machine-readable reason; it bounds memory and time and contains the module as far as the sandbox does (kernelzero/sandbox/), no further.

Checks, in order: the source parses and defines Model, get_inputs and get_init_inputs (static);
it imports and runs; two runs with the same seed agree; outputs are finite and not constant
(a one-element output must change with the input seed); every requested API shows up in an op
trace of `forward` (TorchFunctionMode + TorchDispatchMode names, never text search); the run
fits `[validator]` time and memory bounds. Duplicates (same normalized AST, or same op trace with
the same argument ranks) are dropped by `Deduplicator`, which the service rebuilds from
modules.accepted when it starts.

The run-time checks run in consumers/validator_child.py: a fork server in bubblewrap, each module
in a fresh fork confined to its scratch folder (Landlock, seccomp, the candidate uid), contained
as `[evaluator]`'s containment settings say, the same way the evaluator's candidates are.

Library: `validate(source, apis, config, sandbox=validator_sandbox(...))` -> `ModuleVerdict`.
Service: `kernelzero serve validator`.
"""

from __future__ import annotations

import ast
import collections
import hashlib
import os
import sys
import uuid
from pathlib import Path
from typing import Any, Sequence

import msgspec

from kernelzero.config import EvaluatorConfig, ValidatorConfig
from kernelzero.sandbox.client import ForkServerClient
from kernelzero.sandbox.launcher import VALIDATOR_PACKAGES, Sandbox, SandboxUnavailable
from kernelzero.schemas.messages import ModuleVerdict, ValidationAnswer, ValidationRequest

REASONS = (
    "syntax_error", "import_error", "missing_model", "missing_get_inputs", "missing_get_init_inputs",
    "runtime_error", "timeout", "non_deterministic", "non_finite", "constant_output", "api_not_called",
    "too_slow", "too_much_memory", "duplicate",
)
REQUIRED = {"Model": "missing_model", "get_inputs": "missing_get_inputs", "get_init_inputs": "missing_get_init_inputs"}
_KEEP_NAMES = {"self", "Model", "forward", "get_inputs", "get_init_inputs", "torch", "nn", "F", "super"}


# ---- static checks (parent process) ----

def check_structure(source: str) -> ModuleVerdict | None:
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


def trace_names_for(api: str, catalog: dict) -> tuple[str, ...]:
    """Op-trace names that prove `api` ran: the catalog's, else the API name's last component."""
    spec = catalog.get(api)
    if spec is not None:
        return spec.trace_names()
    return (api.split("[")[0].rsplit(".", 1)[-1].lower(),)


def _refused(reason: str, detail: str) -> ModuleVerdict:
    return ModuleVerdict(ok=False, reason=reason, detail=detail)


def validator_sandbox(containment: EvaluatorConfig, device: str) -> ForkServerClient:
    """The validator's fork server (consumers/validator_child.py) for `device` ([validator] device), contained as
    [evaluator] (`containment`) contains candidates."""
    cache_dir = Path(os.path.expanduser(containment.cache_dir))
    (cache_dir / "scratch").mkdir(parents=True, exist_ok=True)
    sandbox = Sandbox(containment, cache_dir, packages=VALIDATOR_PACKAGES)
    return ForkServerClient(sandbox, "kernelzero.consumers.validator_child",
                            cache_dir / "scratch" / f"validator-{uuid.uuid4().hex}", gpu=device != "cpu",
                            env={"PYTORCH_NVML_BASED_CUDA_CHECK": "1"})  # device queries without cuInit: fork-safe


def validation_workers(config: ValidatorConfig) -> int:
    """`[validator] workers`, or where it is 0 a sandbox per core up to four: on an H100 a run of a tiny module is
    mostly its fork starting CUDA (5.3 modules a second with four sandboxes, docs/BENCHMARKS.md)."""
    return config.workers or max(1, min(4, os.cpu_count() or 1))


def _run(sandbox: ForkServerClient, request: ValidationRequest) -> ModuleVerdict:
    """The verdict of one request in the sandbox; SandboxUnavailable where its run found less containment than required."""

    def in_scratch(scratch: str, _extensions: str) -> bytes:
        return msgspec.msgpack.encode(msgspec.structs.replace(request, scratch_dir=scratch))

    reply = sandbox.request(in_scratch, request.timeout_s + 120)
    if reply is None:
        return _refused("runtime_error", "the validator sandbox died")
    answer = msgspec.msgpack.decode(reply, type=ValidationAnswer)
    if answer.refusal is not None:
        raise SandboxUnavailable(f"a Proposer module would run without {', '.join(answer.refusal.missing)} "
                                 f"(in force: {answer.refusal.in_force})")
    return answer.verdict


def validate(
    source: str, apis: Sequence[str], config: ValidatorConfig, seed: int = 0, *, sandbox: ForkServerClient,
) -> ModuleVerdict:
    """Judge one module in `sandbox` (validator_sandbox); no duplicate check: see Deduplicator."""
    rejected = check_structure(source)
    if rejected is not None:
        return rejected
    ast_hash = normalized_ast_hash(source)
    request = ValidationRequest(source=source, apis=list(apis), seed=seed, device=config.device,
                                max_runtime_ms=config.max_runtime_ms, max_memory_gb=config.max_memory_gb,
                                cpu_threads=config.cpu_threads, timeout_s=config.timeout_s)
    verdict = _run(sandbox, request)
    return msgspec.structs.replace(verdict, ast_hash=ast_hash)


def fingerprint(verdict: ModuleVerdict) -> str:
    """What an accepted module is known by (ModuleAccepted.fingerprint): its AST hash and op-trace hash, as Deduplicator.add reads them."""
    return f"{verdict.ast_hash}:{verdict.trace_hash}"


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
    """modules.proposed -> modules.accepted | modules.rejected; a poll's modules run at once, one per sandbox, and are
    deduplicated in the order the poll returned them, so the verdicts do not depend on which run ends first."""

    name = "validator"
    topics = ("modules.proposed",)

    def __init__(self, config: ValidatorConfig, sandboxes: Sequence[ForkServerClient],
                 dedup: Deduplicator | None = None):
        self.config = config
        self.dedup = dedup or Deduplicator()
        self.sandboxes = list(sandboxes)
        self.outcomes: collections.Counter[str] = collections.Counter()  # "accepted" or a rejection's kind

    async def handle(self, event):
        return (await self.handle_many([event]))[0]

    async def handle_many(self, events) -> list[list]:
        import queue

        import anyio

        proposed = [event.payload for event in events]
        verdicts: list[ModuleVerdict | None] = [None] * len(proposed)
        waiting: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(proposed)):
            waiting.put(index)

        def drain(sandbox: ForkServerClient) -> None:
            while True:
                try:
                    index = waiting.get_nowait()
                except queue.Empty:
                    return
                verdicts[index] = validate(proposed[index].source, proposed[index].apis, self.config, sandbox=sandbox)

        async with anyio.create_task_group() as runs:
            for sandbox in self.sandboxes[:len(proposed)]:
                runs.start_soon(anyio.to_thread.run_sync, drain, sandbox)
        return [self._answer(event, verdict) for event, verdict in zip(events, verdicts)]

    def _answer(self, event, verdict: ModuleVerdict) -> list:
        from kernelzero.schemas import ModuleAccepted, ModuleRejected, make_event

        proposed = event.payload
        if verdict.ok:
            original = self.dedup.duplicate_of(proposed.module_id, verdict)
            if original is not None:
                verdict = msgspec.structs.replace(verdict, ok=False, reason="duplicate", detail=f"same as {original}")
        if verdict.ok:
            self.dedup.add(proposed.module_id, fingerprint(verdict))
            payload: Any = ModuleAccepted(
                module_id=proposed.module_id, source=proposed.source, apis=proposed.apis,
                fingerprint=fingerprint(verdict), op_trace=verdict.op_trace, ref_runtime_ms=verdict.runtime_ms,
                level=proposed.level,
            )
        else:
            payload = ModuleRejected(module_id=proposed.module_id, reason=verdict.reason, detail=verdict.detail,
                                     apis=proposed.apis)
        self.outcomes["accepted" if verdict.ok else verdict.reason.partition(":")[0]] += 1  # not per API named
        return [make_event(payload, correlation_id=proposed.module_id, producer=self.name,
                           causation_id=event.event_id)]


async def rebuild_dedup(log) -> Deduplicator:
    """The seen fingerprints, read from modules.accepted from its beginning (nothing is committed)."""
    from kernelzero.schemas import ModuleAccepted
    from kernelzero.stage import read_payloads

    dedup = Deduplicator()
    for accepted in await read_payloads(log, "modules.accepted", ModuleAccepted, reader="validator-seen"):
        dedup.add(accepted.module_id, accepted.fingerprint)
    return dedup


def validator_stage(config, outcomes: collections.Counter[str] | None = None):
    """The stage's opener for kernelzero/stage.py `host_stage`: a ValidatorStage over `[validator] workers` sandboxes
    started for it, its duplicates known from the log; its outcomes are added to `outcomes` when it closes."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def stage(log):
        sandboxes = [validator_sandbox(config.evaluator, config.validator.device)
                     for _ in range(validation_workers(config.validator))]
        try:
            validator = ValidatorStage(config.validator, sandboxes, await rebuild_dedup(log))
            try:
                yield validator
            finally:
                if outcomes is not None:
                    outcomes.update(validator.outcomes)
        finally:
            for sandbox in sandboxes:
                sandbox.close()

    return stage


def serve(args, config) -> int:
    """`kernelzero serve validator`: run until interrupted (or --idle-exit seconds with nothing to do)."""
    import anyio

    from kernelzero.stage import host_stage

    outcomes: collections.Counter[str] = collections.Counter()
    stats = anyio.run(lambda: host_stage(config.log, validator_stage(config, outcomes),
                                         idle_exit_s=getattr(args, "idle_exit", None)))
    print(f"validator: {outcome_line(stats.consumed, outcomes)}, dead-lettered {stats.dead_lettered}", file=sys.stderr)
    return 0


def outcome_line(consumed: int, outcomes: collections.Counter[str]) -> str:
    """'consumed N, accepted A, rejected R (reason n, ...)': what a user reads to see whether the loop starves."""
    accepted = outcomes.get("accepted", 0)
    reasons = ", ".join(f"{reason} {n}" for reason, n in sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0]))
                        if reason != "accepted")
    rejected = sum(outcomes.values()) - accepted
    return f"consumed {consumed}, accepted {accepted}, rejected {rejected}" + (f" ({reasons})" if reasons else "")
