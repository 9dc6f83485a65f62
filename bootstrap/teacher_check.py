"""The cheap trusted check of the Coder's teacher: its answer run in torch with every row program at once, compared with the module it lowers; for the teacher's own (trusted) output only, and only as faithful to Triton as the subset it emulates.

The teacher's kernels (bootstrap/teacher.py) run one program per row, never talk across programs
and use a small part of `triton.language`. So the whole grid can run as one batch of torch
operations: `tl.program_id(0)` is the column of row numbers [R, 1], `tl.arange` a row [1, BLOCK],
a reduction over a program's `axis=0` is one over the last dimension (keeping it), loads and
stores gather and scatter through flat views with their masks. A kernel that would need anything
else (another axis, atomics, a loop over blocks) fails the check with the reason, it is never
approximated. What the emulation does not see (Triton's own type promotion, compiler bugs) the
audit measures: distillation sends a random share of the checked answers through the contained
evaluator and reports every disagreement (bootstrap/distill.py).

Candidate code from a model must never come here: it runs in this process, unconfined.
"""

from __future__ import annotations

import builtins
import copy
import types
from typing import Any

import torch

from kernelzero.kit.problems import INPUT_SCALES
from kernelzero.kit.seeding import seed_generators

RTOL = 1e-3  # ten times tighter than the evaluator's default: what passes here has margin there
ATOL = 1e-3  # times the reference's RMS, as the evaluator's comparison scales it


class CheckFailed(ValueError):
    """The answer does not reproduce the module, or uses what the emulation does not cover; the message says which."""


class _Pointer:
    """A tensor argument seen as a pointer: a flat view and the element offsets added to it."""

    def __init__(self, flat: torch.Tensor, offsets: Any = 0) -> None:
        self.flat, self.offsets = flat, offsets

    def __add__(self, offsets: Any) -> "_Pointer":
        return _Pointer(self.flat, self.offsets + offsets)

    __radd__ = __add__

    def index(self) -> torch.Tensor:
        return torch.as_tensor(self.offsets, dtype=torch.int64)


def _reduction(fn):
    def reduce(x: torch.Tensor, axis: int = 0) -> torch.Tensor:
        if axis != 0:
            raise CheckFailed(f"reduction over axis {axis}: a row program has one axis")
        return fn(torch.as_tensor(x))
    return reduce


class _Language(types.SimpleNamespace):
    """The part of triton.language the teacher writes, over all row programs at once."""

    def __init__(self) -> None:
        super().__init__(
            constexpr=int, float32=torch.float32, int32=torch.int32, int64=torch.int64,
            where=lambda c, a, b: torch.where(torch.as_tensor(c), torch.as_tensor(a), torch.as_tensor(b)),
            maximum=lambda a, b: torch.maximum(torch.as_tensor(a), torch.as_tensor(b)),
            minimum=lambda a, b: torch.minimum(torch.as_tensor(a), torch.as_tensor(b)),
            exp=torch.exp, exp2=torch.exp2, log=torch.log, log2=torch.log2, sqrt=torch.sqrt, rsqrt=torch.rsqrt,
            abs=torch.abs, floor=torch.floor, ceil=torch.ceil, sin=torch.sin, cos=torch.cos,
            sigmoid=torch.sigmoid, erf=torch.erf,
            sum=_reduction(lambda x: x.sum(-1, keepdim=True)),
            max=_reduction(lambda x: x.amax(-1, keepdim=True)),
            min=_reduction(lambda x: x.amin(-1, keepdim=True)),
            argmax=_reduction(lambda x: x.argmax(-1, keepdim=True)),
            argmin=_reduction(lambda x: x.argmin(-1, keepdim=True)),
            cumsum=_reduction(lambda x: x.cumsum(-1)), cumprod=_reduction(lambda x: x.cumprod(-1)),
        )
        self.rows = torch.zeros(1, 1, dtype=torch.int64)

    def program_id(self, axis: int) -> torch.Tensor:
        if axis != 0:
            raise CheckFailed(f"program_id({axis}): the teacher's grids have one axis")
        return self.rows

    def arange(self, start: int, end: int) -> torch.Tensor:
        return torch.arange(start, end)[None, :]

    def load(self, pointer: _Pointer, mask: Any = None, other: float = 0.0) -> torch.Tensor:
        index = pointer.index()
        if mask is None:
            return pointer.flat[index]
        mask = torch.as_tensor(mask).expand_as(index)
        values = pointer.flat[torch.where(mask, index, 0)]
        return torch.where(mask, values, torch.as_tensor(other, dtype=values.dtype))

    def store(self, pointer: _Pointer, value: Any, mask: Any = None) -> None:
        index = pointer.index()
        value = torch.as_tensor(value, dtype=pointer.flat.dtype).expand_as(index)
        if mask is not None:
            keep = torch.as_tensor(mask).expand_as(index)
            index, value = index[keep], value[keep]
        pointer.flat[index.reshape(-1)] = value.reshape(-1)


class _Kernel:
    """A @triton.jit function: `kernel[grid](args...)` runs its body once for every row program."""

    def __init__(self, fn, language: _Language) -> None:
        self.fn, self.language = fn, language

    def __getitem__(self, grid: tuple):
        if len(grid) != 1:
            raise CheckFailed(f"grid {grid}: the teacher's grids have one axis")

        def launch(*args: Any, **constants: Any) -> None:
            pointers = [_Pointer(a.view(-1)) if isinstance(a, torch.Tensor) else a for a in args]
            for arg in args:
                if isinstance(arg, torch.Tensor) and not arg.is_contiguous():
                    raise CheckFailed("a kernel argument is not contiguous: its flat view would not be the tensor")
            self.language.rows = torch.arange(int(grid[0]))[:, None]
            self.fn(*pointers, **constants)
        return launch


def _triton(language: _Language) -> types.SimpleNamespace:
    return types.SimpleNamespace(
        jit=lambda fn: _Kernel(fn, language), language=language, cdiv=lambda a, b: -(-a // b),
        next_power_of_2=lambda n: 1 << max(0, int(n) - 1).bit_length(),
    )


def load_answer(answer_source: str, name: str = "teacher_answer") -> dict[str, Any]:
    """The answer's module namespace, with `triton` and `triton.language` the emulation."""
    language = _Language()
    fake = _triton(language)
    real_import = builtins.__import__

    def importer(module: str, *args: Any, **kwargs: Any):
        if module == "triton" or module.startswith("triton."):
            return fake
        return real_import(module, *args, **kwargs)

    namespace: dict[str, Any] = {"__name__": name, "__builtins__": {**vars(builtins), "__import__": importer}}
    exec(compile(answer_source, f"<{name}>", "exec"), namespace)
    return namespace


def _close(expected: torch.Tensor, got: Any) -> str:
    """'' when `got` matches `expected` (shape, dtype, NaN/Inf parity, magnitude-scaled tolerance, not constant
    where the module is not), else why not."""
    if not isinstance(got, torch.Tensor):
        return f"returned {type(got).__name__}, not a tensor"
    if got.shape != expected.shape or got.dtype != expected.dtype:
        return f"returned {tuple(got.shape)} {got.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
    if got.numel() > 1 and bool((got == got.reshape(-1)[0]).all()) and not bool((expected == expected.reshape(-1)[0]).all()):
        return "a constant output where the module's is not"
    expected, got = expected.double(), got.double()
    finite = torch.isfinite(expected)
    if not torch.equal(finite, torch.isfinite(got)) or not torch.equal(expected[~finite], got[~finite]):
        return "NaN/Inf where the module has none, or the other way round"
    scale = float(expected[finite].pow(2).mean().sqrt()) if finite.any() else 1.0
    error = (got[finite] - expected[finite]).abs()
    bound = ATOL * (scale or 1.0) + RTOL * expected[finite].abs()
    return "" if bool((error <= bound).all()) else f"max abs error {float(error.max()):.3g} beyond tolerance"


def _trials(module: dict[str, Any], seeds: tuple[int, ...]):
    """(name, inputs): a draw per seed, then the first draw under each of the judges' INPUT_SCALES."""
    for seed in seeds:
        seed_generators(seed)
        yield f"seed {seed}", module["get_inputs"]()
    seed_generators(seeds[0])
    first = module["get_inputs"]()
    for name, factor in INPUT_SCALES.items():
        yield name, [t * factor if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in first]


def check(module_source: str, answer_source: str, seeds: tuple[int, ...] = (0, 1)) -> None:
    """Raise CheckFailed unless the answer's ModelNew reproduces the module's Model on a draw from each seed and
    on the inputs the evaluator scales (kernelzero/kit/problems.py, INPUT_SCALES)."""
    module: dict[str, Any] = {"__name__": "teacher_module"}
    exec(compile(module_source, "<module>", "exec"), module)
    try:
        answer = load_answer(answer_source)
    except CheckFailed:
        raise
    except Exception as exc:  # noqa: BLE001  (any failure to load is the answer's)
        raise CheckFailed(f"the answer does not load: {type(exc).__name__}: {exc}") from exc
    init = module["get_init_inputs"]()
    seed_generators(0)
    reference = module["Model"](*init)
    try:
        candidate = answer["ModelNew"](*init)
        candidate.load_state_dict(reference.state_dict())
    except Exception as exc:  # noqa: BLE001
        raise CheckFailed(f"ModelNew does not build like Model: {type(exc).__name__}: {exc}") from exc
    exact = copy.deepcopy(reference).double()
    for name, inputs in _trials(module, seeds):
        with torch.no_grad():
            expected = reference(*[t.clone() for t in inputs])
            if not isinstance(expected, torch.Tensor):
                raise CheckFailed("the module does not return one tensor")
            precise = exact(*[t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in inputs])
            unstable = _close(precise.to(expected.dtype), expected)
            if unstable:
                # the module's own float32 result is that far from float64: any other summation order (a kernel's)
                # lands elsewhere, and the evaluator's tolerance is only ten times looser than this check's
                raise CheckFailed(f"{name}: the module is ill-conditioned (float32 against float64: {unstable})")
            try:
                got = candidate(*[t.clone() for t in inputs])
            except CheckFailed:
                raise
            except Exception as exc:  # noqa: BLE001
                raise CheckFailed(f"ModelNew raised {type(exc).__name__}: {exc}") from exc
        problem = _close(expected, got)
        if problem:
            raise CheckFailed(f"{name}: {problem}")
