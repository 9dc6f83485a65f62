"""Output comparison: form (type, layout, device, dtype, shape), NaN/Inf parity, magnitude-aware tolerances, constant and unwritten outputs.

Every output form a reference can return is compared: tensors of any rank (0-dim included),
tuples and lists of them, integer and bool tensors (exactly), complex tensors (as real pairs) and
Python numbers. A candidate output whose form differs is a mismatch with a reason, never an error.

The torch functions used here are bound when this module is imported (before any candidate
code), so a candidate that rebinds `torch.allclose` or `torch.Tensor.sub` does not change the
comparison. It does NOT defend against a candidate that replaces ATen kernels in the dispatcher
(the static rules forbid that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

POISON_BYTE = 0xFF  # an all-ones bit pattern: NaN for every float type, -1 for signed ints
CHUNK = 1 << 24  # elements compared at once: float64 copies of huge outputs stay bounded

_abs, _isnan, _isinf, _isfinite = torch.abs, torch.isnan, torch.isinf, torch.isfinite
_where, _sqrt, _sum, _max, _all, _any, _eq = torch.where, torch.sqrt, torch.sum, torch.max, torch.all, torch.any, torch.eq
_to, _view, _reshape, _item = torch.Tensor.to, torch.Tensor.view, torch.Tensor.reshape, torch.Tensor.item
_zeros, _zeros_like, _numel = torch.zeros, torch.zeros_like, torch.Tensor.numel
_sub, _mul, _add, _gt, _ne = torch.sub, torch.mul, torch.add, torch.gt, torch.ne
_view_as_real, _resolve_conj, _as_tensor = torch.view_as_real, torch.resolve_conj, torch.tensor
_storage_bytes = torch.UntypedStorage.nbytes
_or, _and, _not = torch.logical_or, torch.logical_and, torch.logical_not
_arange, _xor, _rshift, _bor = torch.arange, torch.bitwise_xor, torch.bitwise_right_shift, torch.bitwise_or
_TENSOR = torch.Tensor


@dataclass
class Comparison:
    ok: bool
    reason: str = "ok"  # output_mismatch, nan_parity, shape_mismatch, dtype_mismatch, constant_output, ...
    max_abs_err: float = 0.0
    rel_err: float = 0.0
    detail: str = ""


def flatten_outputs(out: Any) -> list[Any]:
    """A forward's result as a flat list of tensors and Python numbers; anything else raises TypeError."""
    if isinstance(out, (tuple, list)):
        return [leaf for item in out for leaf in flatten_outputs(item)]
    if isinstance(out, (torch.Tensor, int, float, bool)):
        return [out]
    raise TypeError(f"forward returned a {type(out).__name__}; expected tensors or numbers")


def is_constant(t: torch.Tensor) -> bool:
    """Every element equal to the first (all NaN counts); compared CHUNK elements at a time."""
    if _numel(t) <= 1:
        return False
    flat = _reshape(t, (-1,))
    first = flat[0]
    nan = t.is_floating_point() and bool(_item(_isnan(first)))
    for start in range(0, _numel(flat), CHUNK):
        part = flat[start:start + CHUNK]
        if not _item(_all(_isnan(part) if nan else _eq(part, first))):
            return False
    return True


def poisoned_elements(t: torch.Tensor) -> int:
    """How many elements of `t` still hold the poison bit pattern (never written)."""
    if t.dtype == torch.bool or _numel(t) == 0 or not t.is_contiguous():
        return 0
    return sum(int(_item(_sum(_all(_eq(rows, POISON_BYTE), dim=1)))) for rows in _byte_chunks(t))


def unwritten_between(plain: Any, filled: Any) -> int:
    """Elements that hold torch's fill in a run where new memory was filled, and other bits in a plain run.

    Their value came from whatever memory held, so the candidate never wrote them. A value the
    candidate did write (a literal NaN included) is the same in both runs and is not counted.
    """
    count = 0
    for a, b in zip(flatten_outputs(plain), flatten_outputs(filled)):
        if not (isinstance(a, _TENSOR) and isinstance(b, _TENSOR)) or b.dtype not in _FILL_BYTES \
                or a.shape != b.shape or a.dtype != b.dtype or not (a.is_contiguous() and b.is_contiguous()):
            continue
        fill = _to(_FILL_BYTES[b.dtype], b.device)
        for raw_a, raw_b in zip(_byte_chunks(a), _byte_chunks(b)):
            is_fill = _all(_eq(raw_b, fill), dim=1)
            count += int(_item(_sum(_and(is_fill, _any(_ne(raw_a, raw_b), dim=1)))))
    return count


def _byte_chunks(t: torch.Tensor):
    """A contiguous tensor's bytes, one row per element, CHUNK rows at a time (bounded temporaries for huge outputs).

    Flattened first: a 0-dim tensor has no last dimension to view as bytes.
    """
    rows = _reshape(_view(_reshape(t, (-1,)), torch.uint8), (-1, t.element_size()))
    for start in range(0, rows.shape[0], CHUNK):
        yield rows[start:start + CHUNK]


def _torch_fill_bytes() -> dict[torch.dtype, torch.Tensor]:
    """Per dtype, the bytes of one element as torch's deterministic mode fills new memory (quiet NaN, integer max)."""
    before = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        return {dt: _view(torch.empty(1, dtype=dt), torch.uint8).clone() for dt in _FILLED_DTYPES}
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


_FILLED_DTYPES = (torch.float64, torch.float32, torch.float16, torch.bfloat16,
                  torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
_FILL_BYTES = _torch_fill_bytes()


def compare_tensor(expected: torch.Tensor, got: Any, rtol: float, atol: float) -> Comparison:
    """Elementwise |got - exp| <= atol * scale + rtol * |exp| with scale = RMS(exp), AND ||got - exp|| <= rtol ||exp||."""
    form = _form_mismatch(expected, got)
    if form is not None:
        return form
    if expected.is_complex():  # real and imaginary parts compared as one real tensor of pairs
        expected, got = _view_as_real(_resolve_conj(expected)), _view_as_real(_resolve_conj(got))
    if _numel(expected) == 0:
        return Comparison(True)
    if not expected.is_floating_point():  # integers and bools: exactly
        bad = int(_item(_sum(_ne(got, expected))))
        if bad:
            return Comparison(False, _mismatch_reason(expected, got), detail=f"{bad} of {_numel(expected)} elements differ")
        return Comparison(True)
    sums = _pass_one(expected, got)
    if sums["parity"]:
        reason = "unwritten_output" if poisoned_elements(got) else "nan_parity"
        return Comparison(False, reason, detail=f"{sums['parity']} of {_numel(expected)} elements differ in NaN/Inf")
    norm_e, norm_d = sums["sum_e2"] ** 0.5, sums["sum_d2"] ** 0.5
    scale = norm_e / max(sums["finite"], 1) ** 0.5  # RMS of the reference: atol follows the output's magnitude
    rel = norm_d / norm_e if norm_e > 0 else (0.0 if norm_d == 0 else float("inf"))
    max_abs = sums["max_abs"]
    if is_constant(got) and not is_constant(expected):
        return Comparison(False, "constant_output", max_abs, rel, f"every element is {_item(_reshape(got, (-1,))[0])}")
    bad = _count_beyond(expected, got, atol * (scale if scale > 0 else 1.0), rtol)
    if bad or rel > rtol:
        return Comparison(False, _mismatch_reason(expected, got), max_abs, rel,
                          f"{bad} of {_numel(expected)} elements beyond tolerance; relative error of the tensor {rel:.3g}")
    return Comparison(True, "ok", max_abs, rel)


def _form_mismatch(expected: torch.Tensor, got: Any) -> Comparison | None:
    """Why `got` is not a plain dense tensor like `expected` (each reason a candidate's mismatch), or None."""
    if type(got) is not _TENSOR:
        return Comparison(False, "output_not_plain_tensor", detail=f"output is a {type(got).__name__}, not torch.Tensor")
    if got.layout != torch.strided or got.is_nested:
        return Comparison(False, "layout_mismatch", detail=f"expected a dense tensor, got layout {got.layout}")
    if got.device != expected.device:
        return Comparison(False, "device_mismatch", detail=f"expected {expected.device}, got {got.device}")
    if tuple(got.shape) != tuple(expected.shape):
        return Comparison(False, "shape_mismatch", detail=f"expected {tuple(expected.shape)}, got {tuple(got.shape)}")
    if got.dtype != expected.dtype:
        return Comparison(False, "dtype_mismatch", detail=f"expected {expected.dtype}, got {got.dtype}")
    if not fits_storage(got):
        return Comparison(False, "output_unreadable", detail="the output's storage is smaller than its shape needs")
    return None


def fits_storage(t: torch.Tensor) -> bool:
    """Whether every element of `t` lies inside its storage (a storage resized after the fact makes reads fail)."""
    if _numel(t) == 0:
        return True
    extent = 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return (t.storage_offset() + extent) * t.element_size() <= _storage_bytes(t.untyped_storage())


def _chunks(expected: torch.Tensor, got: torch.Tensor):
    """Matching float64 slices of both tensors, CHUNK elements at a time (bounded memory for huge outputs)."""
    e_flat, g_flat = _reshape(expected, (-1,)), _reshape(got, (-1,))
    for start in range(0, _numel(e_flat), CHUNK):
        e = _to(e_flat[start:start + CHUNK], torch.float64)
        g = _to(g_flat[start:start + CHUNK], torch.float64)
        finite = _isfinite(e)
        yield e, g, finite, _where(finite, e, _zeros_like(e)), _where(finite, g, _zeros_like(g))


def _pass_one(expected: torch.Tensor, got: torch.Tensor) -> dict[str, float]:
    sums = {"parity": 0, "finite": 0, "sum_e2": 0.0, "sum_d2": 0.0, "max_abs": 0.0}
    for e, g, finite, e0, g0 in _chunks(expected, got):
        nan_e, nan_g, inf_e, inf_g = _isnan(e), _isnan(g), _isinf(e), _isinf(g)
        parity = _or(_or(_ne(nan_e, nan_g), _ne(inf_e, inf_g)), _and(inf_e, _ne(g, e)))
        sums["parity"] += int(_item(_sum(parity)))
        diff = _abs(_sub(g0, e0))
        sums["finite"] += int(_item(_sum(finite)))
        sums["sum_e2"] += float(_item(_sum(_mul(e0, e0))))
        sums["sum_d2"] += float(_item(_sum(_mul(diff, diff))))
        sums["max_abs"] = max(sums["max_abs"], float(_item(_max(diff))))
    return sums


def _count_beyond(expected: torch.Tensor, got: torch.Tensor, abs_tol: float, rtol: float) -> int:
    """Elements with |got - exp| > abs_tol + rtol * |exp| (finite reference elements only)."""
    bad = 0
    for _, _, _, e0, g0 in _chunks(expected, got):
        bad += int(_item(_sum(_gt(_abs(_sub(g0, e0)), _add(_mul(_abs(e0), rtol), abs_tol)))))
    return bad


def _mismatch_reason(expected: torch.Tensor, got: torch.Tensor) -> str:
    if is_constant(got) and not is_constant(expected):
        return "constant_output"
    return "unwritten_output" if poisoned_elements(got) else "output_mismatch"


def _number_tensor(value: int | float | bool) -> torch.Tensor:
    return _as_tensor(value, dtype=torch.float64 if isinstance(value, float) else None)


def compare_outputs(expected: list[Any], got: Any, rtol: float, atol: float) -> Comparison:
    """Compare a flat reference output list with a candidate's raw forward result; worst error kept."""
    try:
        flat = flatten_outputs(got)
    except TypeError as exc:
        return Comparison(False, "output_type", detail=str(exc))
    if len(flat) != len(expected):
        return Comparison(False, "output_count", detail=f"expected {len(expected)} outputs, got {len(flat)}")
    worst = Comparison(True)
    for i, (exp, act) in enumerate(zip(expected, flat)):
        if isinstance(exp, (int, float, bool)):  # a Python number: the candidate's must be a number of its kind
            if type(act) is not type(exp):
                result = Comparison(False, "output_type", detail=f"output {i}: expected a Python {type(exp).__name__}, "
                                                                 f"got {type(act).__name__}")
                return result
            exp, act = _number_tensor(exp), _number_tensor(act)
        # a reference too large to keep whole judges by itself (gpu_workers/digest.py)
        result = compare_tensor(exp, act, rtol, atol) if isinstance(exp, _TENSOR) else exp.judge(act, rtol, atol)
        if not result.ok:
            result.detail = f"output {i}: {result.detail}"
            return result
        worst = Comparison(True, "ok", max(worst.max_abs_err, result.max_abs_err), max(worst.rel_err, result.rel_err))
    return worst


def compare_or_blame(expected: list[Any], got: Any, rtol: float, atol: float) -> Comparison:
    """`compare_outputs`, where an exception is the output's fault only if the reference compares with itself cleanly.

    A candidate output of the right form can still break a read (a storage swapped under a tensor, an
    allocator left broken): that is `output_unreadable`, a mismatch. If comparing the reference with a
    copy of itself raises too, the fault is this module's own and the exception propagates.
    """
    try:
        return compare_outputs(expected, got, rtol, atol)
    except Exception as exc:  # noqa: BLE001  (attributed just below)
        whole = [t for t in expected if isinstance(t, (_TENSOR, int, float, bool))]
        compare_outputs(whole, [t.clone() if isinstance(t, _TENSOR) else t for t in whole], rtol, atol)
        for digest in (t for t in expected if not isinstance(t, (_TENSOR, int, float, bool))):
            digest.self_test()  # each raises when the comparison itself is broken
        return Comparison(False, "output_unreadable", detail=f"{type(exc).__name__}: {exc}"[:500])


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_MIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)  # splitmix64's constants
_WORD = 1 << 64


def _signed(c: int) -> int:
    return c - _WORD if c >= 1 << 63 else c


def position_weights(n: int, key: int, device: torch.device) -> torch.Tensor:
    """Odd pseudo-random int64 weights for positions 0..n-1 from `key`: splitmix64's finaliser, wrapping at 64 bits."""
    z = _mul(_add(_arange(n, dtype=torch.int64, device=device), _signed(key % _WORD)), _signed(_MIX[0]))
    z = _mul(_xor(z, _rshift(z, 30)), _signed(_MIX[1]))
    z = _mul(_xor(z, _rshift(z, 27)), _signed(_MIX[2]))
    return _bor(_xor(z, _rshift(z, 31)), 1)


def fingerprint(t: torch.Tensor, weights: torch.Tensor) -> tuple:
    """An input's form and a keyed sum of its bits: equal before and after a call unless the call changed it.

    The sum weighs each element's bits (an integer of its width) by `weights` (position_weights; one per
    element of a CHUNK, each chunk's sum times its own odd factor), wrapping at 64 bits: any change to
    one element changes it, and changes that cancel need the weights, drawn per evaluation before
    candidate code exists. Raises where `t` cannot be read (a storage shrunk under it).
    """
    if not fits_storage(t):
        raise RuntimeError("the tensor's storage is smaller than its shape needs")
    form = (tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype)
    flat = _reshape(_view_as_real(_resolve_conj(t)) if t.is_complex() else t, (-1,))
    bits = _view(flat, _BITS[flat.element_size()])
    # summed on the device, wrapping as the Python sum modulo 2**64 would: one synchronization, not one a chunk
    total = _zeros((), dtype=torch.int64, device=t.device)
    for k, start in enumerate(range(0, _numel(bits), CHUNK)):
        part = _to(bits[start:start + CHUNK], torch.int64)
        total = _add(total, _mul(_sum(_mul(part, weights[:_numel(part)])), 2 * k + 1))
    return form, int(_item(total)) % _WORD
