"""A reference output kept as sampled elements and block sums where the whole does not fit, and a candidate's output judged by it; it catches regions not computed, NOT a rare wrong element off the samples.

The sample positions are drawn from the operating system's entropy when the digest is made
(before candidate code exists), so a candidate cannot tell which elements are read. The block
sums bound what the elementwise tolerance allows, so a correct output never fails them; an
output that left a region unwritten (poison, stale values) or filled it with plausible values
(a copy, neighbours, a constant) fails the samples, the sums or the non-finite counts. The
whole-tensor relative error is estimated from the samples for evidence, not enforced: trial 0's
reference is always kept whole and held to it (trial.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from kernelzero.gpu_workers import compare
from kernelzero.gpu_workers.compare import CHUNK, Comparison

SAMPLES = 1 << 20  # elements kept at random positions
BLOCKS = 1 << 18  # at most this many block sums
WEIGHT_PERIOD = 65521  # integer outputs: position weights 1..65521, so moved elements change a block's sum
INF_SHIFT = 21  # per block: NaNs + (+Inf << 21) + (-Inf << 42); a block holds fewer than 2**21 elements
ROUNDING = 1e-9  # float64 sums of the same values in another order differ by far less than this share

# bound before candidate code loads, like compare.py's
_cat, _zeros, _arange, _randint = torch.cat, torch.zeros, torch.arange, torch.randint
_sum, _abs, _isnan, _isinf, _isfinite, _where = torch.sum, torch.abs, torch.isnan, torch.isinf, torch.isfinite, torch.where
_to, _view, _reshape, _item, _numel = (torch.Tensor.to, torch.Tensor.view, torch.Tensor.reshape, torch.Tensor.item,
                                       torch.Tensor.numel)
_sub, _mul, _add, _gt, _ne, _any = torch.sub, torch.mul, torch.add, torch.gt, torch.ne, torch.any
_remainder, _sqrt, _max, _shift = torch.remainder, torch.sqrt, torch.max, torch.bitwise_left_shift
_and, _or, _lt, _sort = torch.logical_and, torch.logical_or, torch.lt, torch.sort
_view_as_real, _resolve_conj = torch.view_as_real, torch.resolve_conj
_TENSOR = torch.Tensor


def block_size(numel: int) -> int:
    return max(1, -(-numel // BLOCKS))


def nbytes_of(numel: int, element_size: int) -> int:
    """What a digest of a tensor of this size holds on the device: its samples and three sums per block."""
    blocks = -(-numel // block_size(numel)) if numel else 0
    return min(numel, SAMPLES) * (8 + element_size) + 3 * 8 * blocks


def nbytes_for(t: torch.Tensor) -> int:
    """What a digest of `t` would hold (complex tensors are digested as their real pairs)."""
    pairs = 2 if t.is_complex() else 1
    return nbytes_of(t.numel() * pairs, t.element_size() // pairs)


def _real_flat(t: torch.Tensor) -> torch.Tensor:
    if t.is_complex():
        t = _view_as_real(_resolve_conj(t))
    return _reshape(t, (-1,))


def _block_sums(flat: torch.Tensor, block: int, all_finite: bool | None = None) -> tuple[torch.Tensor, ...]:
    """Per block: floats (sum of finite elements, sum of their magnitudes, non-finite code); integers
    (wrapping int64 sum, position-weighted sum, zeros); whole blocks CHUNK elements at a time. `all_finite`,
    where the caller has counted it, spares a pass."""
    n, floating = _numel(flat), flat.is_floating_point()
    rows = max(1, CHUNK // block)
    # outputs are nearly always finite: one pass that says so spares the float64 copies and masks of every chunk
    if floating and all_finite is None:
        all_finite = _all_finite(flat)
    float_sums = _finite_sums if all_finite else _float_sums
    parts: list[tuple[torch.Tensor, ...]] = []
    for start in range(0, n, rows * block):
        stop = min(n, start + rows * block)
        part = flat[start:stop]
        pad = -(stop - start) % block
        if pad:  # zeros add nothing to any sum or count
            part = _cat([part, _zeros(pad, dtype=part.dtype, device=part.device)])
        parts.append(float_sums(part, block) if floating else _integer_sums(part, block, start))
    return tuple(_cat([p[i] for p in parts]) for i in range(3))


def _all_finite(flat: torch.Tensor) -> bool:
    """Whether no element is NaN or infinite: CHUNK elements at a time, counted on the device, one synchronization."""
    finite = _zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, _numel(flat), CHUNK):
        finite = _add(finite, _sum(_isfinite(flat[start:start + CHUNK])))
    return int(_item(finite)) == _numel(flat)


def _finite_sums(part: torch.Tensor, block: int) -> tuple[torch.Tensor, ...]:
    """`_float_sums` of a part known to hold no NaN or infinity: summed in float64 without a float64 copy."""
    rows = _reshape(part, (-1, block))
    return (_sum(rows, 1, dtype=torch.float64), _sum(_abs(rows), 1, dtype=torch.float64),
            _zeros(rows.shape[0], dtype=torch.int64, device=part.device))


def _float_sums(part: torch.Tensor, block: int) -> tuple[torch.Tensor, ...]:
    e = _to(part, torch.float64)
    finite = _isfinite(e)
    e0 = _reshape(_where(finite, e, _zeros((), dtype=torch.float64, device=e.device)), (-1, block))
    inf = _isinf(e)

    def count(mask: torch.Tensor) -> torch.Tensor:
        return _sum(_reshape(mask, (-1, block)), 1)

    code = _add(_add(count(_isnan(e)), _shift(count(_and(inf, _gt(e, 0))), INF_SHIFT)),
                _shift(count(_and(inf, _lt(e, 0))), 2 * INF_SHIFT))
    return _sum(e0, 1), _sum(_abs(e0), 1), code


def _integer_sums(part: torch.Tensor, block: int, start: int) -> tuple[torch.Tensor, ...]:
    v = _to(part, torch.int64)
    weights = _add(_remainder(_arange(start, start + _numel(v), device=v.device), WEIGHT_PERIOD), 1)
    rows = _reshape(v, (-1, block))
    return _sum(rows, 1), _sum(_reshape(_mul(v, weights), (-1, block)), 1), _zeros(rows.shape[0], dtype=torch.int64,
                                                                                  device=v.device)


@dataclass
class Digest:
    """What is kept of one reference output tensor: its form, samples, block sums, magnitude and constancy."""

    shape: torch.Size
    dtype: torch.dtype
    device: torch.device
    block: int
    index: torch.Tensor  # flat positions (of the real view, for complex outputs), sorted
    values: torch.Tensor  # the reference there
    sums: torch.Tensor
    sums2: torch.Tensor  # magnitudes (floats) or position-weighted sums (integers)
    codes: torch.Tensor  # non-finite counts per block (floats)
    sum_e2: float  # over finite elements: the RMS that scales atol, as compare_tensor has it
    finite: int
    constant: bool

    @property
    def nbytes(self) -> int:
        return sum(_numel(t) * t.element_size() for t in (self.index, self.values, self.sums, self.sums2, self.codes))

    def judge(self, got: object, rtol: float, atol: float) -> Comparison:
        """The candidate's output against what is kept: form, non-finite counts, samples, block sums, constancy."""
        form = compare._form_mismatch(self, got)
        if form is not None:
            return form
        flat = _real_flat(got)
        if _numel(flat) == 0:
            return Comparison(True)
        sums, sums2, codes = _block_sums(flat, self.block)
        sampled = flat[self.index]
        if not flat.is_floating_point():
            bad = int(_item(_sum(_ne(sampled, self.values))))
            bad_blocks = int(_item(_sum(_or(_ne(sums, self.sums), _ne(sums2, self.sums2)))))
            return self._verdict(flat, bad, bad_blocks, 0.0, 0.0)
        parity = int(_item(_sum(_ne(codes, self.codes)))) + _parity_at_samples(self.values, sampled)
        if parity:
            reason = "unwritten_output" if compare.poisoned_elements(flat) else "nan_parity"
            return Comparison(False, reason, detail=f"{parity} blocks or samples differ in NaN/Inf ({self._what()})")
        scale = (self.sum_e2 / max(self.finite, 1)) ** 0.5
        abs_tol = atol * (scale if scale > 0 else 1.0)
        bad, max_abs, rel = _sampled_beyond(self.values, sampled, abs_tol, rtol)
        allowed = self.block * abs_tol + rtol * self.sums2 + ROUNDING * (self.sums2 + _abs(sums))
        bad_blocks = int(_item(_sum(_or(_gt(_abs(_sub(sums, self.sums)), allowed),
                                        _gt(_abs(_sub(sums2, self.sums2)), allowed)))))
        return self._verdict(flat, bad, bad_blocks, max_abs, rel)

    def _verdict(self, got: torch.Tensor, bad: int, bad_blocks: int, max_abs: float, rel: float) -> Comparison:
        if compare.is_constant(got) and not self.constant:
            return Comparison(False, "constant_output", max_abs, rel, f"every element is {_item(_reshape(got, (-1,))[0])}")
        if bad or bad_blocks:
            reason = "unwritten_output" if compare.poisoned_elements(got) else "output_mismatch"
            return Comparison(False, reason, max_abs, rel, f"{bad} of {_numel(self.values)} sampled elements and "
                                                           f"{bad_blocks} of {_numel(self.sums)} block sums beyond "
                                                           f"tolerance ({self._what()})")
        return Comparison(True, "ok", max_abs, rel)

    def _what(self) -> str:
        return f"judged by a digest: the reference, {tuple(self.shape)} {self.dtype}, was too large to keep whole"

    def self_test(self) -> None:
        """Raises when judging itself is broken: the sums over the kept samples, as a candidate's output would take them."""
        _block_sums(self.values, 1)
        if self.values.is_floating_point():
            _parity_at_samples(self.values, self.values.clone())


def _parity_at_samples(expected: torch.Tensor, got: torch.Tensor) -> int:
    e, g = _to(expected, torch.float64), _to(got, torch.float64)
    nan_e, inf_e = _isnan(e), _isinf(e)
    differ = _or(_or(_ne(nan_e, _isnan(g)), _ne(inf_e, _isinf(g))), _and(inf_e, _ne(g, e)))
    return int(_item(_sum(differ)))


def _sampled_beyond(expected: torch.Tensor, got: torch.Tensor, abs_tol: float, rtol: float) -> tuple[int, float, float]:
    """Sampled elements beyond |got - exp| <= abs_tol + rtol |exp|, the largest difference, the samples' relative error."""
    e, g = _to(expected, torch.float64), _to(got, torch.float64)
    finite = _isfinite(e)
    zero = _zeros((), dtype=torch.float64, device=e.device)
    e0, g0 = _where(finite, e, zero), _where(finite, g, zero)
    diff = _abs(_sub(g0, e0))
    bad = int(_item(_sum(_gt(diff, _add(_mul(_abs(e0), rtol), abs_tol)))))
    norm_e = float(_item(_sqrt(_sum(_mul(e0, e0)))))
    norm_d = float(_item(_sqrt(_sum(_mul(diff, diff)))))
    rel = norm_d / norm_e if norm_e > 0 else (0.0 if norm_d == 0 else float("inf"))
    return bad, float(_item(_max(diff))) if _numel(diff) else 0.0, rel


def make(t: torch.Tensor) -> Digest:
    """The digest of a reference output tensor (dense, as the reference returned it); positions from OS entropy."""
    flat = _real_flat(t)
    n = _numel(flat)
    block = block_size(n)
    if n <= SAMPLES:
        index = _arange(n, device=flat.device)
    else:
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        index = _to(_sort(_randint(0, n, (SAMPLES,), generator=gen)).values, flat.device)
    sum_e2, finite = _square_sum(flat)
    sums, sums2, codes = _block_sums(flat, block, finite == n) if n else (flat.new_zeros(0),) * 3
    return Digest(shape=t.shape, dtype=t.dtype, device=t.device, block=block, index=index, values=flat[index].clone(),
                  sums=sums, sums2=sums2, codes=codes, sum_e2=sum_e2, finite=finite, constant=compare.is_constant(flat))


def _square_sum(flat: torch.Tensor) -> tuple[float, int]:
    """Sum of squares and count of the finite elements (floats; integers count as finite), CHUNK at a time."""
    total = _zeros((), dtype=torch.float64, device=flat.device)
    count = _zeros((), dtype=torch.int64, device=flat.device)
    for start in range(0, _numel(flat), CHUNK):
        e = _to(flat[start:start + CHUNK], torch.float64)
        finite = _isfinite(e)
        e0 = _where(finite, e, _zeros((), dtype=torch.float64, device=e.device))
        total, count = _add(total, _sum(_mul(e0, e0))), _add(count, _sum(finite))
    return float(_item(total)), int(_item(count))


def of_outputs(outputs: list) -> list:
    """A reference's flat outputs with every tensor replaced by its digest (Python numbers kept as they are)."""
    return [make(t) if isinstance(t, _TENSOR) else t for t in outputs]
