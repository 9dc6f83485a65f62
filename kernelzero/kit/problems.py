"""Load a KernelBench-format problem (Model, get_inputs, get_init_inputs) from source text; does NOT sandbox it.

The module is executed in a fresh namespace (never inserted into sys.modules), so two problems
never share state. The source is registered with linecache under a synthetic file name so that
tracebacks and `inspect.getsource` work. Loading runs the module's top-level code: call this only
in a process you are prepared to lose (the evaluator's worker, the validator's sandbox).
"""

from __future__ import annotations

import hashlib
import linecache
import types
from dataclasses import dataclass
from typing import Any, Callable

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
# Inputs every judge of a problem tries besides its own draws, each a factor on every floating-point
# input: fp16 overflows and underflows, and the sign flipped (a problem drawing with torch.rand never
# shows a kernel negative inputs: ReLU would pass as the identity).
INPUT_SCALES = {"scaled_up": 1e5, "scaled_down": 1e-5, "negated": -1.0}


class ProblemError(ValueError):
    """The problem module is unusable; `reason` is machine-readable (syntax_error, missing_Model, ...)."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class Problem:
    module: types.ModuleType
    Model: type
    get_inputs: Callable[[], list[Any]]
    get_init_inputs: Callable[[], list[Any]]
    source_hash: str


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def load_module(source: str, name: str, filename: str | None = None) -> types.ModuleType:
    """Execute `source` as a new module called `name`; SyntaxError and import-time errors propagate."""
    filename = filename or f"<kernelzero:{name}:{source_hash(source)[:12]}>"
    code = compile(source, filename, "exec")
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    module = types.ModuleType(name)
    module.__file__ = filename
    exec(code, module.__dict__)
    return module


def load_problem(source: str, name: str = "kernelzero_problem") -> Problem:
    """Load and check the three required names; raises ProblemError naming what is wrong."""
    try:
        module = load_module(source, name)
    except SyntaxError as exc:
        raise ProblemError("syntax_error", f"line {exc.lineno}: {exc.msg}") from None
    except Exception as exc:  # the problem's own top-level code failed
        raise ProblemError("import_error", f"{type(exc).__name__}: {exc}") from None
    missing = [n for n in REQUIRED if not hasattr(module, n)]
    if missing:
        raise ProblemError(f"missing_{missing[0]}", f"the problem module defines no {', '.join(missing)}")
    if not isinstance(module.Model, type):
        raise ProblemError("bad_Model", "Model must be a class (an nn.Module subclass)")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn)):
            raise ProblemError(f"bad_{fn}", f"{fn} must be a function")
    return Problem(module, module.Model, module.get_inputs, module.get_init_inputs, source_hash(source))
