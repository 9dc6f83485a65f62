"""The Coder teacher's op subset: each torch op it lowers, its kind, its parameters and the Triton lines it becomes; it does not prove a template right (the evaluator tests do).

Kinds:
- MAP: elementwise, any broadcasting among operands (one value per element);
- REDUCE: a row of the input becomes one value (sum, softmax's statistics, losses, ...);
- SCAN: a row of the input becomes a row of the same length that needs the whole row (softmax, layer_norm);
- GLUE: flat-order-preserving views (reshape, flatten, contiguous): no kernel work, an alias line;
- LAYOUT: data movement the host does before or after the kernel (transpose, cat, slicing);
- TORCH: kept in torch, allowed beside a custom kernel (matmul, linear, convolution).

Templates are Python format strings of Triton code: `{o}` is the op's own value name, `{o}a`,
`{o}b`, ... its temporaries, other fields are its bound parameters (operand names or literals);
`mask`, `cols` and `n_cols` are the kernel's row variables, `{at}` the index the value lives at.
Lines are `name = expression`; the last one defines `{o}`.
"""

from __future__ import annotations

import ast
from typing import NamedTuple

MAP, REDUCE, SCAN, GLUE, LAYOUT, TORCH = "map", "reduce", "scan", "glue", "layout", "torch"
REQUIRED = object()


class Op(NamedTuple):
    kind: str
    params: tuple[tuple[str, object], ...]
    lines: tuple[str, ...] = ()
    rows: tuple[str, ...] = ("input",)  # operands read as whole rows (REDUCE and SCAN)
    span: str = ""  # the row of a REDUCE or SCAN: "dim" parameter, "all", "last", "norm", "spatial", "groups"
    positional: bool = False  # reads its own element's index, `{at}` (offs or row): needs an unbroadcast value


def signature(text: str) -> tuple[tuple[str, object], ...]:
    """("input", REQUIRED), ("dim", None), ... from "input, dim=None"."""
    params = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, _, default = part.partition("=")
        params.append((name, ast.literal_eval(default) if default else REQUIRED))
    return tuple(params)


def _map(sig: str, *lines: str) -> Op:
    return Op(MAP, signature(sig), _own(lines))


def _reduce(sig: str, *lines: str, rows: tuple[str, ...] = ("input",), span: str = "dim") -> Op:
    return Op(REDUCE, signature(sig), _own(lines), rows, span)


def _scan(sig: str, *lines: str, span: str = "dim") -> Op:
    return Op(SCAN, signature(sig), _own(lines), ("input",), span)


def _own(lines: tuple[str, ...]) -> tuple[str, ...]:
    """Templates without a target assign the op's own value."""
    return tuple(line if " = " in line.split("(")[0] else f"{{o}} = {line}" for line in lines)


def _atan(arg: str, out: str) -> tuple[str, ...]:
    """Cephes' single-precision arctangent of `arg` into `out`: reduced to |x| <= tan(pi/8), odd polynomial."""
    return (
        f"{{o}}a = tl.abs({arg})",
        "{o}b = tl.where({o}a > 2.414213562373095, -1.0 / {o}a, tl.where({o}a > 0.41421356237309503, "
        "({o}a - 1.0) / ({o}a + 1.0), {o}a))",
        "{o}c = {o}b * {o}b",
        "{o}d = tl.where({o}a > 2.414213562373095, 1.5707963267948966, tl.where({o}a > 0.41421356237309503, "
        "0.7853981633974483, 0.0)) + (((0.0805374449538 * {o}c - 0.138776856032) * {o}c + 0.199777106478) * {o}c "
        "- 0.333329491539) * {o}c * {o}b + {o}b",
        f"{out} = tl.where({arg} < 0.0, -{{o}}d, {{o}}d)",
    )


def _loss(*lines: str, rows: tuple[str, ...] = ("input", "target"), extra: str = "") -> Op:
    sig = f"{', '.join(rows)}, {extra + ', ' if extra else ''}size_average=None, reduce=None, reduction='mean'"
    return _reduce(sig, *lines, rows=rows, span="all")


SUM = "tl.sum(tl.where(mask, {}, 0.0), axis=0)"
# tanh via the sigmoid loses relative precision near 0, where its Taylor series takes over
TANH = ("tl.where(tl.abs({0}) < 0.0625, {0} - {0} * {0} * {0} * (0.3333333333333333 - 0.13333333333333333 "
        "* {0} * {0}), 2.0 * tl.sigmoid(2.0 * {0}) - 1.0)")
# exp(x) - 1 cancels near 0; Kahan's (u - 1) * x / log(u) with u = exp(x) keeps the relative precision there
EXPM1 = "tl.where(tl.abs({1}) < 0.5, tl.where({0} == 1.0, {1}, ({0} - 1.0) * {1} / tl.log({0})), {0} - 1.0)"
SOFTPLUS = "tl.where({0} > 20.0, {0}, tl.log(1.0 + tl.exp({0})))"
TRUNC = "tl.where({0} < 0.0, tl.ceil({0}), tl.floor({0}))"
MEAN_OF = SUM + " / n_cols"
# The row less its maximum (softmax and its kin) is taken from the masked row, not from the op's input: on a GPU,
# Triton fuses a product into the subtraction (one FMA, the product unrounded), so where x * x reached 1e10 the
# maximum's own entry came out thousands from 0, its exp 0 or inf, and log-softmax inf on the evaluator's inputs
# scaled by 1e5 (an H100, docs/BENCHMARKS.md); the select between them leaves nothing to fuse
ROW_OR_LOWEST = "tl.where(mask, {input}, float('-inf'))"
LOG1P_EXP_NEG_ABS = "tl.log(1.0 + tl.exp(-tl.abs({})))"
UNARY = "input"
BINARY = "input, other"

OPS: dict[str, Op] = {
    # elementwise, unary
    "abs": _map(UNARY, "tl.abs({input})"),
    "neg": _map(UNARY, "-{input}"),
    "exp": _map(UNARY, "tl.exp({input})"),
    "exp2": _map(UNARY, "tl.exp2({input})"),
    "expm1": _map(UNARY, "{o}a = tl.exp({input})", EXPM1.format("{o}a", "{input}")),
    "log": _map(UNARY, "tl.log({input})"),
    "log2": _map(UNARY, "tl.log2({input})"),
    "log10": _map(UNARY, "tl.log({input}) * 0.4342944819032518"),
    "log1p": _map(UNARY, "tl.log(1.0 + {input})"),
    "sqrt": _map(UNARY, "tl.sqrt({input})"),
    "rsqrt": _map(UNARY, "tl.rsqrt({input})"),
    "reciprocal": _map(UNARY, "1.0 / {input}"),
    "square": _map(UNARY, "{input} * {input}"),
    "sin": _map(UNARY, "tl.sin({input})"),
    "cos": _map(UNARY, "tl.cos({input})"),
    "tan": _map(UNARY, "tl.sin({input}) / tl.cos({input})"),
    "sinh": _map(UNARY, "0.5 * (tl.exp({input}) - tl.exp(-{input}))"),
    "cosh": _map(UNARY, "0.5 * (tl.exp({input}) + tl.exp(-{input}))"),
    "asinh": _map(UNARY, "{o}a = tl.abs({input})",
                  "tl.where({input} < 0.0, -1.0, 1.0) * tl.log({o}a + tl.sqrt({o}a * {o}a + 1.0))"),
    "acosh": _map(UNARY, "tl.log({input} + tl.sqrt(({input} - 1.0) * ({input} + 1.0)))"),
    "atanh": _map(UNARY, "0.5 * tl.log((1.0 + {input}) / (1.0 - {input}))"),
    "logit": _map("input, eps=None", "tl.log({input} / (1.0 - {input}))"),
    "atan": _map(UNARY, *_atan("{input}", "{o}")),
    "asin": _map(UNARY, "{o}e = {input} / tl.sqrt(1.0 - {input} * {input})", *_atan("{o}e", "{o}")),
    "acos": _map(UNARY, "{o}e = {input} / tl.sqrt(1.0 - {input} * {input})", *_atan("{o}e", "{o}f"),
                 "1.5707963267948966 - {o}f"),
    "atan2": _map(BINARY, "{o}e = {input} / {other}", *_atan("{o}e", "{o}f"),
                  "tl.where({other} > 0.0, {o}f, tl.where({other} < 0.0, {o}f + tl.where({input} >= 0.0, "
                  "3.141592653589793, -3.141592653589793), tl.where({input} > 0.0, 1.5707963267948966, "
                  "tl.where({input} < 0.0, -1.5707963267948966, 0.0))))"),
    "erf": _map(UNARY, "tl.erf({input})"),
    "erfc": _map(UNARY, "1.0 - tl.erf({input})"),
    "sign": _map(UNARY, "tl.where({input} > 0.0, 1.0, tl.where({input} < 0.0, -1.0, 0.0))"),
    "floor": _map(UNARY, "tl.floor({input})"),
    "ceil": _map(UNARY, "tl.ceil({input})"),
    "trunc": _map(UNARY, TRUNC.format("{input}")),
    "frac": _map(UNARY, "{input} - " + TRUNC.format("{input}")),
    "round": _map("input, decimals=0", "{o}a = tl.floor({input})", "{o}b = {input} - {o}a",
                  "{o}a + tl.where({o}b > 0.5, 1.0, tl.where({o}b < 0.5, 0.0, "
                  "2.0 * ({o}a * 0.5 - tl.floor({o}a * 0.5))))"),
    "deg2rad": _map(UNARY, "{input} * 0.017453292519943295"),
    "rad2deg": _map(UNARY, "{input} * 57.29577951308232"),
    "nan_to_num": _map("input, nan=0.0, posinf=None, neginf=None",
                       "tl.where({input} != {input}, 0.0, "
                       "tl.minimum(tl.maximum({input}, -3.4028234663852886e+38), 3.4028234663852886e+38))"),
    "sinc": _map(UNARY, "{o}a = 3.141592653589793 * {input}",
                 "tl.where({input} == 0.0, 1.0, tl.sin({o}a) / {o}a)"),
    "clamp": _map("input, min=None, max=None", "tl.minimum(tl.maximum({input}, {min}), {max})"),
    "clamp_min": _map("input, min", "tl.maximum({input}, {min})"),
    "clamp_max": _map("input, max", "tl.minimum({input}, {max})"),
    "pow_int": _map("input, exponent", "{input}"),  # the resolver writes the product
    "pow": _map("input, exponent", "tl.exp2({exponent} * tl.log2({input}))"),
    "pow_scalar_base": _map("input, exponent", "tl.exp2({exponent} * {log2_base})"),
    "pow_tensor": _map("input, exponent", "{o}a = tl.exp2({exponent} * tl.log2(tl.abs({input})))",
                       "tl.where({input} < 0.0, tl.where({exponent} == tl.floor({exponent}), tl.where({exponent} * 0.5 "
                       "== tl.floor({exponent} * 0.5), {o}a, -{o}a), float('nan')), {o}a)"),
    "float": _map(UNARY, "{input}.to(tl.float32)"),
    # activations
    "relu": _map("input, inplace=False", "tl.maximum({input}, 0.0)"),
    "relu6": _map("input, inplace=False", "tl.minimum(tl.maximum({input}, 0.0), 6.0)"),
    "sigmoid": _map(UNARY, "tl.sigmoid({input})"),
    "tanh": _map(UNARY, TANH.format("{input}")),
    "silu": _map("input, inplace=False", "{input} * tl.sigmoid({input})"),
    "gelu": _map("input, approximate='none'", "0.5 * {input} * (1.0 + tl.erf({input} * 0.7071067811865476))"),
    "gelu_tanh": _map("input, approximate='tanh'",
                      "{input} * tl.sigmoid(1.5957691216057308 * ({input} + 0.044715 * {input} * {input} * {input}))"),
    "softplus": _map("input, beta=1.0, threshold=20.0", SOFTPLUS.format("{input}")),
    "softplus_beta": _map("input, beta=1.0, threshold=20.0",
                          "tl.where({input} * {beta} > {threshold}, {input}, "
                          "tl.log(1.0 + tl.exp({input} * {beta})) / {beta})"),
    "mish": _map("input, inplace=False", "{o}a = " + SOFTPLUS.format("{input}"), "{input} * " + TANH.format("{o}a")),
    "softsign": _map(UNARY, "{input} / (1.0 + tl.abs({input}))"),
    "elu": _map("input, alpha=1.0, inplace=False", "{o}a = tl.exp({input})",
                "tl.where({input} > 0.0, {input}, {alpha} * " + EXPM1.format("{o}a", "{input}") + ")"),
    "selu": _map("input, inplace=False", "{o}a = tl.exp({input})",
                 "1.0507009873554805 * tl.where({input} > 0.0, {input}, 1.6732632423543772 * "
                 + EXPM1.format("{o}a", "{input}") + ")"),
    "celu": _map("input, alpha=1.0, inplace=False", "{o}a = {input} / {alpha}", "{o}b = tl.exp({o}a)",
                 "tl.where({input} > 0.0, {input}, {alpha} * " + EXPM1.format("{o}b", "{o}a") + ")"),
    "leaky_relu": _map("input, negative_slope=0.01, inplace=False",
                       "tl.where({input} > 0.0, {input}, {input} * {negative_slope})"),
    "rrelu": _map("input, lower=0.125, upper=0.3333333333333333, training=False, inplace=False",
                  "tl.where({input} > 0.0, {input}, {input} * {slope})"),
    "prelu": _map("input, weight", "tl.where({input} > 0.0, {input}, {weight} * {input})"),
    "hardtanh": _map("input, min_val=-1.0, max_val=1.0, inplace=False",
                     "tl.minimum(tl.maximum({input}, {min_val}), {max_val})"),
    "hardsigmoid": _map("input, inplace=False", "tl.minimum(tl.maximum({input} / 6.0 + 0.5, 0.0), 1.0)"),
    "hardswish": _map("input, inplace=False", "{input} * tl.minimum(tl.maximum({input} + 3.0, 0.0), 6.0) / 6.0"),
    "logsigmoid": _map(UNARY, "tl.minimum({input}, 0.0) - " + LOG1P_EXP_NEG_ABS.format("{input}")),
    "tanhshrink": _map(UNARY, "{input} - " + TANH.format("{input}")),
    "softshrink": _map("input, lambd=0.5",
                       "tl.where({input} > {lambd}, {input} - {lambd}, "
                       "tl.where({input} < -{lambd}, {input} + {lambd}, 0.0))"),
    "hardshrink": _map("input, lambd=0.5", "tl.where(tl.abs({input}) > {lambd}, {input}, 0.0)"),
    "threshold": _map("input, threshold, value, inplace=False", "tl.where({input} > {threshold}, {input}, {value})"),
    # elementwise, binary and ternary
    "add": _map("input, other, alpha=1", "{input} + {other}"),
    "add_alpha": _map("input, other, alpha=1", "{input} + {alpha} * {other}"),
    "sub": _map("input, other, alpha=1", "{input} - {other}"),
    "sub_alpha": _map("input, other, alpha=1", "{input} - {alpha} * {other}"),
    "mul": _map(BINARY, "{input} * {other}"),
    "div": _map("input, other, rounding_mode=None", "{input} / {other}"),
    "floor_divide": _map(BINARY, "tl.floor({input} / {other})"),
    "trunc_divide": _map("input, other, rounding_mode=None", "{o}a = {input} / {other}", TRUNC.format("{o}a")),
    "fmod": _map(BINARY, "{o}a = {input} / {other}", "{input} - " + TRUNC.format("{o}a") + " * {other}"),
    "remainder": _map(BINARY, "{input} - tl.floor({input} / {other}) * {other}"),
    "maximum": _map(BINARY, "tl.maximum({input}, {other})"),
    "minimum": _map(BINARY, "tl.minimum({input}, {other})"),
    "hypot": _map(BINARY, "tl.sqrt({input} * {input} + {other} * {other})"),
    "logaddexp": _map(BINARY, "{o}a = tl.maximum({input}, {other})",
                      "{o}a + tl.log(1.0 + tl.exp(-tl.abs({input} - {other})))"),
    "logaddexp2": _map(BINARY, "{o}a = tl.maximum({input}, {other})",
                       "{o}a + tl.log2(1.0 + tl.exp2(-tl.abs({input} - {other})))"),
    "copysign": _map(BINARY, "tl.where({other} < 0.0, -tl.abs({input}), tl.abs({input}))"),
    "xlogy": _map(BINARY, "tl.where({input} == 0.0, 0.0, {input} * tl.log({other}))"),
    "heaviside": _map("input, values", "tl.where({input} > 0.0, 1.0, tl.where({input} == 0.0, {values}, 0.0))"),
    "lerp": _map("input, end, weight", "{input} + {weight} * ({end} - {input})"),
    "addcmul": _map("input, tensor1, tensor2, value=1", "{input} + {value} * {tensor1} * {tensor2}"),
    "addcdiv": _map("input, tensor1, tensor2, value=1", "{input} + {value} * {tensor1} / {tensor2}"),
    "gt": _map(BINARY, "{input} > {other}"),
    "ge": _map(BINARY, "{input} >= {other}"),
    "lt": _map(BINARY, "{input} < {other}"),
    "le": _map(BINARY, "{input} <= {other}"),
    "eq": _map(BINARY, "{input} == {other}"),
    "ne": _map(BINARY, "{input} != {other}"),
    "where": _map("condition, input, other", "tl.where({condition}, {input}, {other})"),
    "masked_fill": _map("input, mask, value", "tl.where({mask}, {value}, {input})"),
    "expand": _map(UNARY, "{input}"),
    "triu": _map("input, diagonal=0", "tl.where({at} % {last} >= {diagonal} + ({at} // {last}) % {rows}, {input}, 0.0)")
    ._replace(positional=True),
    "tril": _map("input, diagonal=0", "tl.where({at} % {last} <= {diagonal} + ({at} // {last}) % {rows}, {input}, 0.0)")
    ._replace(positional=True),
    # reductions over rows
    "sum": _reduce("input, dim=None, keepdim=False, dtype=None", SUM.format("{input}")),
    "nansum": _reduce("input, dim=None, keepdim=False, dtype=None",
                      "tl.sum(tl.where(mask & ({input} == {input}), {input}, 0.0), axis=0)"),
    "mean": _reduce("input, dim=None, keepdim=False, dtype=None", MEAN_OF.format("{input}")),
    "nanmean": _reduce("input, dim=None, keepdim=False, dtype=None",
                       "{o}a = tl.where(mask & ({input} == {input}), 1.0, 0.0)",
                       "tl.sum(tl.where({o}a > 0.0, {input}, 0.0), axis=0) / tl.sum({o}a, axis=0)"),
    "prod": _reduce("input, dim=None, keepdim=False, dtype=None",
                    "{o}a = tl.sum(tl.where(mask & ({input} < 0.0), 1.0, 0.0), axis=0)",
                    "{o}b = tl.exp(" + SUM.format("tl.log(tl.abs({input}))") + ")",
                    "tl.where({o}a * 0.5 == tl.floor({o}a * 0.5), {o}b, -{o}b)"),
    "amax": _reduce("input, dim=None, keepdim=False", "tl.max(tl.where(mask, {input}, float('-inf')), axis=0)"),
    "amin": _reduce("input, dim=None, keepdim=False", "tl.min(tl.where(mask, {input}, float('inf')), axis=0)"),
    "argmax": _reduce("input, dim=None, keepdim=False",
                      "tl.argmax(tl.where(mask, {input}, float('-inf')), axis=0).to(tl.float32)"),
    "argmin": _reduce("input, dim=None, keepdim=False",
                      "tl.argmin(tl.where(mask, {input}, float('inf')), axis=0).to(tl.float32)"),
    "logsumexp": _reduce("input, dim, keepdim=False", "{o}m = " + ROW_OR_LOWEST, "{o}a = tl.max({o}m, axis=0)",
                         "{o}a + tl.log(" + SUM.format("tl.exp({o}m - {o}a)") + ")"),
    "var": _reduce("input, dim=None, unbiased=True, keepdim=False, correction=None",
                   "{o}a = " + MEAN_OF.format("{input}"), "{o}b = tl.where(mask, {input} - {o}a, 0.0)",
                   "tl.sum({o}b * {o}b, axis=0) / {count}"),
    "std": _reduce("input, dim=None, unbiased=True, keepdim=False, correction=None",
                   "{o}a = " + MEAN_OF.format("{input}"), "{o}b = tl.where(mask, {input} - {o}a, 0.0)",
                   "tl.sqrt(tl.sum({o}b * {o}b, axis=0) / {count})"),
    "norm": _reduce("input, p='fro', dim=None, keepdim=False, out=None, dtype=None",
                    "tl.sqrt(" + SUM.format("{input} * {input}") + ")"),
    "vector_norm": _reduce("input, ord=2, dim=None, keepdim=False, dtype=None",
                           "tl.sqrt(" + SUM.format("{input} * {input}") + ")"),
    "count_nonzero": _reduce("input, dim=None", "tl.sum(tl.where(mask & ({input} != 0), 1.0, 0.0), axis=0)"),
    "trapezoid": _reduce("input, dim=-1", "{o}a = " + SUM.format("{input}"),
                         "{o}a - 0.5 * tl.sum(tl.where((cols == 0) | (cols == n_cols - 1), {input}, 0.0), axis=0)",
                         span="dim"),
    "cosine_similarity": _reduce("x1, x2, dim=1, eps=1e-08",
                                 "{o}a = tl.maximum(tl.sqrt(" + SUM.format("{x1} * {x1}") + "), {eps})",
                                 "{o}b = tl.maximum(tl.sqrt(" + SUM.format("{x2} * {x2}") + "), {eps})",
                                 SUM.format("{x1} * {x2}") + " / ({o}a * {o}b)", rows=("x1", "x2")),
    "pairwise_distance": _reduce("x1, x2, p=2.0, eps=1e-06, keepdim=False", "{o}a = {x1} - {x2} + {eps}",
                                 "tl.sqrt(" + SUM.format("{o}a * {o}a") + ")", rows=("x1", "x2"), span="last"),
    # losses: the whole tensor is one row
    "mse_loss": _loss("{o}a = {input} - {target}", SUM.format("{o}a * {o}a") + " / {count}", extra="weight=None"),
    "l1_loss": _loss(SUM.format("tl.abs({input} - {target})") + " / {count}", extra="weight=None"),
    "smooth_l1_loss": _loss("{o}a = tl.abs({input} - {target})",
                            SUM.format("tl.where({o}a < {beta}, 0.5 * {o}a * {o}a / {beta}, {o}a - 0.5 * {beta})")
                            + " / {count}", extra="beta=1.0"),
    "huber_loss": _loss("{o}a = tl.abs({input} - {target})",
                        SUM.format("tl.where({o}a < {delta}, 0.5 * {o}a * {o}a, {delta} * ({o}a - 0.5 * {delta}))")
                        + " / {count}", extra="delta=1.0, weight=None"),
    "soft_margin_loss": _loss(SUM.format("tl.log(1.0 + tl.exp(-{target} * {input}))") + " / {count}"),
    "binary_cross_entropy": _loss("{o}a = tl.maximum(tl.log({input}), -100.0)",
                                  "{o}b = tl.maximum(tl.log(1.0 - {input}), -100.0)",
                                  "-" + SUM.format("{target} * {o}a + (1.0 - {target}) * {o}b") + " / {count}",
                                  extra="weight=None"),
    "binary_cross_entropy_with_logits": _loss(
        SUM.format("tl.maximum({input}, 0.0) - {input} * {target} + " + LOG1P_EXP_NEG_ABS.format("{input}"))
        + " / {count}", extra="weight=None, pos_weight=None"),
    "kl_div": _loss(SUM.format("tl.where({target} > 0.0, {target} * tl.log({target}), 0.0) - {target} * {input}")
                    + " / {count}", extra="log_target=False"),
    "poisson_nll_loss": _loss(SUM.format("tl.exp({input}) - {target} * {input}") + " / {count}",
                              extra="log_input=True, full=False, eps=1e-08"),
    "gaussian_nll_loss": _loss("{o}a = tl.maximum({var}, {eps})", "{o}b = {input} - {target}",
                               SUM.format("0.5 * (tl.log({o}a) + {o}b * {o}b / {o}a)") + " / {count}",
                               rows=("input", "target", "var"), extra="full=False, eps=1e-06"),
    "hinge_embedding_loss": _loss(
        SUM.format("tl.where({target} != 1.0, tl.maximum({margin} - {input}, 0.0), 0.0) + "
                   "tl.where({target} != -1.0, {input}, 0.0)") + " / {count}", extra="margin=1.0"),
    "margin_ranking_loss": _loss(
        SUM.format("tl.maximum(-{target} * ({input1} - {input2}) + {margin}, 0.0)") + " / {count}",
        rows=("input1", "input2", "target"), extra="margin=0.0"),
    "multilabel_soft_margin_loss": _loss(
        "{o}a = " + LOG1P_EXP_NEG_ABS.format("{input}"),
        "-" + SUM.format("{target} * (tl.minimum({input}, 0.0) - {o}a) + "
                         "(1.0 - {target}) * (tl.minimum(-{input}, 0.0) - {o}a)") + " / {count}",
        extra="weight=None"),
    # row to row
    "softmax": _scan("input, dim=None, _stacklevel=3, dtype=None", "{o}m = " + ROW_OR_LOWEST,
                     "{o}a = tl.max({o}m, axis=0)", "{o}b = tl.exp({o}m - {o}a)",
                     "{o}c = " + SUM.format("{o}b"), "{o}b / {o}c"),
    "softmin": _scan("input, dim=None, _stacklevel=3, dtype=None", "{o}m = tl.where(mask, {input}, float('inf'))",
                     "{o}a = tl.min({o}m, axis=0)", "{o}b = tl.exp({o}a - {o}m)",
                     "{o}c = " + SUM.format("{o}b"), "{o}b / {o}c"),
    "log_softmax": _scan("input, dim=None, _stacklevel=3, dtype=None", "{o}m = " + ROW_OR_LOWEST,
                         "{o}a = {o}m - tl.max({o}m, axis=0)",
                         "{o}a - tl.log(" + SUM.format("tl.exp({o}a)") + ")"),
    "layer_norm": _scan("input, normalized_shape, weight=None, bias=None, eps=1e-05",
                        "{o}a = " + MEAN_OF.format("{input}"), "{o}b = tl.where(mask, {input} - {o}a, 0.0)",
                        "{o}c = tl.sum({o}b * {o}b, axis=0) / n_cols", "{o}b * tl.rsqrt({o}c + {eps})",
                        span="norm"),
    "rms_norm": _scan("input, normalized_shape, weight=None, eps=None",
                      "{o}a = " + MEAN_OF.format("{input} * {input}"), "{input} * tl.rsqrt({o}a + {eps})",
                      span="norm"),
    "instance_norm": _scan("input, running_mean=None, running_var=None, weight=None, bias=None, use_input_stats=True, "
                           "momentum=0.1, eps=1e-05",
                           "{o}a = " + MEAN_OF.format("{input}"), "{o}b = tl.where(mask, {input} - {o}a, 0.0)",
                           "{o}c = tl.sum({o}b * {o}b, axis=0) / n_cols", "{o}b * tl.rsqrt({o}c + {eps})",
                           span="spatial"),
    "group_norm": _scan("input, num_groups, weight=None, bias=None, eps=1e-05",
                        "{o}a = " + MEAN_OF.format("{input}"), "{o}b = tl.where(mask, {input} - {o}a, 0.0)",
                        "{o}c = tl.sum({o}b * {o}b, axis=0) / n_cols", "{o}b * tl.rsqrt({o}c + {eps})",
                        span="groups"),
    "normalize": _scan("input, p=2.0, dim=1, eps=1e-12, out=None",
                       "{o}a = tl.sqrt(" + SUM.format("{input} * {input}") + ")", "{input} / tl.maximum({o}a, {eps})"),
    "cumsum": _scan("input, dim, dtype=None", "tl.cumsum({input}, axis=0)"),
    "cumprod": _scan("input, dim, dtype=None", "tl.cumprod({input}, axis=0)"),
    # no kernel work
    "alias": Op(GLUE, ()),
    "layout": Op(LAYOUT, ()),
    "torch": Op(TORCH, ()),
}

_OWN_NAMES = (
    "abs neg atan asin acos atan2 prod exp exp2 expm1 log log2 log10 log1p sqrt rsqrt reciprocal square sin cos tan "
    "sinh cosh asinh acosh "
    "atanh logit erf erfc sign floor ceil trunc frac round deg2rad rad2deg nan_to_num sinc clamp clamp_min clamp_max "
    "relu relu6 sigmoid tanh silu gelu softplus mish softsign elu selu celu leaky_relu rrelu prelu hardtanh "
    "hardsigmoid hardswish logsigmoid tanhshrink softshrink hardshrink threshold add sub mul div maximum minimum "
    "hypot logaddexp logaddexp2 copysign xlogy heaviside lerp addcmul addcdiv gt ge lt le eq ne where masked_fill "
    "triu tril sum nansum mean nanmean amax amin argmax argmin logsumexp var std norm vector_norm count_nonzero "
    "trapezoid cosine_similarity pairwise_distance mse_loss l1_loss smooth_l1_loss huber_loss "
    "soft_margin_loss binary_cross_entropy binary_cross_entropy_with_logits kl_div poisson_nll_loss gaussian_nll_loss "
    "hinge_embedding_loss margin_ranking_loss multilabel_soft_margin_loss softmax softmin log_softmax layer_norm "
    "rms_norm instance_norm group_norm normalize cumsum cumprod pow fmod remainder"
).split()
# a function or method name -> the op key it lowers as (same name unless listed)
ALIASES: dict[str, str] = {
    **{name: name for name in _OWN_NAMES},
    "absolute": "abs", "negative": "neg", "sgn": "sign", "clip": "clamp", "true_divide": "div", "divide": "div",
    "truediv": "div", "floordiv": "floor_divide", "floor_divide": "floor_divide", "multiply": "mul",
    "subtract": "sub", "fmax": "maximum", "fmin": "minimum", "greater": "gt", "less": "lt", "max": "max",
    "min": "min", "special_expm1": "expm1", "special_erf": "erf", "special_logit": "logit", "special_sinc": "sinc",
    "linalg_vector_norm": "vector_norm", "float": "float", "float32": "float",
    "reshape": "alias", "view": "alias", "flatten": "alias", "contiguous": "alias", "clone": "alias",
    "detach": "alias", "squeeze": "alias", "unsqueeze": "alias", "unflatten": "alias", "view_as": "alias",
    "reshape_as": "alias", "to": "alias",
    "expand": "expand", "expand_as": "expand", "broadcast_to": "expand",
    "transpose": "layout", "permute": "layout", "t": "layout", "swapaxes": "layout", "movedim": "layout",
    "cat": "layout", "concat": "layout", "concatenate": "layout", "stack": "layout", "narrow": "layout",
    "chunk": "layout", "split": "layout", "getitem": "layout", "pad": "layout", "unbind": "layout",
    "linear": "torch", "matmul": "torch", "mm": "torch", "bmm": "torch", "baddbmm": "torch", "addmm": "torch",
    "einsum": "torch", "tensordot": "torch", "inner": "torch", "multi_dot": "torch", "conv1d": "torch",
    "conv2d": "torch", "conv3d": "torch", "conv_transpose1d": "torch", "conv_transpose2d": "torch",
    "conv_transpose3d": "torch",
}
