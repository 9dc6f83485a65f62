"""Run-time instruments installed before candidate code loads: Triton launch log + ablation, aten op recorder, integrity snapshot.

They observe; they do not sandbox. A candidate that bypasses the Triton launch path simply
earns no evidence of a custom kernel (and is rejected), so bypassing never helps it.
"""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# aten ops that move, view, create or fill data: never "the work" of a problem
GLUE_PREFIXES = ("empty", "zeros", "ones", "full", "new_", "arange", "scalar_tensor", "rand", "linspace")
GLUE_OPS = {
    "copy_", "clone", "contiguous", "_to_copy", "to", "_copy_from", "_copy_from_and_resize", "detach", "detach_",
    "lift_fresh", "lift_fresh_copy", "fill_", "zero_", "resize_", "set_", "_local_scalar_dense", "cat", "stack",
    "constant_pad_nd", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_same_size", "item",
    "is_nonzero", "record_stream", "_has_compatible_shallow_copy_type", "equal", "_unsafe_view", "alias", "t",
    "unbind", "split", "split_with_sizes", "chunk", "narrow", "flatten", "reshape", "view", "permute", "expand",
    "transpose", "unsqueeze", "squeeze", "slice", "select", "as_strided", "as_strided_", "diagonal", "unfold",
    "_reshape_alias", "view_as", "expand_as", "dim", "size", "stride", "numel", "masked_fill_",
}


def is_glue(op: Any) -> bool:
    name = op.overloadpacket.__name__
    return getattr(op, "is_view", False) or name in GLUE_OPS or name.startswith(GLUE_PREFIXES)


def op_tokens(name: str) -> set[str]:
    return {name, *name.strip("_").split("_")}


class OpRecorder(TorchDispatchMode):
    """Names of non-glue aten ops run outside custom kernel launches while active."""

    def __init__(self, launches: "LaunchLog") -> None:
        super().__init__()
        self.launches = launches
        self.compute_ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not self.launches.inside and not is_glue(func):
            self.compute_ops.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


@dataclass
class Launch:
    name: str
    module: str


@dataclass
class LaunchLog:
    """Every Triton launch (compiled or interpreted) seen since the last reset."""

    launches: list[Launch] = field(default_factory=list)
    inside: bool = False
    ablate: bool = False
    protected: list[tuple[int, int]] = field(default_factory=list)  # (start, end) byte ranges never poisoned

    def reset(self) -> None:
        self.launches = []

    def own(self, module: str) -> list[Launch]:
        return [launch for launch in self.launches if launch.module == module]

    def wrap(self, original: Callable) -> Callable:
        log = self

        def run(kernel, *args, grid, warmup, **kwargs):
            if warmup:
                return original(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            fn = getattr(kernel, "fn", None)
            log.launches.append(Launch(getattr(fn, "__name__", "?"), getattr(fn, "__module__", "") or ""))
            log.inside = True
            try:
                result = original(kernel, *args, grid=grid, warmup=warmup, **kwargs)
            finally:
                log.inside = False
            if log.ablate:
                log.poison_outputs([*args, *kwargs.values()])
            return result

        return run

    def poison_outputs(self, args: list[Any]) -> None:
        """Ablation: overwrite every tensor the kernel may have written (not inputs or weights) with NaN/-1."""
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()  # the kernel may run on a side stream: let it finish before overwriting
        for arg in args:
            if not isinstance(arg, torch.Tensor) or overlaps(arg, self.protected):
                continue
            if arg.dtype == torch.bool:
                arg.logical_not_()
            elif arg.is_floating_point():
                arg.fill_(float("nan"))
            else:
                arg.fill_(-1)


def storage_range(t: torch.Tensor) -> tuple[int, int]:
    storage = t.untyped_storage()
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def overlaps(t: torch.Tensor, ranges: list[tuple[int, int]]) -> bool:
    start, end = storage_range(t)
    return any(start < b and a < end for a, b in ranges)


def install_triton_hooks(log: LaunchLog) -> None:
    """Wrap the class-level launch path of compiled (JITFunction) and interpreted Triton kernels."""
    from triton.runtime.jit import JITFunction
    JITFunction.run = log.wrap(JITFunction.run)
    try:
        from triton.runtime.interpreter import InterpretedFunction
    except ImportError:
        return
    InterpretedFunction.run = log.wrap(InterpretedFunction.run)


def _watched() -> list[tuple[str, Any]]:
    import builtins
    import time
    import torch.nn.functional as F
    return [("torch", torch), ("torch.Tensor", torch.Tensor), ("torch.nn.functional", F), ("torch.cuda", torch.cuda),
            ("torch.cuda.Event", torch.cuda.Event), ("torch.testing", torch.testing), ("time", time),
            ("builtins", builtins), ("torch.nn.Module", torch.nn.Module)]


def integrity_snapshot() -> dict[str, int]:
    """id() of every public callable (and Tensor dunder) of the namespaces a hack would patch."""
    snap: dict[str, int] = {}
    for label, ns in _watched():
        for name in dir(ns):
            dunder = name.startswith("__") and ns in (torch.Tensor, torch.nn.Module)
            if name.startswith("_") and not dunder and name != "_call_impl":
                continue
            try:
                value = inspect.getattr_static(ns, name)  # unbound: the same object on every lookup
            except AttributeError:
                continue
            if not isinstance(value, type(torch)) and (callable(value) or hasattr(value, "__get__")):
                snap[f"{label}.{name}"] = id(value)
    return snap


def integrity_violations(before: dict[str, int]) -> list[str]:
    """What changed since `before`: patched functions, global hooks, dispatch or function modes left on."""
    after = integrity_snapshot()
    changed = [k for k, v in before.items() if after.get(k) != v]
    changed += [f"{k} (added)" for k in after if k not in before and not k.startswith("builtins.")]
    if torch._C._len_torch_function_stack() > 0:
        changed.append("torch function mode active")
    if torch._C._len_torch_dispatch_stack() > 0:
        changed.append("torch dispatch mode active")
    hooks = torch.nn.modules.module
    for attr in ("_global_forward_hooks", "_global_forward_pre_hooks", "_global_module_registration_hooks"):
        if getattr(hooks, attr, None):
            changed.append(f"global module hook {attr}")
    return changed


def thread_count() -> int:
    return threading.active_count()
