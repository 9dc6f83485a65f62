"""The torch API catalog: each API's family, call template, input rank/size needs and output-shape rule; it does not check that torch still has the API (the synthesizer tests do).

An API is combined with others by the synthesizer: the current tensor is reshaped to the rank and
size limits the API asks for (`rank`, `caps`, `mins`), the API's call template is filled in, and
its `rule` says what shape comes out. All sizes stay powers of two, so any reshape between APIs is
exact. `traced` names what shows up in an op trace (function names and aten op names, without
namespace or overload) when the API really ran; the validator checks requested APIs against it.
"""

from __future__ import annotations

import math
from typing import Callable

import msgspec

Shape = tuple[int, ...]

FAMILIES: tuple[str, ...] = (
    "elementwise", "activation", "reduction", "normalization", "matmul",
    "convolution", "pooling", "indexing", "attention", "loss", "cumulative",
)

# Expressions that put any finite tensor into an API's input domain (`{x}` is the tensor).
DOMAINS: dict[str, str] = {
    "any": "{x}",
    "pos": "(F.softplus({x}) + 0.01)",  # log, sqrt, reciprocal, lgamma: monotone, so distinct values stay distinct
    "ge1": "(F.softplus({x}) + 1.0)",  # acosh
    "unit": "({x}.tanh() * 0.99)",  # asin, acos, atanh, erfinv: open interval (-1, 1)
    "unit01": "({x}.sigmoid() * 0.98 + 0.01)",  # logit, binary cross-entropy inputs
    "bounded": "(8.0 * torch.tanh({x} / 8.0))",  # exp, sinh, cosh: no overflow, and no clamping to a constant
    "near1": "(1.0 + 0.01 * {x}.tanh())",  # cumprod, prod: no underflow to zero or overflow
    "scaled": "({x} * 4.0)",  # floor, round, trunc: several distinct steps, not a constant
    "logprob": "F.log_softmax({x}, dim=-1)",  # nll_loss, kl_div inputs
}


class ApiSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str  # the public name, e.g. "torch.nn.functional.gelu"
    family: str
    call: str  # forward expression; fields: {x} input, {m} module attribute, {e0}.. extra inputs, shape values
    rule: str = "same"  # output shape rule, a key of RULES
    traced: tuple[str, ...] = ()  # op-trace names proving the call; default: the last name component
    rank: int | None = None  # exact input rank needed; None keeps the current shape (min_rank permitting)
    min_rank: int = 1
    caps: tuple[tuple[int, str], ...] = ()  # (dim, limit name): dim size at most that limit
    mins: tuple[tuple[int, int], ...] = ()  # (dim, size): dim size at least this
    domain: str = "any"
    init: str = ""  # nn.Module or Parameter expression for __init__, stored as {m}
    extras: tuple[str, ...] = ()  # extra forward inputs, kinds of EXTRA_KINDS
    terminal: bool = False  # output is a scalar: applied last, or folded in as x = x + value
    needs: str = ""  # input value class it needs to give a non-constant output: see VALUE_CLASSES
    out: str = "other"  # value class of the output: "signed", "ties", "perm", "other", or "keep" (the input's)
    note: str = ""  # shape hint shown to the LLM proposer

    def trace_names(self) -> tuple[str, ...]:
        return self.traced or (self.name.split("[")[0].rsplit(".", 1)[-1].lower(),)


class Limits(msgspec.Struct, frozen=True):
    """Size limits at a problem scale: scale 1 is GPU-sized (~2**26 elements), tests use ~2**-13."""

    numel: int
    feature: int  # matmul inner dimension (weights are feature x feature)
    channel: int  # convolution channels
    seq: int  # attention sequence length
    head: int  # attention head dimension
    reduce: int  # length of a reduced or scanned dimension
    small: int  # bilinear / einsum-with-3-operands features

    @classmethod
    def at_scale(cls, scale: float) -> "Limits":
        if not 0 < scale <= 4:
            raise ValueError(f"scale must be in (0, 4], got {scale}")
        s = math.log2(scale)

        def p2(exponent: float, lo: int, hi: int) -> int:
            return 1 << max(lo, min(hi, round(exponent)))

        return cls(
            numel=p2(26 + s, 9, 27),
            feature=p2(12 + s / 2, 4, 12),
            channel=p2(6 + s / 3, 2, 6),
            seq=p2(10 + s / 2, 3, 10),
            head=p2(6 + s / 4, 3, 6),
            reduce=p2(12 + s / 2, 3, 12),
            small=p2(7 + s / 4, 3, 7),
        )


# ---- output-shape rules: input shape -> (output shape, extra template values) ----

def _same(s: Shape) -> tuple[Shape, dict]:
    return s, {}


def _last_x2(s: Shape) -> tuple[Shape, dict]:
    return s[:-1] + (2 * s[-1],), {}


def _last_half(s: Shape) -> tuple[Shape, dict]:
    return s[:-1] + (s[-1] // 2,), {}


def _drop_last(s: Shape) -> tuple[Shape, dict]:
    return s[:-1], {}


def _keep_last(s: Shape) -> tuple[Shape, dict]:
    return s[:-1] + (1,), {}


def _scalar(s: Shape) -> tuple[Shape, dict]:
    return (), {}


def _drop_first(s: Shape) -> tuple[Shape, dict]:
    return s[1:], {}


def _stack(s: Shape) -> tuple[Shape, dict]:
    return (2,) + s, {}


def _swap_last(s: Shape) -> tuple[Shape, dict]:
    return s[:-2] + (s[-1], s[-2]), {}


def _reverse(s: Shape) -> tuple[Shape, dict]:
    return tuple(reversed(s)), {"perm": ", ".join(str(i) for i in reversed(range(len(s))))}


def _spatial_half(s: Shape) -> tuple[Shape, dict]:
    return s[:2] + tuple(d // 2 for d in s[2:]), {"out_sp": ", ".join(str(d // 2) for d in s[2:])}


def _spatial_x2(s: Shape) -> tuple[Shape, dict]:
    return s[:2] + tuple(2 * d for d in s[2:]), {}


def _conv_transpose(s: Shape) -> tuple[Shape, dict]:
    grow = 2 ** (len(s) - 2)
    c_out = max(1, s[1] // grow)  # keep the element count when channels allow
    return (s[0], c_out) + tuple(2 * d for d in s[2:]), {"c_out": c_out}


def _pixel_shuffle(s: Shape) -> tuple[Shape, dict]:
    n, c, h, w = s
    return (n, c // 4, 2 * h, 2 * w), {}


def _pixel_unshuffle(s: Shape) -> tuple[Shape, dict]:
    n, c, h, w = s
    return (n, 4 * c, h // 2, w // 2), {}


def _unfold(s: Shape) -> tuple[Shape, dict]:
    n, c, h, w = s
    return (n, 4 * c, h * w // 4), {}


def _fold(s: Shape) -> tuple[Shape, dict]:
    n, c4, blocks = s
    a = 1 << (int(math.log2(blocks)) // 2)
    b = blocks // a
    return (n, c4 // 4, 2 * a, 2 * b), {"fold_h": 2 * a, "fold_w": 2 * b}


def _square_rows(s: Shape) -> tuple[Shape, dict]:
    return s[:-1] + (s[-2],), {}


RULES: dict[str, Callable[[Shape], tuple[Shape, dict]]] = {
    "same": _same, "last_x2": _last_x2, "last_half": _last_half, "drop_last": _drop_last,
    "keep_last": _keep_last, "scalar": _scalar, "drop_first": _drop_first, "stack": _stack,
    "swap_last": _swap_last, "reverse": _reverse, "spatial_half": _spatial_half,
    "spatial_x2": _spatial_x2, "conv_transpose": _conv_transpose, "pixel_shuffle": _pixel_shuffle,
    "pixel_unshuffle": _pixel_unshuffle, "unfold": _unfold, "fold": _fold, "square_rows": _square_rows,
}

# Extra forward inputs: kind -> get_inputs expression ({shape} is the op's input shape as a tuple,
# {last} its last dim, {lead} all dims but the last, {numel}, {n0} the first dim, {c} dim 1).
EXTRA_KINDS: dict[str, str] = {
    "like": "torch.randn({shape})",
    "rand": "torch.rand({shape})",
    "pos": "torch.rand({shape}) + 0.1",
    "sign": "torch.randint(0, 2, {shape}).float() * 2 - 1",
    "idx_last": "torch.randint(0, {last}, {shape})",
    "perm_last": "torch.argsort(torch.rand({shape}), dim=-1)",
    "idx_vec": "torch.randint(0, {last}, ({last},))",
    "perm_vec": "torch.randperm({last})",
    "half_vec": "torch.randperm({last})[:{last} // 2]",
    "idx_lead": "torch.randint(0, 1024, {lead})",
    "cls_lead": "torch.randint(0, {last}, {lead})",
    "flat_idx": "torch.randint(0, {numel}, {shape})",
    "cls_n0": "torch.randint(0, {c}, ({n0},))",
    "multihot": "torch.randint(0, 2, {shape}).float()",
    "square_last": "torch.randn({n0}, {last}, {last}) / {last} ** 0.5",
    "perm_lead0": "torch.randperm({n0})",
    "sign_n0": "torch.randint(0, 2, ({n0},)).float() * 2 - 1",
}


def _spec(name: str, family: str, call: str, **kw) -> ApiSpec:
    return ApiSpec(name=name, family=family, call=call, **kw)


def _unary(fn: str, domain: str = "any", family: str = "elementwise", traced: tuple[str, ...] = ()) -> ApiSpec:
    return _spec(f"torch.{fn}", family, f"torch.{fn}({{x}})", domain=domain, traced=traced)


def _functional(fn: str, family: str, args: str = "", **kw) -> ApiSpec:
    call = f"F.{fn}({{x}}{', ' + args if args else ''})"
    return _spec(f"torch.nn.functional.{fn}", family, call, **kw)


def _binary(fn: str, extra: str = "like", y: str = "{e0}", domain: str = "any", args: str = "") -> ApiSpec:
    call = f"torch.{fn}({{x}}, {y}{', ' + args if args else ''})"
    return _spec(f"torch.{fn}", "elementwise", call, extras=(extra,), domain=domain)


def _reduction(fn: str, call: str, rule: str = "drop_last", domain: str = "any", traced: tuple[str, ...] = ()) -> ApiSpec:
    return _spec(f"torch.{fn}", "reduction", call, rule=rule, min_rank=2, caps=((-1, "reduce"),),
                 mins=((-1, 2),), domain=domain, traced=traced)


def _build() -> list[ApiSpec]:
    specs: list[ApiSpec] = []
    add = specs.append

    # elementwise, unary
    for fn in ("abs", "neg", "sin", "cos", "atan", "asinh", "erf", "erfc", "sign", "square", "sgn",
               "deg2rad", "rad2deg", "nan_to_num", "sinc", "expm1", "frac"):
        add(_unary(fn, "bounded" if fn == "expm1" else "any"))
    for fn in ("exp", "exp2", "sinh", "cosh"):
        add(_unary(fn, "bounded"))
    for fn in ("log", "log1p", "log2", "log10", "sqrt", "rsqrt", "reciprocal", "lgamma", "digamma"):
        add(_unary(fn, "pos"))
    add(_unary("acosh", "ge1"))
    for fn in ("asin", "acos", "atanh", "erfinv", "tan"):
        add(_unary(fn, "unit"))
    add(_unary("logit", "unit01"))
    for fn in ("floor", "ceil", "round", "trunc"):
        add(_unary(fn, "scaled"))
    add(_spec("torch.clamp", "elementwise", "torch.clamp({x}, -0.5, 0.5)"))
    add(_spec("torch.special.i0", "elementwise", "torch.special.i0({x})", domain="bounded", traced=("special_i0", "i0")))
    # elementwise, binary and ternary
    for fn in ("add", "sub", "mul", "maximum", "minimum", "fmax", "fmin", "atan2", "hypot", "logaddexp",
               "logaddexp2", "copysign"):
        add(_binary(fn))
    add(_binary("div", "pos"))
    add(_binary("true_divide", "pos"))
    add(_binary("floor_divide", "pos"))
    add(_binary("fmod", "pos"))
    add(_binary("remainder", "pos"))
    add(_binary("xlogy", "pos"))
    add(_binary("pow", "like", y="{e0}.clamp(-2.0, 2.0)", domain="pos"))
    add(_binary("heaviside", "like"))
    add(_binary("lerp", "like", args="0.3"))
    add(_spec("torch.addcmul", "elementwise", "torch.addcmul({x}, {e0}, {e1}, value=0.5)", extras=("like", "like")))
    add(_spec("torch.addcdiv", "elementwise", "torch.addcdiv({x}, {e0}, {e1}, value=0.5)", extras=("like", "pos")))
    add(_spec("torch.where", "elementwise", "torch.where({e0} > 0, {x}, {x} * 0.5)", extras=("like",)))

    # activations
    for fn, args in (("relu", ""), ("relu6", ""), ("leaky_relu", "0.1"), ("elu", ""), ("selu", ""),
                     ("celu", ""), ("gelu", ""), ("silu", ""), ("mish", ""), ("softplus", ""),
                     ("softsign", ""), ("hardtanh", ""), ("hardsigmoid", ""), ("hardswish", ""),
                     ("logsigmoid", ""), ("tanhshrink", ""), ("softshrink", "0.5"), ("hardshrink", "0.5"),
                     ("threshold", "0.1, 0.0"), ("rrelu", "training=False")):
        add(_functional(fn, "activation", args, traced=("log_sigmoid_forward", "log_sigmoid") if fn == "logsigmoid" else ()))
    add(_unary("relu", family="activation"))
    add(_unary("sigmoid", family="activation"))
    add(_unary("tanh", family="activation"))
    add(_spec("torch.nn.functional.gelu[tanh]", "activation", "F.gelu({x}, approximate='tanh')", traced=("gelu",)))
    for fn in ("softmax", "log_softmax", "softmin"):
        add(_functional(fn, "activation", "dim=-1", caps=((-1, "reduce"),),
                        traced=("softmin", "softmax") if fn == "softmin" else ()))
    add(_functional("glu", "activation", "dim=-1", rule="last_half", mins=((-1, 2),)))
    add(_spec("torch.nn.PReLU", "activation", "self.{m}({x})", init="nn.PReLU()", traced=("prelu", "_prelu_kernel")))
    add(_spec("torch.nn.ReLU", "activation", "self.{m}({x})", init="nn.ReLU()", traced=("relu",)))
    add(_spec("torch.nn.GELU", "activation", "self.{m}({x})", init="nn.GELU()", traced=("gelu",)))
    add(_spec("torch.nn.SiLU", "activation", "self.{m}({x})", init="nn.SiLU()", traced=("silu",)))

    # reductions over the last dimension
    for fn in ("sum", "mean", "amax", "amin", "logsumexp", "nansum", "nanmean"):
        add(_reduction(fn, f"torch.{fn}({{x}}, dim=-1)"))
    add(_reduction("prod", "torch.prod({x}, dim=-1)", domain="near1"))
    add(_reduction("std", "torch.std({x}, dim=-1)"))
    add(_reduction("var", "torch.var({x}, dim=-1)"))
    add(_reduction("max", "torch.max({x}, dim=-1).values"))
    add(_reduction("min", "torch.min({x}, dim=-1).values"))
    add(_reduction("median", "torch.median({x}, dim=-1).values"))
    add(_reduction("kthvalue", "torch.kthvalue({x}, 2, dim=-1).values"))
    add(_reduction("argmax", "torch.argmax({x}, dim=-1).float()"))
    add(_reduction("argmin", "torch.argmin({x}, dim=-1).float()"))
    add(_reduction("norm", "torch.norm({x}, dim=-1)", traced=("norm", "linalg_vector_norm")))
    add(_reduction("linalg.vector_norm", "torch.linalg.vector_norm({x}, ord=2, dim=-1)", traced=("linalg_vector_norm",)))
    add(_reduction("count_nonzero", "torch.count_nonzero({x} > 0, dim=-1).float()"))
    add(_reduction("mean[keepdim]", "{x} - torch.mean({x}, dim=-1, keepdim=True)", rule="same", traced=("mean",)))
    add(_reduction("topk", "torch.topk({x}, {half}, dim=-1).values", rule="last_half", traced=("topk",)))
    add(_reduction("sort", "torch.sort({x}, dim=-1).values", rule="same"))
    add(_reduction("argsort", "torch.argsort({x}, dim=-1).float()", rule="same", traced=("argsort", "sort")))
    add(_spec("torch.sum[all]", "reduction", "torch.sum({x})", rule="scalar", terminal=True, traced=("sum",)))
    add(_spec("torch.mean[all]", "reduction", "torch.mean({x})", rule="scalar", terminal=True, traced=("mean",)))
    add(_spec("torch.nn.functional.cosine_similarity", "reduction", "F.cosine_similarity({x}, {e0}, dim=-1)",
              rule="drop_last", min_rank=2, caps=((-1, "reduce"),), extras=("like",)))
    add(_spec("torch.nn.functional.pairwise_distance", "reduction", "F.pairwise_distance({x}, {e0})",
              rule="drop_last", min_rank=2, caps=((-1, "reduce"),), extras=("like",), traced=("pairwise_distance", "norm")))

    # normalization
    add(_spec("torch.nn.LayerNorm", "normalization", "self.{m}({x})", init="nn.LayerNorm({last})",
              min_rank=2, traced=("layer_norm",)))
    add(_functional("layer_norm", "normalization", "({last},)", min_rank=2))
    add(_spec("torch.nn.RMSNorm", "normalization", "self.{m}({x})", init="nn.RMSNorm({last})",
              min_rank=2, traced=("rms_norm",)))
    for d in (1, 2, 3):
        add(_spec(f"torch.nn.BatchNorm{d}d", "normalization", "self.{m}({x})", init=f"nn.BatchNorm{d}d({{c}})",
                  rank=d + 2, caps=((1, "channel"),), mins=((0, 2),), traced=("batch_norm",)))
        add(_spec(f"torch.nn.InstanceNorm{d}d", "normalization", "self.{m}({x})", init=f"nn.InstanceNorm{d}d({{c}})",
                  rank=d + 2, caps=((1, "channel"),), mins=tuple((i, 2) for i in range(2, d + 2)),
                  traced=("instance_norm",)))
    add(_spec("torch.nn.GroupNorm", "normalization", "self.{m}({x})", init="nn.GroupNorm(2, {c})",
              rank=4, caps=((1, "channel"),), mins=((1, 2),), traced=("group_norm",)))
    add(_functional("normalize", "normalization", "dim=-1", min_rank=2))
    add(_spec("torch.nn.LocalResponseNorm", "normalization", "self.{m}({x})", init="nn.LocalResponseNorm(2)",
              rank=4, caps=((1, "channel"),), traced=("local_response_norm",)))
    add(_functional("batch_norm", "normalization", "None, None, training=True", rank=3,
                    caps=((1, "channel"),), mins=((0, 2),)))
    add(_functional("instance_norm", "normalization", "", rank=4, caps=((1, "channel"),), mins=((2, 2), (3, 2))))
    add(_functional("group_norm", "normalization", "2", rank=4, caps=((1, "channel"),), mins=((1, 2),)))

    # matmul, bmm, einsum
    lin = dict(min_rank=2, caps=((-1, "feature"),))
    add(_spec("torch.nn.Linear", "matmul", "self.{m}({x})", init="nn.Linear({last}, {last})", traced=("linear",), **lin))
    add(_spec("torch.nn.functional.linear", "matmul", "F.linear({x}, self.{m})",
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)", **lin))
    add(_spec("torch.matmul", "matmul", "torch.matmul({x}, self.{m})",
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)", **lin))
    add(_spec("torch.mm", "matmul", "torch.mm({x}, self.{m})", rank=2, caps=((-1, "feature"),),
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.bmm", "matmul", "torch.bmm({x}, {e0})", rank=3, caps=((-1, "feature"), (-2, "feature")),
              extras=("square_last",), note="batch matmul with a (B, K, K) input"))
    add(_spec("torch.einsum", "matmul", "torch.einsum('bik,kj->bij', {x}, self.{m})", rank=3, caps=((-1, "feature"),),
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.einsum[bmm]", "matmul", "torch.einsum('bij,bjk->bik', {x}, {x}.transpose(1, 2)) / {last} ** 0.5",
              rank=3, caps=((-1, "feature"), (-2, "feature")), rule="square_rows", traced=("einsum",)))
    add(_spec("torch.addmm", "matmul", "torch.addmm({x}, {x}, self.{m})", rank=2, caps=((-1, "feature"),),
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.baddbmm", "matmul", "torch.baddbmm({x}, {x}, {e0})", rank=3,
              caps=((-1, "feature"), (-2, "feature")), extras=("square_last",)))
    add(_spec("torch.addbmm", "matmul", "torch.addbmm({x}[0], {x}, {e0})", rank=3,
              caps=((-1, "feature"), (-2, "feature")), rule="drop_first", extras=("square_last",)))
    add(_spec("torch.tensordot", "matmul", "torch.tensordot({x}, self.{m}, dims=1)", **lin,
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.linalg.matmul", "matmul", "torch.linalg.matmul({x}, self.{m})", **lin, traced=("linalg_matmul", "matmul"),
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.linalg.multi_dot", "matmul", "torch.linalg.multi_dot([{x}, self.{m}, self.{m}])", rank=2,
              caps=((-1, "feature"),), traced=("linalg_multi_dot",),
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.inner", "matmul", "torch.inner({x}, self.{m})", **lin,
              init="nn.Parameter(torch.randn({last}, {last}) / {last} ** 0.5)"))
    add(_spec("torch.cdist", "matmul", "torch.cdist({x}, self.{m})", rank=2, caps=((-1, "feature"),),
              traced=("cdist", "_cdist_forward", "_euclidean_dist"), init="nn.Parameter(torch.randn({last}, {last}))"))
    add(_spec("torch.nn.Bilinear", "matmul", "self.{m}({x}, {x})", rank=2, caps=((-1, "small"),),
              init="nn.Bilinear({last}, {last}, {last})", traced=("bilinear",)))
    add(_spec("torch.triu", "matmul", "torch.triu({x})", min_rank=2))
    add(_spec("torch.tril", "matmul", "torch.tril({x})", min_rank=2))

    # convolution
    for d in (1, 2, 3):
        conv = dict(rank=d + 2, caps=((1, "channel"),))
        add(_spec(f"torch.nn.Conv{d}d", "convolution", "self.{m}({x})",
                  init=f"nn.Conv{d}d({{c}}, {{c}}, kernel_size=3, padding=1)", traced=(f"conv{d}d", "convolution"), **conv))
        add(_spec(f"torch.nn.ConvTranspose{d}d", "convolution", "self.{m}({x})", rule="conv_transpose",
                  init=f"nn.ConvTranspose{d}d({{c}}, {{c_out}}, kernel_size=2, stride=2)",
                  traced=(f"conv_transpose{d}d", "convolution"), **conv))
        add(_spec(f"torch.nn.functional.conv{d}d", "convolution", f"F.conv{d}d({{x}}, self.{{m}}, padding=1)",
                  init=f"nn.Parameter(torch.randn({{c}}, {{c}}{', 3' * d}) / ({{c}} * {3 ** d}) ** 0.5)",
                  traced=(f"conv{d}d", "convolution"), **conv))
    add(_spec("torch.nn.Conv2d[depthwise]", "convolution", "self.{m}({x})", rank=4, caps=((1, "channel"),),
              init="nn.Conv2d({c}, {c}, kernel_size=3, padding=1, groups={c})", traced=("conv2d", "convolution")))
    add(_spec("torch.nn.Conv2d[stride2]", "convolution", "self.{m}({x})", rank=4, caps=((1, "channel"),),
              mins=((2, 2), (3, 2)), rule="spatial_half",
              init="nn.Conv2d({c}, {c}, kernel_size=3, stride=2, padding=1)", traced=("conv2d", "convolution")))
    add(_functional("unfold", "convolution", "kernel_size=2, stride=2", rank=4, rule="unfold",
                    caps=((1, "channel"),), mins=((2, 2), (3, 2)), traced=("unfold", "im2col")))
    add(_functional("fold", "convolution", "output_size=({fold_h}, {fold_w}), kernel_size=2, stride=2", rank=3,
                    rule="fold", mins=((1, 4),), traced=("fold", "col2im")))

    # pooling and resampling
    for d in (1, 2, 3):
        sp = tuple((i, 2) for i in range(2, d + 2))
        pool = dict(rank=d + 2, mins=sp, rule="spatial_half")
        add(_functional(f"max_pool{d}d", "pooling", "2", traced=(f"max_pool{d}d", f"max_pool{d}d_with_indices"), **pool))
        add(_functional(f"avg_pool{d}d", "pooling", "2", **pool))
        add(_functional(f"adaptive_avg_pool{d}d", "pooling", "({out_sp},)" if d == 1 else "({out_sp})",
                        traced=(f"adaptive_avg_pool{d}d", f"_adaptive_avg_pool{d}d", "mean"), **pool))
        add(_functional(f"adaptive_max_pool{d}d", "pooling", "({out_sp},)" if d == 1 else "({out_sp})", **pool))
        add(_spec(f"torch.nn.MaxPool{d}d", "pooling", "self.{m}({x})", init=f"nn.MaxPool{d}d(2)",
                  traced=(f"max_pool{d}d", f"max_pool{d}d_with_indices"), **pool))
        add(_spec(f"torch.nn.AvgPool{d}d", "pooling", "self.{m}({x})", init=f"nn.AvgPool{d}d(2)",
                  traced=(f"avg_pool{d}d",), **pool))
    for d in (1, 2):
        add(_functional(f"lp_pool{d}d", "pooling", "2.0, 2", rank=d + 2, mins=tuple((i, 2) for i in range(2, d + 2)),
                        rule="spatial_half", domain="pos"))
    for mode, d in (("nearest", 2), ("linear", 1), ("bilinear", 2), ("bicubic", 2), ("trilinear", 3)):
        add(_spec(f"torch.nn.functional.interpolate[{mode}]", "pooling",
                  f"F.interpolate({{x}}, scale_factor=2, mode='{mode}')", rank=d + 2, rule="spatial_x2",
                  traced=(f"upsample_{mode}{d}d", "interpolate")))
    add(_spec("torch.nn.Upsample", "pooling", "self.{m}({x})", init="nn.Upsample(scale_factor=2, mode='nearest')",
              rank=4, rule="spatial_x2", traced=("upsample_nearest2d", "interpolate")))
    add(_functional("pixel_shuffle", "pooling", "2", rank=4, rule="pixel_shuffle", mins=((1, 4),)))
    add(_functional("pixel_unshuffle", "pooling", "2", rank=4, rule="pixel_unshuffle", mins=((2, 2), (3, 2))))
    add(_spec("torch.nn.ChannelShuffle", "pooling", "self.{m}({x})", init="nn.ChannelShuffle(2)", rank=4,
              mins=((1, 2),), traced=("channel_shuffle", "native_channel_shuffle")))
    add(_spec("torch.nn.functional.pad[reflect]", "pooling", "F.pad({x}, ({half}, {half}), mode='reflect')",
              rank=3, rule="last_x2", mins=((-1, 2),), traced=("reflection_pad1d", "pad")))
    add(_spec("torch.nn.functional.pad[replicate]", "pooling", "F.pad({x}, ({half}, {half}), mode='replicate')",
              rank=3, rule="last_x2", mins=((-1, 2),), traced=("replication_pad1d", "pad")))
    add(_spec("torch.nn.functional.pad", "pooling", "F.pad({x}, (0, {last}))", rule="last_x2",
              traced=("pad", "constant_pad_nd")))

    # indexing, scatter and gather
    idx = dict(min_rank=2, caps=((-1, "reduce"),))
    add(_spec("torch.gather", "indexing", "torch.gather({x}, -1, {e0})", extras=("idx_last",), **idx))
    add(_spec("torch.take_along_dim", "indexing", "torch.take_along_dim({x}, {e0}, dim=-1)",
              extras=("idx_last",), traced=("take_along_dim", "gather"), **idx))
    add(_spec("torch.scatter", "indexing", "torch.scatter({x}, -1, {e0}, {e1})", extras=("perm_last", "like"), **idx))
    add(_spec("torch.scatter_add", "indexing", "torch.scatter_add({x}, -1, {e0}, {e1})",
              extras=("idx_last", "like"), **idx))
    add(_spec("torch.scatter_reduce", "indexing", "torch.scatter_reduce({x}, -1, {e0}, {e1}, reduce='amax')",
              extras=("idx_last", "like"), traced=("scatter_reduce",), **idx))
    add(_spec("torch.index_select", "indexing", "torch.index_select({x}, -1, {e0})", extras=("idx_vec",), **idx))
    add(_spec("torch.index_add", "indexing", "torch.index_add({x}, -1, {e0}, {e1})", extras=("idx_vec", "like"), **idx))
    add(_spec("torch.index_copy", "indexing", "torch.index_copy({x}, -1, {e0}, {e1})", extras=("perm_vec", "like"), **idx))
    add(_spec("torch.index_fill", "indexing", "torch.index_fill({x}, -1, {e0}, 0.0)", extras=("half_vec",),
              min_rank=2, caps=((-1, "reduce"),), mins=((-1, 2),)))
    add(_spec("torch.Tensor.masked_fill", "indexing", "{x}.masked_fill({e0} > 0, 0.0)", extras=("like",),
              traced=("masked_fill",)))
    add(_spec("torch.take", "indexing", "torch.take({x}, {e0})", extras=("flat_idx",)))
    add(_spec("torch.nn.Embedding", "indexing", "{x} + self.{m}({e0})", init="nn.Embedding(1024, {last})",
              min_rank=2, extras=("idx_lead",), traced=("embedding",)))
    add(_spec("torch.nn.functional.one_hot", "indexing", "{x} + F.one_hot({e0}, num_classes={last}).float()",
              min_rank=2, caps=((-1, "reduce"),), extras=("cls_lead",)))
    add(_spec("torch.narrow", "indexing", "torch.narrow({x}, -1, 0, {half})", rule="last_half", mins=((-1, 2),)))
    add(_spec("torch.roll", "indexing", "torch.roll({x}, shifts=1, dims=-1)"))
    add(_spec("torch.flip", "indexing", "torch.flip({x}, dims=[-1])"))
    add(_spec("torch.Tensor.repeat", "indexing", "{x}.repeat({ones}2)", rule="last_x2", traced=("repeat",)))
    add(_spec("torch.tile", "indexing", "torch.tile({x}, ({ones}2,))", rule="last_x2", traced=("tile", "repeat")))
    add(_spec("torch.cat", "indexing", "torch.cat([{x}, {e0}], dim=-1)", rule="last_x2", extras=("like",)))
    add(_spec("torch.stack", "indexing", "torch.stack([{x}, {e0}], dim=0)", rule="stack", extras=("like",)))
    add(_spec("torch.chunk", "indexing", "torch.mul(*torch.chunk({x}, 2, dim=-1))", rule="last_half", mins=((-1, 2),),
              traced=("chunk", "split")))
    add(_spec("torch.split", "indexing", "torch.sub(*torch.split({x}, {half}, dim=-1))", rule="last_half",
              mins=((-1, 2),)))
    add(_spec("torch.transpose", "indexing", "torch.transpose({x}, -1, -2).contiguous()", rule="swap_last", min_rank=2))
    add(_spec("torch.permute", "indexing", "torch.permute({x}, ({perm},)).contiguous()", rule="reverse", min_rank=2))
    add(_spec("torch.bucketize", "indexing", "torch.bucketize({x}, self.{m}).float()",
              init="nn.Buffer(torch.linspace(-2.0, 2.0, 15))"))
    add(_spec("torch.searchsorted", "indexing", "torch.searchsorted(self.{m}, {x}.contiguous()).float()",
              init="nn.Buffer(torch.linspace(-2.0, 2.0, 15))"))
    add(_spec("torch.Tensor.index_put", "indexing", "{x}.index_put(({e0},), {e1}[0])", min_rank=2,
              extras=("perm_lead0", "like"), traced=("index_put", "index_put_")))

    # attention
    att = dict(rank=4, caps=((-1, "head"), (-2, "seq")), mins=((-1, 4), (-2, 2)))
    add(_spec("torch.nn.functional.scaled_dot_product_attention", "attention",
              "F.scaled_dot_product_attention({x}, {e0}, {e1})", extras=("like", "like"),
              traced=("scaled_dot_product_attention",), **att))
    add(_spec("torch.nn.functional.scaled_dot_product_attention[causal]", "attention",
              "F.scaled_dot_product_attention({x}, {x}, {x}, is_causal=True)",
              traced=("scaled_dot_product_attention",), **att))
    add(_spec("torch.nn.MultiheadAttention", "attention", "self.{m}({x}, {x}, {x}, need_weights=False)[0]",
              init="nn.MultiheadAttention({last}, 2, batch_first=True)", rank=3,
              caps=((-1, "small"), (-2, "seq")), mins=((-1, 2),), traced=("multi_head_attention_forward",)))
    add(_spec("torch.nn.TransformerEncoderLayer", "attention", "self.{m}({x})",
              init="nn.TransformerEncoderLayer({last}, 2, dim_feedforward={last}, dropout=0.0, batch_first=True)",
              rank=3, caps=((-1, "small"), (-2, "seq")), mins=((-1, 2),),
              traced=("multi_head_attention_forward", "_transformer_encoder_layer_fwd")))
    add(_spec("torch.softmax[attention]", "attention",
              "torch.softmax({x} @ {x}.transpose(-1, -2) / {last} ** 0.5, dim=-1) @ {x}",
              rank=3, caps=((-1, "head"), (-2, "seq")), traced=("softmax", "_softmax")))

    # losses: scalar outputs ('mean'), folded in when not last
    loss = dict(terminal=True, rule="scalar")
    for fn in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss"):
        margin = fn == "soft_margin_loss"  # torch computes log(1 + exp(-y x)) without guarding overflow
        add(_functional(fn, "loss", "{e0}", extras=("sign" if margin else "like",),
                        domain="bounded" if margin else "any", **loss))
    add(_functional("binary_cross_entropy", "loss", "{e0}", extras=("rand",), domain="unit01", **loss))
    add(_functional("binary_cross_entropy_with_logits", "loss", "{e0}", extras=("rand",), **loss))
    add(_functional("kl_div", "loss", "{e0}, reduction='batchmean'", extras=("rand",), domain="logprob", **loss))
    add(_functional("poisson_nll_loss", "loss", "{e0}", extras=("pos",), domain="bounded", **loss))
    add(_functional("gaussian_nll_loss", "loss", "{e0}, {e1}", extras=("like", "pos"), **loss))
    add(_functional("hinge_embedding_loss", "loss", "{e0}", extras=("sign",), **loss))
    add(_functional("margin_ranking_loss", "loss", "{e0}, {e1}", extras=("like", "sign"), **loss))
    add(_functional("multilabel_soft_margin_loss", "loss", "{e0}", rank=2, extras=("multihot",), **loss))
    add(_functional("cross_entropy", "loss", "{e0}", rank=2, caps=((-1, "reduce"),), extras=("cls_n0",), **loss))
    add(_functional("nll_loss", "loss", "{e0}", rank=2, caps=((-1, "reduce"),), extras=("cls_n0",),
                    domain="logprob", traced=("nll_loss", "nll_loss_forward", "nll_loss2d_forward"), **loss))
    add(_functional("multi_margin_loss", "loss", "{e0}", rank=2, caps=((-1, "reduce"),), extras=("cls_n0",), **loss))
    add(_functional("cosine_embedding_loss", "loss", "{e0}, {e1}", rank=2, extras=("like", "sign_n0"), **loss))
    add(_functional("triplet_margin_loss", "loss", "{e0}, {e1}", rank=2, extras=("like", "like"), **loss))
    add(_spec("torch.nn.MSELoss", "loss", "self.{m}({x}, {e0})", init="nn.MSELoss()", extras=("like",),
              traced=("mse_loss",), **loss))
    add(_spec("torch.nn.CrossEntropyLoss", "loss", "self.{m}({x}, {e0})", init="nn.CrossEntropyLoss()", rank=2,
              caps=((-1, "reduce"),), extras=("cls_n0",), traced=("cross_entropy",), **loss))

    # cumulative
    scan = dict(min_rank=2, caps=((-1, "reduce"),))
    add(_spec("torch.cumsum", "cumulative", "torch.cumsum({x}, dim=-1)", **scan))
    add(_spec("torch.cumprod", "cumulative", "torch.cumprod({x}, dim=-1)", domain="near1", **scan))
    add(_spec("torch.cummax", "cumulative", "torch.cummax({x}, dim=-1).values", **scan))
    add(_spec("torch.cummin", "cumulative", "torch.cummin({x}, dim=-1).values", **scan))
    add(_spec("torch.logcumsumexp", "cumulative", "torch.logcumsumexp({x}, dim=-1)", **scan))
    add(_spec("torch.diff", "cumulative", "torch.diff({x}, dim=-1, prepend={x}[..., :1])", **scan))
    add(_spec("torch.Tensor.cumsum[reverse]", "cumulative", "torch.flip(torch.flip({x}, dims=[-1]).cumsum(-1), dims=[-1])",
              traced=("cumsum",), **scan))
    add(_spec("torch.cumulative_trapezoid", "cumulative",
              "torch.cat([{x}[..., :1], torch.cumulative_trapezoid({x}, dim=-1)], dim=-1)", **scan))
    add(_spec("torch.trapezoid", "cumulative", "torch.trapezoid({x}, dim=-1)", rule="drop_last", **scan))
    return specs


# Value classes, so that the synthesizer never writes a module whose output is a constant: the
# input of an API that needs zero-centred values is standardized (sign after abs, relu after
# log_softmax, clamp after a distance); an API that needs distinct values never follows one that
# makes many ties (amin after relu, abs after sign), and no row reduction follows argsort (whose
# rows are all permutations of one another): the synthesizer picks another order instead.
VALUE_CLASSES = {
    "signed": "zero-centred values of order one",
    "ties": "many exactly equal values (relu, floor, sign, masked_fill, ...)",
    "perm": "rows that are permutations of one another (argsort)",
    "mono": "monotone rows (sort, topk, cummax, cummin)",
    "other": "anything else (offset, one-signed, small)",
}
NEEDS = {
    "signed": {"signed"},
    "distinct": {"signed", "other", "mono"},
    "unordered": {"signed", "other", "ties"},
    "noperm": {"signed", "other", "ties", "mono"},
}
_NEEDS_SIGNED = {
    "torch.relu", "torch.nn.functional.relu", "torch.nn.functional.relu6", "torch.nn.ReLU", "torch.nn.functional.hardsigmoid",
    "torch.sigmoid", "torch.tanh", "torch.erf", "torch.erfc", "torch.nn.functional.hardtanh", "torch.clamp",
    "torch.nn.functional.logsigmoid", "torch.bucketize", "torch.searchsorted", "torch.sign", "torch.sgn",
    "torch.heaviside", "torch.count_nonzero", "torch.nn.functional.threshold", "torch.nn.functional.hardshrink",
    "torch.nn.functional.softshrink", "torch.floor", "torch.ceil", "torch.round", "torch.trunc", "torch.floor_divide",
}
_NEEDS_DISTINCT = {
    "torch.amin", "torch.amax", "torch.max", "torch.min", "torch.kthvalue", "torch.median", "torch.cummax",
    "torch.cummin", "torch.abs", "torch.square", "torch.cosh", "torch.topk",
}
_NEEDS_UNORDERED = {"torch.argmax", "torch.argmin"}
_MONO_OUT = {"torch.cummax", "torch.cummin", "torch.topk", "torch.sort"}
_SPREAD_OUT = {"torch.sigmoid", "torch.tanh", "torch.erf", "torch.erfc", "torch.nn.functional.logsigmoid",
               "torch.count_nonzero", "torch.bucketize", "torch.searchsorted"}
_TIES_OUT = (_NEEDS_SIGNED - _SPREAD_OUT) | {
    "torch.Tensor.masked_fill", "torch.index_fill", "torch.triu", "torch.tril",
}
_SIGNED_OUT_FAMILIES = {"matmul", "convolution", "normalization"}
_SIGNED_OUT = {
    "torch.mul", "torch.atan2", "torch.copysign", "torch.mean[keepdim]", "torch.diff", "torch.split",
    "torch.scatter", "torch.scatter_add", "torch.index_add", "torch.index_copy", "torch.cat", "torch.stack",
    "torch.nn.Embedding", "torch.Tensor.index_put", "torch.nn.functional.scaled_dot_product_attention",
    "torch.nn.MultiheadAttention", "torch.nn.TransformerEncoderLayer", "torch.nn.functional.layer_norm",
}
_NOT_SIGNED_OUT = {"torch.cdist", "torch.einsum[bmm]", "torch.nn.functional.unfold", "torch.nn.functional.fold",
                   "torch.nn.functional.normalize", "torch.nn.LocalResponseNorm"}
_KEEP_OUT = {
    "torch.add", "torch.sub", "torch.lerp", "torch.addcmul", "torch.addcdiv", "torch.maximum", "torch.minimum",
    "torch.fmax", "torch.fmin", "torch.neg", "torch.sin", "torch.atan", "torch.asinh", "torch.sinh", "torch.expm1",
    "torch.tan", "torch.asin", "torch.atanh", "torch.erfinv", "torch.nn.functional.softsign",
    "torch.nn.functional.tanhshrink", "torch.nn.functional.leaky_relu", "torch.nn.functional.elu",
    "torch.nn.functional.selu", "torch.nn.functional.celu", "torch.nn.functional.gelu", "torch.nn.functional.silu",
    "torch.nn.functional.mish", "torch.nn.functional.rrelu", "torch.nn.functional.gelu[tanh]", "torch.nn.GELU",
    "torch.nn.SiLU", "torch.nn.PReLU", "torch.nn.functional.hardswish", "torch.rad2deg", "torch.where",
    "torch.nan_to_num", "torch.sum", "torch.nansum", "torch.cumsum", "torch.Tensor.cumsum[reverse]",
    "torch.roll", "torch.flip", "torch.narrow", "torch.Tensor.repeat", "torch.tile", "torch.transpose",
    "torch.permute", "torch.gather", "torch.take_along_dim", "torch.take", "torch.index_select",
    "torch.nn.functional.one_hot", "torch.nn.functional.pad", "torch.nn.functional.pad[reflect]",
    "torch.nn.functional.pad[replicate]", "torch.nn.functional.scaled_dot_product_attention[causal]",
    "torch.softmax[attention]", "torch.trapezoid", "torch.cumulative_trapezoid",
}


def _value_class(spec: ApiSpec) -> ApiSpec:
    name = spec.name
    if name == "torch.argsort":
        out = "perm"
    elif name in _TIES_OUT:
        out = "ties"
    elif name in _MONO_OUT:
        out = "mono"
    elif name in _SIGNED_OUT or (spec.family in _SIGNED_OUT_FAMILIES and name not in _NOT_SIGNED_OUT):
        out = "signed"
    elif name in _KEEP_OUT or (spec.family == "pooling" and "lp_pool" not in name and "max_pool" not in name.lower()):
        out = "keep"
    else:
        out = "other"
    if name in _NEEDS_SIGNED:
        needs = "signed"
    elif name in _NEEDS_DISTINCT:
        needs = "distinct"
    elif name in _NEEDS_UNORDERED:
        needs = "unordered"
    elif spec.rule == "drop_last" or spec.family in ("reduction", "cumulative"):
        needs = "noperm"
    else:
        needs = ""
    return msgspec.structs.replace(spec, out=out, needs=needs)


CATALOG: tuple[ApiSpec, ...] = tuple(_value_class(spec) for spec in _build())
BY_NAME: dict[str, ApiSpec] = {spec.name: spec for spec in CATALOG}
if len(BY_NAME) != len(CATALOG):
    raise RuntimeError("api catalog has duplicate names")
_unknown = (_NEEDS_SIGNED | _NEEDS_DISTINCT | _NEEDS_UNORDERED | _MONO_OUT | _TIES_OUT | _SIGNED_OUT | _NOT_SIGNED_OUT | _KEEP_OUT) - set(BY_NAME)
if _unknown:
    raise RuntimeError(f"value-class sets name APIs missing from the catalog: {sorted(_unknown)}")


def get(name: str) -> ApiSpec:
    """The catalog entry for `name`; KeyError names the unknown API."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown API {name!r} (not in the catalog)") from None


def names(family: str | None = None) -> list[str]:
    return [s.name for s in CATALOG if family is None or s.family == family]
