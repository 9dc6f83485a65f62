"""The teacher's view of a module: its torch.fx graph with shapes, and each call node named as an op of teacher_ops with bound parameters; it runs the module's source in this process (trusted, synthesizer-written code only).

`trace(source)` builds `Model(*get_init_inputs())`, traces it with `torch.fx.symbolic_trace` and
propagates the shapes of `get_inputs()` (both under seed 0). `identify(node)` says what a call
node is; anything outside the subset raises `NotLowerable` naming the op.
"""

from __future__ import annotations

import math
import operator
from typing import Any, NamedTuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.fx import GraphModule, Node, symbolic_trace
from torch.fx.passes.shape_prop import ShapeProp, TensorMetadata

from kernelzero.bootstrap.teacher_ops import ALIASES, OPS, REQUIRED, Op
from kernelzero.kit.seeding import seed_generators


class NotLowerable(ValueError):
    """The teacher does not lower this module; `op` names what stopped it, `reason` says why."""

    def __init__(self, op: str, reason: str):
        super().__init__(f"{op}: {reason}")
        self.op = op
        self.reason = reason


class Code(str):
    """Template text inserted as it is (a computed expression), never formatted as a literal."""


class Param(NamedTuple):
    """A submodule's tensor the kernel loads: kernel name, host expression, shape as broadcast against the op."""

    name: str
    expr: str
    shape: tuple[int, ...]


class Call(NamedTuple):
    key: str
    op: Op
    bound: dict[str, Any]  # parameter -> Node, Param, number, Code or other constant


def trace(source: str) -> GraphModule:
    namespace: dict = {"__name__": "kernelzero_teacher_module"}
    try:
        exec(compile(source, "<module>", "exec"), namespace)
        seed_generators(0)
        module = namespace["Model"](*namespace["get_init_inputs"]())
        inputs = list(namespace["get_inputs"]())
    except Exception as exc:
        raise NotLowerable("module", f"does not run: {type(exc).__name__}: {exc}") from None
    try:
        gm = symbolic_trace(module)
    except Exception as exc:
        raise NotLowerable("trace", f"torch.fx cannot trace it: {type(exc).__name__}: {exc}") from None
    try:
        with torch.no_grad():
            ShapeProp(gm).propagate(*inputs)
    except Exception as exc:
        raise NotLowerable("shapes", f"{type(exc).__name__}: {exc}") from None
    return gm


def meta(node: Node):
    """The node's tensor metadata (the first output's for ops returning a tuple)."""
    data = node.meta.get("tensor_meta")
    while isinstance(data, (tuple, list)) and not isinstance(data, TensorMetadata):
        data = data[0] if data else None
    if not isinstance(data, TensorMetadata):
        raise NotLowerable(describe(node), "its output is not a tensor")
    return data


def shape(node: Node | Param) -> tuple[int, ...]:
    return node.shape if isinstance(node, Param) else tuple(meta(node).shape)


def numel(node: Node | Param) -> int:
    return math.prod(shape(node))


def contiguous(node: Node) -> bool:
    return meta(node).memory_format == torch.contiguous_format


def _namespaces() -> list[tuple[str, Any]]:
    return [("F", F), ("torch", torch), ("torch.special", torch.special), ("torch.linalg", torch.linalg)]


def _function_names() -> dict[int, tuple[str, str]]:
    """id(function) -> (qualified name as host code writes it, attribute name); the first namespace wins."""
    found: dict[int, tuple[str, str]] = {}
    for prefix, ns in _namespaces():
        for name in sorted(dir(ns), key=lambda n: (n.startswith("_"), n)):
            value = getattr(ns, name, None)
            if callable(value) and not isinstance(value, type) and id(value) not in found:
                found[id(value)] = (f"{prefix}.{name}", name)
    return found


FUNCTIONS = _function_names()
OPERATORS = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.floordiv: "floor_divide", operator.pow: "pow", operator.neg: "neg", operator.gt: "gt",
    operator.ge: "ge", operator.lt: "lt", operator.le: "le", operator.eq: "eq", operator.ne: "ne",
    operator.matmul: "matmul", operator.getitem: "getitem", getattr: "getattr",
}


def describe(node: Node) -> str:
    """The op a node calls, as a user would name it."""
    if node.op == "call_function":
        if node.target in OPERATORS:
            return OPERATORS[node.target]
        return FUNCTIONS.get(id(node.target), (getattr(node.target, "__name__", str(node.target)),))[0]
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_module":
        return type(node.graph.owning_module.get_submodule(node.target)).__name__
    return node.op


def op_name(node: Node) -> str:
    """The name the op tables use: the function's, method's or operator's name."""
    if node.op == "call_function":
        if node.target in OPERATORS:
            return OPERATORS[node.target]
        return FUNCTIONS.get(id(node.target), ("", getattr(node.target, "__name__", "")))[1]
    return str(node.target)


def bind(op: Op, args: tuple, kwargs: dict, what: str) -> dict[str, Any]:
    names = [name for name, _ in op.params]
    if len(args) > len(names):
        raise NotLowerable(what, f"takes at most {len(names)} arguments here, got {len(args)}")
    bound = dict(zip(names, args))
    for key, value in kwargs.items():
        if key not in names or key in bound:
            raise NotLowerable(what, f"argument {key!r} is not supported")
        bound[key] = value
    for name, default in op.params:
        if name not in bound:
            if default is REQUIRED:
                raise NotLowerable(what, f"argument {name!r} is missing")
            bound[name] = default
    return bound


def identify(node: Node) -> Call:
    """What a call node does, as an op of the table with its parameters bound; NotLowerable when outside the subset."""
    if node.op == "call_module":
        call = _module_call(node)
        return resolve(call, node) if call.bound else call
    part = _tuple_part(node)
    if part is not None:
        return part
    what = describe(node)
    key = ALIASES.get(op_name(node))
    if key in ("max", "min"):
        key = _max_or_min(key, node)
    if key is None:
        raise NotLowerable(what, "not in the teacher's op subset")
    op = OPS[key]
    if op.kind in ("glue", "layout", "torch"):
        return Call(key, op, {})
    return resolve(Call(key, op, bind(op, node.args, node.kwargs, what)), node)


def _param(owner: str, module: nn.Module, attr: str, shape: tuple[int, ...] | None = None) -> Param | None:
    tensor = getattr(module, attr, None)
    if tensor is None:
        return None
    return Param(f"{owner.replace('.', '_')}_{attr}", f"self.{owner}.{attr}", shape or tuple(tensor.shape))


def _channels(module: nn.Module, attr: str, owner: str, rank: int) -> Param | None:
    """A per-channel weight, shaped to broadcast over the spatial dims after it."""
    tensor = getattr(module, attr, None)
    return None if tensor is None else _param(owner, module, attr, (tensor.shape[0],) + (1,) * (rank - 2))


_PLAIN_MODULES = {
    nn.ReLU: "relu", nn.ReLU6: "relu6", nn.Sigmoid: "sigmoid", nn.Tanh: "tanh", nn.SiLU: "silu", nn.Mish: "mish",
    nn.Softsign: "softsign", nn.Hardsigmoid: "hardsigmoid", nn.Hardswish: "hardswish", nn.LogSigmoid: "logsigmoid",
    nn.Tanhshrink: "tanhshrink", nn.SELU: "selu", nn.Identity: "alias", nn.Flatten: "alias",
}
_ATTR_MODULES = {  # module type -> (op key, attributes passed as the op's parameters of the same name)
    nn.GELU: ("gelu", ("approximate",)), nn.LeakyReLU: ("leaky_relu", ("negative_slope",)),
    nn.ELU: ("elu", ("alpha",)), nn.CELU: ("celu", ("alpha",)), nn.Softplus: ("softplus", ("beta", "threshold")),
    nn.Hardtanh: ("hardtanh", ("min_val", "max_val")), nn.Threshold: ("threshold", ("threshold", "value")),
    nn.Softshrink: ("softshrink", ("lambd",)), nn.Hardshrink: ("hardshrink", ("lambd",)),
    nn.Softmax: ("softmax", ("dim",)), nn.LogSoftmax: ("log_softmax", ("dim",)), nn.Softmin: ("softmin", ("dim",)),
    nn.MSELoss: ("mse_loss", ("reduction",)), nn.L1Loss: ("l1_loss", ("reduction",)),
    nn.SmoothL1Loss: ("smooth_l1_loss", ("reduction", "beta")), nn.HuberLoss: ("huber_loss", ("reduction", "delta")),
    nn.SoftMarginLoss: ("soft_margin_loss", ("reduction",)), nn.BCELoss: ("binary_cross_entropy", ("reduction",)),
    nn.BCEWithLogitsLoss: ("binary_cross_entropy_with_logits", ("reduction",)),
    nn.KLDivLoss: ("kl_div", ("reduction", "log_target")),
}
_TORCH_MODULES = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d,
                  nn.ConvTranspose3d)


def _module_call(node: Node) -> Call:
    module = node.graph.owning_module.get_submodule(node.target)
    what, kind = type(module).__name__, type(module)
    if kind in _TORCH_MODULES:
        return Call("torch", OPS["torch"], {})
    if kind is nn.Dropout and (module.p == 0 or not module.training):
        return Call("alias", OPS["alias"], {})
    key, attrs = _ATTR_MODULES.get(kind, (_PLAIN_MODULES.get(kind), ()))
    inputs = len(OPS[key].rows) if key and OPS[key].kind == "reduce" else 1  # losses take (input, target)
    if node.kwargs or len(node.args) != inputs:
        raise NotLowerable(what, "called with arguments the teacher does not bind")
    if key == "alias":
        return Call(key, OPS[key], {})
    if key:
        return Call(key, OPS[key], bind(OPS[key], node.args, {a: getattr(module, a) for a in attrs}, what))
    return Call(*_normalization(node, module, what))


def _normalization(node: Node, module: nn.Module, what: str) -> tuple[str, Op, dict]:
    owner, rank = node.target, len(shape(node.args[0]))
    if isinstance(module, nn.PReLU):  # one weight, or one per channel (dim 1)
        return "prelu", OPS["prelu"], {"input": node.args[0], "weight": _channels(module, "weight", owner, rank)}
    if isinstance(module, nn.LayerNorm):
        params = {"normalized_shape": module.normalized_shape, "eps": module.eps,
                  "weight": _param(owner, module, "weight"), "bias": _param(owner, module, "bias")}
        return "layer_norm", OPS["layer_norm"], bind(OPS["layer_norm"], node.args, params, what)
    if isinstance(module, nn.RMSNorm):
        params = {"normalized_shape": module.normalized_shape, "eps": module.eps,
                  "weight": _param(owner, module, "weight")}
        return "rms_norm", OPS["rms_norm"], bind(OPS["rms_norm"], node.args, params, what)
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        if module.track_running_stats and not module.training:
            raise NotLowerable(what, "normalizes by running statistics (eval mode)")
        params = {"eps": module.eps, "weight": _channels(module, "weight", owner, rank),
                  "bias": _channels(module, "bias", owner, rank)}
        return "instance_norm", OPS["instance_norm"], bind(OPS["instance_norm"], node.args, params, what)
    if isinstance(module, nn.GroupNorm):
        params = {"num_groups": module.num_groups, "eps": module.eps,
                  "weight": _channels(module, "weight", owner, rank), "bias": _channels(module, "bias", owner, rank)}
        return "group_norm", OPS["group_norm"], bind(OPS["group_norm"], node.args, params, what)
    raise NotLowerable(what, "module not in the teacher's op subset")


def _max_or_min(key: str, node: Node) -> str:
    """torch.max(x, y) is elementwise; torch.max(x) and torch.max(x, dim) reduce."""
    second = node.args[1] if len(node.args) > 1 else node.kwargs.get("other")
    if isinstance(second, Node):
        return "maximum" if key == "max" else "minimum"
    return "amax" if key == "max" else "amin"


def _tuple_part(node: Node) -> Call | None:
    """`.values` or `[0]` of a reduction returning (values, indices): the values, an alias."""
    if node.op != "call_function" or node.target not in (getattr, operator.getitem):
        return None
    source, part = node.args[0], node.args[1]
    if not isinstance(source, Node) or isinstance(source.meta.get("tensor_meta"), TensorMetadata) \
            or source.op == "call_module" or identify(source).op.kind not in ("reduce", "scan"):
        return None
    if part not in ("values", 0):
        raise NotLowerable(describe(source), f"its {part!r} output is not lowered (values only)")
    return Call("alias", OPS["alias"], {})


def _as(call: Call, key: str, **extra) -> Call:
    return Call(key, OPS[key], {**call.bound, **extra})


def _with_last_line(call: Call, suffix: str) -> Call:
    op = call.op
    return Call(call.key, op._replace(lines=op.lines[:-1] + (op.lines[-1] + suffix,)), call.bound)


def _decline(call: Call, reason: str):
    raise NotLowerable(call.key, reason)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _gelu(call: Call, node: Node) -> Call:
    approximate = call.bound["approximate"]
    if approximate not in ("none", "tanh"):
        _decline(call, f"approximate={approximate!r}")
    return _as(call, "gelu_tanh") if approximate == "tanh" else call


def _softplus(call: Call, node: Node) -> Call:
    return call if (call.bound["beta"], call.bound["threshold"]) == (1.0, 20.0) else _as(call, "softplus_beta")


def _rrelu(call: Call, node: Node) -> Call:
    b = call.bound
    if b["training"]:
        _decline(call, "random in training mode")
    return _as(call, "rrelu", slope=Code(repr((b["lower"] + b["upper"]) / 2)))


def _alpha(call: Call, node: Node) -> Call:
    return call if call.bound["alpha"] == 1 else _as(call, f"{call.key}_alpha")


def _div(call: Call, node: Node) -> Call:
    mode = call.bound["rounding_mode"]
    if mode is None:
        return call
    if mode not in ("floor", "trunc"):
        _decline(call, f"rounding_mode={mode!r}")
    return _as(call, f"{mode}_divide")


def _clamp(call: Call, node: Node) -> Call:
    low, high = call.bound["min"], call.bound["max"]
    if low is None and high is None:
        _decline(call, "neither min nor max")
    if low is None:
        return _as(call, "clamp_max")
    return _as(call, "clamp_min") if high is None else call


def _pow(call: Call, node: Node) -> Call:
    base, exponent = call.bound["input"], call.bound["exponent"]
    if _number(base):
        if base <= 0:
            _decline(call, f"scalar base {base} is not positive")
        return _as(call, "pow_scalar_base", log2_base=Code(repr(math.log2(base))))
    if not _number(exponent):
        return _as(call, "pow_tensor")
    if exponent == 0.5:
        return _as(call, "sqrt")
    if exponent == -0.5:
        return _as(call, "rsqrt")
    if exponent != int(exponent):
        return call
    n = int(exponent)
    if not 1 <= abs(n) <= 4:
        _decline(call, f"integer exponent {n} (only 1 to 4 in size)")
    product = " * ".join(["{input}"] * abs(n))
    line = f"{{o}} = {product}" if n > 0 else f"{{o}} = 1.0 / ({product})"
    return Call("pow_int", OPS["pow_int"]._replace(lines=(line,)), call.bound)


def _count(call: Call, node: Node) -> Call:
    """var and std: the divisor n_cols - correction."""
    b = call.bound
    correction = b["correction"] if b["correction"] is not None else (1 if b["unbiased"] else 0)
    count = "n_cols" if correction == 0 else f"(n_cols - {correction})"
    return _as(call, call.key, count=Code(count))


def _p2(field: str):
    def check(call: Call, node: Node) -> Call:
        if call.bound[field] not in (2, 2.0, "fro", None):
            _decline(call, f"{field}={call.bound[field]!r} (only the 2-norm)")
        return call
    return check


def _defaults(**defaults):
    """Parameters the teacher only takes at these values."""
    def check(call: Call, node: Node) -> Call:
        for field, default in defaults.items():
            if call.bound[field] != default:
                _decline(call, f"{field}={call.bound[field]!r}")
        return call
    return check


def _loss(call: Call, node: Node) -> Call:
    b = call.bound
    for legacy in ("size_average", "reduce", "weight", "pos_weight"):
        if b.get(legacy) is not None:
            _decline(call, f"{legacy} is not supported")
    if b.get("log_target") or b.get("full") or b.get("log_input") is False:
        _decline(call, "a non-default loss variant")
    divisors = {"mean": "n_cols", "sum": "1.0"}
    if call.key == "kl_div":
        divisors = {"batchmean": repr(float(shape(b["input"])[0])), "sum": "1.0", "mean": "n_cols"}
    if b["reduction"] not in divisors:
        _decline(call, f"reduction={b['reduction']!r}")
    if call.key == "smooth_l1_loss" and b["beta"] == 0:
        _decline(call, "beta=0")
    return _as(call, call.key, count=Code(divisors[b["reduction"]]))


def _affine(call: Call, node: Node) -> Call:
    """Norms: the weight and bias they scale and shift by, and a default eps."""
    b = call.bound
    if call.key in ("instance_norm", "group_norm") and any(isinstance(b[k], Node) for k in ("weight", "bias")):
        _decline(call, "weight or bias given as tensors (per-channel broadcast)")
    if call.key == "instance_norm" and (not b["use_input_stats"] or b["running_mean"] is not None):
        _decline(call, "running statistics")
    if call.key == "rms_norm" and b["eps"] is None:
        call = _as(call, call.key, eps=torch.finfo(torch.float32).eps)
    suffix = (" * {weight}" if b["weight"] is not None else "") + (" + {bias}" if b.get("bias") is not None else "")
    return _with_last_line(call, suffix)


def _prelu(call: Call, node: Node) -> Call:
    weight = call.bound["weight"]
    if isinstance(weight, Node) and numel(weight) > 1:
        _decline(call, "per-channel weights given as a tensor")
    return call


def _float(call: Call, node: Node) -> Call:
    if meta(node.args[0]).dtype == torch.bool:
        return call
    return Call("alias", OPS["alias"], {})


def _triangle(call: Call, node: Node) -> Call:
    dims = shape(node)
    if len(dims) < 2 or not isinstance(call.bound["diagonal"], int):
        _decline(call, "needs a matrix and an integer diagonal")
    return _as(call, call.key, rows=Code(dims[-2]), last=Code(dims[-1]), diagonal=Code(call.bound["diagonal"]))


def _dim_given(call: Call, node: Node) -> Call:
    if call.bound["dim"] is None or call.bound["dtype"] is not None:
        _decline(call, "needs dim and no dtype")
    return call


_VARIANTS = {
    "gelu": _gelu, "softplus": _softplus, "rrelu": _rrelu, "add": _alpha, "sub": _alpha, "div": _div,
    "clamp": _clamp, "pow": _pow, "prelu": _prelu, "var": _count, "std": _count, "norm": _p2("p"),
    "vector_norm": _p2("ord"),
    "pairwise_distance": _p2("p"), "normalize": _p2("p"), "layer_norm": _affine, "rms_norm": _affine,
    "instance_norm": _affine, "group_norm": _affine, "float": _float, "triu": _triangle, "tril": _triangle,
    "softmax": _dim_given, "softmin": _dim_given, "log_softmax": _dim_given,
    "logit": _defaults(eps=None), "round": _defaults(decimals=0),
    "nan_to_num": _defaults(nan=0.0, posinf=None, neginf=None),
    **{key: _defaults(dtype=None) for key in ("sum", "mean", "nansum", "nanmean", "cumsum", "cumprod")},
    **{key: _loss for key in ("mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss",
                              "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div", "poisson_nll_loss",
                              "gaussian_nll_loss", "hinge_embedding_loss", "margin_ranking_loss",
                              "multilabel_soft_margin_loss")},
}


def resolve(call: Call, node: Node) -> Call:
    """The variant its parameters ask for (gelu's tanh form, pow by an integer, ...); NotLowerable if none fits."""
    variant = _VARIANTS.get(call.key)
    return variant(call, node) if variant else call
