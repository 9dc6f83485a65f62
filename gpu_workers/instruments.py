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

from kernelzero.kit.tracing import OpTrace

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


# Library compute a candidate may call beside its own kernels (`allowed_torch_ops`) is named by its base
# op: backend prefixes and suffixes off, so `cudnn_convolution` is `convolution` but `cudnn_convolution_relu`
# (a fused activation) is not. Every matrix product is one family, so a `bmm` can do an `mm`'s work.
BACKEND_PREFIXES = ("cudnn_", "miopen_", "mkldnn_", "thnn_")
BACKEND_SUFFIXES = ("_overrideable", "_transpose")
MATMUL_OPS = {"mm", "bmm", "mv", "dot", "vdot", "matmul", "linear", "addmm", "addmv", "addbmm", "baddbmm", "addr",
              "outer", "ger", "inner", "einsum", "tensordot", "chain_matmul", "multi_dot", "scaled_mm"}
ADD_FUSED_OPS = {"addmm", "addmv", "addbmm", "baddbmm", "addr"}  # beta * input + alpha * product


def base_op(name: str) -> str:
    """`_convolution`, `cudnn_convolution`, `convolution_overrideable` -> `convolution`; other names unchanged."""
    base = name.lstrip("_")
    for prefix in BACKEND_PREFIXES:
        base = base.removeprefix(prefix)
    for suffix in BACKEND_SUFFIXES:
        base = base.removesuffix(suffix)
    return base


def op_family(name: str) -> str:
    """The work an op does, for telling whether torch did the reference's work: `matmul` for every product."""
    base = base_op(name)
    return "matmul" if base in MATMUL_OPS else base


def implied_ops(name: str, args: tuple, kwargs: dict) -> list[str]:
    """The separate ops a fused library call also does: the bias add of `addmm` or a biased convolution, alpha/beta scaling."""
    base = base_op(name)
    if base in ADD_FUSED_OPS:
        beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
        implied = ["add"] if beta != 0 else []
        if alpha != 1 or beta not in (0, 1):
            implied.append("mul")
        return implied + (["sum"] if base == "addbmm" else [])
    if base == "convolution" and len(args) > 2 and args[2] is not None:
        return ["add"]
    return []


class OpRecorder(OpTrace):
    """Names of non-glue aten ops run outside custom kernel launches while active (`compute_ops`), and what fused ones also did."""

    def __init__(self, launches: "LaunchLog") -> None:
        super().__init__(counts=lambda func: not launches.inside and not is_glue(func), also=implied_ops)
        self.launches = launches

    @property
    def compute_ops(self) -> list[str]:
        return self.ops


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
            if isinstance(arg, torch.Tensor) and not overlaps(arg, self.protected):
                _poison(arg)


def _poison(t: torch.Tensor) -> None:
    """NaN, -1 or flipped bools over `t`; over its whole storage's bytes where `t` cannot be written (overlapping views)."""
    try:
        if t.dtype == torch.bool:
            t.logical_not_()
        elif t.is_floating_point():
            t.fill_(float("nan"))
        else:
            t.fill_(-1)
    except RuntimeError:  # e.g. an inference tensor: a candidate must not escape ablation by passing one
        torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).fill_(0xFF)


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


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def new_threads(baseline: set[threading.Thread]) -> list[str]:
    """Names of the Python threads alive now that were not in `baseline` (the objects, not idents: those are reused)."""
    return sorted(t.name for t in threading.enumerate() if t not in baseline)


def kernel_times(prof) -> dict[str, float]:
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
