"""Programmatic synthesizer: composes a KernelBench-format module (Model, get_inputs, get_init_inputs) from an API set without a model; shape-correct by construction, but it does not run the module (the validator does).

The APIs are chained on one tensor `x`. Before each API, `x` is reshaped to the rank and size
limits the catalog gives for it (every size is a power of two, so reshapes are exact); APIs with a
scalar output come last, and when more than one does, the earlier ones are folded in as
`x = x + value`. Sizes are then searched so that the largest tensor is close to the scale's element
budget (scale 1: about 2**26 fp32 elements, enough for >= 0.1 ms on a modern GPU). The same API
set, seed and scale always give the same source text.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import Sequence

import msgspec

from kernelzero.kit.api_catalog import DOMAINS, EXTRA_KINDS, NEEDS, RULES, ApiSpec, Limits, Shape, get

_MAX_ORDERS = 48
_PROBE_SCALE = 2.0 ** -13
_STANDARDIZE = "(x - x.mean()) / (x.std() + 1e-6)"
_MAX_RESIZES = 12


class SynthesisError(ValueError):
    """No shape-correct composition of the API set was found (the message says which API blocked it)."""


class _TooSmall(Exception):
    pass


class _TooBig(Exception):
    pass


class _BadOrder(Exception):
    """An API that needs distinct values would follow one that makes ties: try another order."""


class Step(msgspec.Struct):
    spec: ApiSpec
    in_shape: Shape
    out_shape: Shape
    values: dict
    extras: list[tuple[str, str]]  # (input name, get_inputs expression)
    folded: bool
    standardize: bool  # rescale x to zero mean, unit std first (see api_catalog.VALUE_CLASSES)


class Synthesized(msgspec.Struct):
    source: str
    apis: list[str]
    seed: int
    scale: float
    input_shape: Shape
    output_shape: Shape
    max_numel: int


def _log2(n: int) -> int:
    return n.bit_length() - 1


def _dim(i: int, rank: int) -> int:
    return i % rank


def _satisfies(shape: Shape, caps: dict[int, int], mins: dict[int, int]) -> bool:
    return all(shape[i] <= c for i, c in caps.items()) and all(shape[i] >= m for i, m in mins.items())


def fit_shape(numel: int, rank: int, caps: dict[int, int], mins: dict[int, int], rng: random.Random) -> Shape:
    """A power-of-two shape of `rank` dims holding `numel` elements, as balanced as the limits allow."""
    total = _log2(numel)
    lo = [_log2(mins.get(i, 1)) for i in range(rank)]
    hi = [_log2(caps[i]) if i in caps else total for i in range(rank)]
    if sum(lo) > total:
        raise _TooSmall
    if sum(hi) < total:
        raise _TooBig
    exps = list(lo)
    for _ in range(total - sum(lo)):
        open_dims = [i for i in range(rank) if exps[i] < hi[i]]
        least = min(exps[i] for i in open_dims)
        exps[rng.choice([i for i in open_dims if exps[i] == least])] += 1
    return tuple(1 << e for e in exps)


class _Planner:
    def __init__(self, specs: Sequence[ApiSpec], limits: Limits, rng: random.Random):
        self.specs, self.limits, self.rng = specs, limits, rng

    def limits_for(self, spec: ApiSpec, rank: int) -> tuple[dict[int, int], dict[int, int]]:
        caps = {_dim(i, rank): getattr(self.limits, name) for i, name in spec.caps}
        mins = {_dim(i, rank): size for i, size in spec.mins}
        return caps, mins

    def adapt(self, shape: Shape, spec: ApiSpec) -> Shape:
        rank = spec.rank or max(len(shape), spec.min_rank)
        caps, mins = self.limits_for(spec, rank)
        if len(shape) == rank and _satisfies(shape, caps, mins):
            return shape
        return fit_shape(math.prod(shape), rank, caps, mins, self.rng)

    def start_shape(self, numel: int) -> Shape:
        first = self.specs[0]
        rank = first.rank or max(first.min_rank, self.rng.choice((2, 3)))
        caps, mins = self.limits_for(first, rank)
        return fit_shape(numel, rank, caps, mins, self.rng)

    def plan(self, numel: int) -> tuple[Shape, list[Step], int]:
        start = shape = self.start_shape(numel)
        steps: list[Step] = []
        biggest = numel
        n_extra = 0
        value_class = "signed"  # torch.randn
        for i, spec in enumerate(self.specs):
            standardize = spec.needs == "signed" and value_class != "signed"
            if standardize:
                value_class = value_class if value_class in ("ties", "perm", "mono") else "signed"
            elif spec.needs and value_class not in NEEDS[spec.needs]:
                raise _BadOrder
            in_shape = self.adapt(shape, spec)
            out_shape, values = RULES[spec.rule](in_shape)
            if 0 in out_shape:
                raise _TooSmall
            values = {**_shape_values(in_shape), **values}
            extras = []
            for kind in spec.extras:
                n_extra += 1
                extras.append((f"in{n_extra}", _extra_expr(kind, in_shape)))
            folded = spec.terminal and i != len(self.specs) - 1
            steps.append(Step(spec=spec, in_shape=in_shape, out_shape=out_shape, values=values,
                              extras=extras, folded=folded, standardize=standardize))
            biggest = max(biggest, math.prod(in_shape), math.prod(out_shape))
            if not folded:
                shape = out_shape
                value_class = _value_after(spec, value_class)
        return start, steps, biggest


def _value_after(spec: ApiSpec, value_class: str) -> str:
    """The value class of an API's output; an elementwise function of tied values is still tied."""
    elementwise = spec.family in ("elementwise", "activation") and spec.rule == "same" and "like" not in spec.extras
    if spec.out == "keep" or (elementwise and value_class in ("ties", "perm", "mono")):
        return value_class
    return spec.out


def _shape_values(s: Shape) -> dict:
    return {
        "last": s[-1], "half": s[-1] // 2, "c": s[1] if len(s) > 1 else s[0],
        "ones": "1, " * (len(s) - 1),
    }


def _extra_expr(kind: str, s: Shape) -> str:
    fields = {
        "shape": repr(tuple(s)), "last": s[-1], "lead": repr(tuple(s[:-1])), "numel": math.prod(s),
        "n0": s[0], "c": s[1] if len(s) > 1 else s[0],
    }
    return EXTRA_KINDS[kind].format(**fields)


def _search_sizes(planner: _Planner, limits: Limits) -> tuple[Shape, list[Step], int]:
    """Largest start size whose biggest tensor fits the element budget, growing it when an API needs more."""
    numel = limits.numel
    floor = 1
    for _ in range(_MAX_RESIZES):
        try:
            start, steps, biggest = planner.plan(numel)
        except _TooSmall:
            floor = numel * 2
            numel *= 2
            continue
        except _TooBig:
            numel //= 2
            continue
        if biggest <= limits.numel:
            return start, steps, biggest
        shrunk = max(1, numel * limits.numel // biggest)
        if shrunk < floor:
            raise _TooBig
        numel = 1 << _log2(shrunk)
    raise _TooBig


def _render(start: Shape, steps: list[Step]) -> str:
    """The module's source: no docstring, nothing that names the seed or the scale (a per-row key a model would memorise)."""
    init_lines: list[str] = []
    forward: list[str] = []
    inputs = [("x", f"torch.randn({', '.join(map(str, start))})")]
    shape = start
    for i, step in enumerate(steps):
        spec = step.spec
        attr = f"m{i}"
        var = "h" if step.folded else "x"
        source_var = "x"
        if step.standardize:
            forward.append(f"x = {_STANDARDIZE}")
        if step.in_shape != shape:
            forward.append(f"{var} = x.reshape({', '.join(map(str, step.in_shape))})")
            source_var = var
        x_expr = DOMAINS[spec.domain].format(x=source_var)
        if spec.call.count("{x}") > 1 and x_expr != source_var:
            forward.append(f"{var} = {x_expr}")
            x_expr = var
        extras = {f"e{j}": name for j, (name, _) in enumerate(step.extras)}
        call = spec.call.format(x=x_expr, m=attr, **extras, **step.values)
        forward.append(f"x = x + {call}" if step.folded else f"x = {call}")
        if spec.init:
            init_lines.append(f"self.{attr} = {spec.init.format(**step.values)}")
        inputs += step.extras
        if not step.folded:
            shape = step.out_shape
    args = ", ".join(name for name, _ in inputs)
    body = [
        "import torch",
        "import torch.nn as nn",
        "import torch.nn.functional as F",
        "",
        "",
        "class Model(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        *(f"        {line}" for line in init_lines),
        "",
        f"    def forward(self, {args}):",
        *(f"        {line}" for line in forward),
        "        return x",
        "",
        "",
        "def get_inputs():",
        *(f"    {name} = {expr}" for name, expr in inputs),
        f"    return [{args}]",
        "",
        "",
        "def get_init_inputs():",
        "    return []",
        "",
    ]
    return "\n".join(body)


def _orders(specs: list[ApiSpec], rng: random.Random):
    """Distinct orders to try, scalar-output APIs last: all of them for small sets, a sample for big ones."""
    if len(specs) <= 5:
        candidates = [list(p) for p in itertools.permutations(specs)]
        rng.shuffle(candidates)
    else:
        candidates = [rng.sample(specs, len(specs)) for _ in range(_MAX_ORDERS)]
    seen: set[tuple[str, ...]] = set()
    for order in candidates[:_MAX_ORDERS]:
        order.sort(key=lambda s: s.terminal)
        key = tuple(s.name for s in order)
        if key not in seen:
            seen.add(key)
            yield order


def probe(source: str) -> str:
    """Run a module in this process twice (trusted, synthesizer-written code only); '' or why its output is useless."""
    import torch

    from kernelzero.kit.seeding import seed_generators

    def run(seed: int):
        namespace: dict = {}
        exec(compile(source, "<synthesized>", "exec"), namespace)
        seed_generators(seed)
        model = namespace["Model"](*namespace["get_init_inputs"]())
        with torch.no_grad():
            return model(*namespace["get_inputs"]())

    first, second = run(0), run(1)
    if not bool(torch.isfinite(first).all()):
        return "non_finite"
    if first.numel() > 1 and bool((first == first.reshape(-1)[0]).all()):
        return "constant_output"
    if first.numel() == 1 and bool(torch.equal(first, second)):
        return "constant_output"
    return ""


def synthesize(apis: Sequence[str], seed: int = 0, scale: float = 1.0, check: bool = True) -> Synthesized:
    """A module calling every API in `apis` (catalog names); raises SynthesisError when none fits.

    With `check`, each candidate order is first written at a tiny probe scale and run (`probe`);
    orders whose output is non-finite or constant there are skipped.
    """
    if not apis:
        raise SynthesisError("empty API set")
    if len(set(apis)) != len(apis):
        raise SynthesisError(f"API set has repeats: {list(apis)}")
    specs = [get(name) for name in apis]
    limits = Limits.at_scale(scale)
    probe_limits = Limits.at_scale(min(scale, _PROBE_SCALE))
    key = f"{seed}|{'|'.join(apis)}"
    failures: list[str] = []
    for order in _orders(specs, random.Random(key)):
        order_key = f"{key}|{'|'.join(s.name for s in order)}"
        try:
            if check:
                p_start, p_steps, _ = _search_sizes(_Planner(order, probe_limits, random.Random(order_key)), probe_limits)
                verdict = probe(_render(p_start, p_steps))
                if verdict:
                    failures.append(verdict)
                    continue
            start, steps, biggest = _search_sizes(_Planner(order, limits, random.Random(order_key)), limits)
        except (_TooSmall, _TooBig, _BadOrder):
            continue
        source = _render(start, steps)
        return Synthesized(source=source, apis=list(apis), seed=seed, scale=scale, input_shape=start,
                           output_shape=steps[-1].out_shape, max_numel=biggest)
    why = f" (probe: {', '.join(sorted(set(failures)))})" if failures else ""
    raise SynthesisError(f"no shape-correct order of {list(apis)} fits scale {scale:g}{why}")
