"""The op tracer and tensor walker the validator and the evaluator share: which torch calls and aten ops a forward runs, and the tensors in a value; it observes, it neither contains nor judges.

`OpTrace` (a TorchDispatchMode) records, while active, each aten op torch dispatches by its
overload packet's name (`relu_` for `aten.relu_.default`), only those `counts(op)` accepts, and
what `also(name, args, kwargs)` says a fused op also did. `CallTrace` (a TorchFunctionMode)
records the torch functions called from Python, each with its tensor arguments' ranks. The
validator uses both to prove that an API ran (consumers/validator_child.py); the evaluator's
trial counts the compute a forward did outside its custom kernels with an OpTrace that skips
glue and launches (gpu_workers/instruments.py, OpRecorder). Code that calls kernels without
torch's dispatcher leaves no trace here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode


class OpTrace(TorchDispatchMode):
    """The aten ops dispatched while active (`ops`, in order, repeated) and what fused ones also did (`implied`)."""

    def __init__(self, counts: Callable[[Any], bool] | None = None,
                 also: Callable[[str, tuple, dict], list[str]] | None = None) -> None:
        super().__init__()
        self.counts = counts
        self.also = also
        self.ops: list[str] = []
        self.implied: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.counts is None or self.counts(func):
            name = func.overloadpacket.__name__
            self.ops.append(name)
            if self.also is not None:
                self.implied += self.also(name, args, kwargs)
        return func(*args, **kwargs)


class CallTrace(TorchFunctionMode):
    """The torch functions called while active, each as (name, ranks of its tensor arguments), dunder methods left out."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = call_name(func)
        if not name.startswith("__"):
            self.calls.append((name, tuple(a.dim() for a in args if isinstance(a, torch.Tensor))))
        return func(*args, **(kwargs or {}))


def call_name(func: Any) -> str:
    """`relu` for torch.relu and Tensor.relu_ alike; dunder names kept whole."""
    name = getattr(func, "__name__", None) or str(func)
    return name if name.startswith("__") else name.rstrip("_")


def tensors(value: Any, strict: bool = False) -> list[torch.Tensor]:
    """The tensors of a tensor or a list or tuple; `strict`: anything else there (or an empty list) is a TypeError."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        found = [v for v in value if isinstance(v, torch.Tensor)]
        if not strict or (value and len(found) == len(value)):
            return found
    elif not strict:
        return []
    raise TypeError(f"forward returned {type(value).__name__}, not a tensor or a tuple of tensors")
