"""The Coder's teacher: lowers a KernelBench module's torch.fx graph to one fused Triton kernel in a canonical form a small model can learn; it runs the module's source in this process (trusted code only) and declines what it cannot lower.

Public API:
    lower(module_source: str, max_kernels: int = 1) -> str   a candidate source defining `ModelNew`
    answer(module_source: str, max_kernels: int = 1) -> str  the same as a Coder completion:
                                                             "```python\\n<source>```\\n"
    NotLowerable   ValueError raised by both; `.op` names what stopped it, `.reason` says why
    api_support(scale: float = 2**-13) -> dict[str, str]    each catalog API alone (its synthesized
                   module, seed 0): "" when it lowers, else why not; the lowerable ones make an API pool
    MAX_BLOCK      the longest row (elements) one program holds

What it lowers (teacher_ops.py has the full table): elementwise and activation chains with scalar,
row, column and scalar-tensor broadcasting; reductions over trailing dimensions (sum, mean, max,
var, norms, losses over the whole tensor, ...) with elementwise work before and after; row-to-row
ops (softmax, log_softmax, layer/rms/instance/group norm, cumsum). Matmul, linear and
convolution stay in torch, with the kernel as their prologue or epilogue; data movement (transpose,
cat, slicing) stays in torch as well. A module with no work for a kernel is declined.

The canonical form, fixed for a given module:
- the import block, then `kernel`, then `ModelNew`; no docstrings, and one comment only: each
  computing node's template lines follow a line `# OP`, OP the call as the module writes it
  (`# F.gelu`), so a small model first copies the op's name from the prompt, then writes the
  lines that name decides (a local step, where choosing the template straight from the module
  is an alignment the small model gets wrong on API sets it has not seen);
- `__init__` is Model's, statement by statement (ast.unparse), so parameters are built in the same order;
- every call node of the graph, in order, is named t0, t1, ...; inputs keep their names (`x`,
  `in1`), module tensors are named after their attribute (`m0_weight`); pointers add `_ptr`;
- the kernel runs one program per row: `row`, `cols`, `mask`, `offs` always come first; a row is
  the reduced trailing dimensions (the whole tensor for a full reduction) or, with no reduction,
  the output's last dimension; BLOCK is the next power of two of the row length;
- each input is loaded right before its first use, at `offs` (per element) or `row` (per row),
  with `// k` and `% m` for broadcasting; each node becomes the lines of its template, its
  temporaries named after it (t3a, t3b, ...); view ops become alias lines (`t2 = t1`);
- the host runs the torch ops before the kernel, allocates the kernel's output (named after the
  value it stores), launches `kernel[(rows,)](inputs..., tN, n_cols, BLOCK=...)`, runs the torch
  ops after it, returns.

`max_kernels` > 1 lets a module need several kernels (a torch op between fused work, or
reductions over rows of different lengths): `kernel`, `kernel1`, ... in launch order, same form.
"""

from __future__ import annotations

import ast
import math
from typing import NamedTuple

import torch
from torch.fx import Node

from kernelzero.bootstrap.teacher_graph import FUNCTIONS, Call, Code, NotLowerable, Param, contiguous, describe, meta, trace
from kernelzero.bootstrap.teacher_graph import shape as shape_of
from kernelzero.bootstrap.teacher_plan import MAX_BLOCK, Kernel, Plan, operands, plan

__all__ = ["MAX_BLOCK", "NotLowerable", "answer", "api_support", "lower"]

IMPORTS = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
           "import triton\nimport triton.language as tl\n")
INIT_GLOBALS = {"torch", "nn", "F", "super", "range", "len", "int", "float", "bool", "tuple", "list", "dict", "min",
                "max", "abs", "sum", "round", "isinstance"}


def lower(module_source: str, max_kernels: int = 1) -> str:
    """The canonical candidate source for a module; NotLowerable names the op it cannot lower."""
    graph = trace(module_source).graph
    graph.eliminate_dead_code()
    the_plan = plan(list(graph.nodes), max_kernels)
    kernels = [step for kind, step in the_plan.steps if kind == "kernel"]
    sources = [_kernel_source(the_plan, k, _kernel_name(i)) for i, k in enumerate(kernels)]
    return IMPORTS + "\n\n" + "\n\n".join(sources) + "\n\n" + _model_source(the_plan, module_source)


def answer(module_source: str, max_kernels: int = 1) -> str:
    """`lower` as a Coder completion: one fenced python block (what kernelzero.kit.codeblocks parses)."""
    return f"```python\n{lower(module_source, max_kernels)}```\n"


def api_support(scale: float = 2.0 ** -13) -> dict[str, str]:
    """Catalog API -> "" when its one-API synthesized module (seed 0) lowers, else the reason it does not."""
    from kernelzero.kit.api_catalog import names
    from kernelzero.producers.synthesizer import SynthesisError, synthesize

    support = {}
    for api in names():
        try:
            lower(synthesize([api], seed=0, scale=scale).source)
            support[api] = ""
        except (NotLowerable, SynthesisError) as exc:
            support[api] = str(exc)
    return support


def _kernel_name(index: int) -> str:
    return f"kernel{index}" if index else "kernel"


# ---- kernels ----

def _literal(value) -> str:
    if isinstance(value, Code):
        return str(value)
    if isinstance(value, bool) or value is None:
        return repr(value)
    value = float(value)
    return repr(value) if math.isfinite(value) else f"float('{value}')"


def _printable(value) -> bool:
    """Numbers and None go into kernel code; strings and shapes are parameters the resolver already checked."""
    return value is None or isinstance(value, (int, float, Code))


def _value_name(the_plan: Plan, value) -> str:
    return value.name if isinstance(value, Param) else the_plan.names[value]


def _node_lines(the_plan: Plan, kernel: Kernel, node: Node, call: Call) -> list[str]:
    own = the_plan.names[node]
    if call.op.kind == "glue":
        return [f"{own} = {the_plan.names[node.all_input_nodes[0]]}"]
    fields = {}
    for name, value in call.bound.items():
        if isinstance(value, (Node, Param)):
            fields[name] = _value_name(the_plan, value)
        elif _printable(value):
            fields[name] = _literal(value)
    return [line.format(o=own, at=kernel.places[node].level, **fields) for line in call.op.lines]


def _load(the_plan: Plan, kernel: Kernel, value) -> str:
    name, place = _value_name(the_plan, value), kernel.places[value]
    size = kernel.n if place.level == "offs" else kernel.n // kernel.n_cols
    count = math.prod(shape_of(value))
    if count == 1:
        return f"{name} = tl.load({name}_ptr)"
    index = place.level if place.k == 1 else f"{place.level} // {place.k}"
    if place.k * count != size:
        index = f"{index} % {count}" if place.k == 1 else f"({index}) % {count}"
    if place.level == "row":
        return f"{name} = tl.load({name}_ptr + {index})"
    return f"{name} = tl.load({name}_ptr + {index}, mask=mask, other=0.0)"


def _kernel_source(the_plan: Plan, kernel: Kernel, name: str) -> str:
    body, loaded = [], set()
    for node in kernel.nodes:
        call = the_plan.calls[node]
        for operand, _ in operands(node, call):
            if operand in kernel.inputs and operand not in loaded:
                loaded.add(operand)
                body.append(_load(the_plan, kernel, operand))
        if call.op.kind != "glue":
            body.append(f"# {describe(node)}")
        body += _node_lines(the_plan, kernel, node, call)
    value = the_plan.names[kernel.export]
    store = f"tl.store(out_ptr + offs, {value}, mask=mask)" if kernel.places[kernel.export].level == "offs" \
        else f"tl.store(out_ptr + row, {value})"
    pointers = "".join(f"{_value_name(the_plan, v)}_ptr, " for v in kernel.inputs)
    lines = [
        "@triton.jit",
        f"def {name}({pointers}out_ptr, n_cols, BLOCK: tl.constexpr):",
        "    row = tl.program_id(0)",
        "    cols = tl.arange(0, BLOCK)",
        "    mask = cols < n_cols",
        "    offs = row * n_cols + cols",
        *(f"    {line}" for line in body),
        f"    {store}",
    ]
    return "\n".join(lines) + "\n"


# ---- the host: ModelNew ----

def _host_name(the_plan: Plan, value) -> str:
    if isinstance(value, Param):
        return value.expr
    if value.op == "get_attr":
        return f"self.{value.target}"
    return the_plan.names[value]


def _host_arg(the_plan: Plan, value) -> str:
    if isinstance(value, Node):
        return _host_name(the_plan, value)
    if isinstance(value, tuple):
        inner = ", ".join(_host_arg(the_plan, v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, list):
        return "[" + ", ".join(_host_arg(the_plan, v) for v in value) + "]"
    if isinstance(value, (torch.dtype, torch.memory_format)):
        return str(value)
    if value is Ellipsis:
        return "..."
    if isinstance(value, (int, float, str, bool)) or value is None:
        return repr(value)
    raise NotLowerable("host", f"argument {value!r}")


def _index_arg(the_plan: Plan, item) -> str:
    if isinstance(item, tuple):
        return ", ".join(_index_arg(the_plan, i) for i in item)
    if isinstance(item, slice):
        parts = ["" if p is None else _host_arg(the_plan, p) for p in (item.start, item.stop)]
        return ":".join(parts) + ("" if item.step is None else f":{_host_arg(the_plan, item.step)}")
    if isinstance(item, Node):
        raise NotLowerable("getitem", "indexing with a tensor")
    return _host_arg(the_plan, item)


def _host_call(the_plan: Plan, node: Node) -> str:
    what = describe(node)
    if what == "getitem":
        return f"{_host_arg(the_plan, node.args[0])}[{_index_arg(the_plan, node.args[1])}]"
    if node.target is getattr:
        return f"{_host_arg(the_plan, node.args[0])}.{node.args[1]}"
    args = [_host_arg(the_plan, a) for a in node.args]
    args += [f"{k}={_host_arg(the_plan, v)}" for k, v in node.kwargs.items()]
    if node.op == "call_module":
        return f"self.{node.target}({', '.join(args)})"
    if node.op == "call_method":
        return f"{args[0]}.{node.target}({', '.join(args[1:])})"
    if what == "matmul":
        return f"{args[0]} @ {args[1]}"
    if what == "F.pad" and node.kwargs.get("mode", "constant") != "constant":
        raise NotLowerable(what, f"mode={node.kwargs['mode']!r} computes, it does not only move data")
    if id(node.target) not in FUNCTIONS:
        raise NotLowerable(what, "no public torch name to call it by")
    return f"{FUNCTIONS[id(node.target)][0]}({', '.join(args)})"


def _host_lines(the_plan: Plan, nodes: list, read_by_kernels: set) -> list[str]:
    lines = []
    for node in nodes:
        value = _host_call(the_plan, node)
        if node in read_by_kernels and not contiguous(node):
            value += ".contiguous()"  # kernels read their inputs flat
        lines.append(f"{the_plan.names[node]} = {value}")
    return lines


def _shape_literal(dims: tuple) -> str:
    return f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(map(str, dims))})"


class _Sizes(NamedTuple):
    """How the host writes one kernel's output allocation and row length."""

    empty: str  # the output allocation's call
    n_cols: str  # the row length argument


def _sizes(the_plan: Plan, kernel: Kernel, device: str) -> _Sizes:
    """Read off a full-size float32 input of the kernel where its shape gives them (a map keeps it, a reduction over
    the last dimension drops that): the answer then fits any size of that input; literal sizes otherwise (views)."""
    out_dims = shape_of(kernel.export)
    literal = _Sizes(f"torch.empty({_shape_literal(out_dims)}, device={device}.device)", str(kernel.n_cols))
    for value in kernel.inputs:
        if not isinstance(value, Node) or meta(value).dtype != torch.float32 or math.prod(shape_of(value)) != kernel.n:
            continue
        dims, name = shape_of(value), _host_name(the_plan, value)
        if not dims or dims[-1] != kernel.n_cols:
            continue
        if out_dims == dims:
            return _Sizes(f"torch.empty_like({name})", f"{name}.shape[-1]")
        if out_dims == dims[:-1] and out_dims:
            return _Sizes(f"torch.empty({name}.shape[:-1], device={name}.device)", f"{name}.shape[-1]")
    return literal


def _launch(the_plan: Plan, kernel: Kernel, name: str, device: str) -> list[str]:
    out = the_plan.names[kernel.export]
    sizes = _sizes(the_plan, kernel, device)
    grid = f"{out}.numel()" if kernel.places[kernel.export].level == "row" else f"{out}.numel() // {sizes.n_cols}"
    block = str(1 << (kernel.n_cols - 1).bit_length()) if sizes.n_cols.isdigit() \
        else f"triton.next_power_of_2({sizes.n_cols})"
    args = ", ".join([_host_name(the_plan, v) for v in kernel.inputs] + [out, sizes.n_cols])
    return [f"{out} = {sizes.empty}", f"{name}[({grid},)]({args}, BLOCK={block})"]


def _model_source(the_plan: Plan, module_source: str) -> str:
    signature, init_body = _init_source(module_source)
    arguments = [n for n in the_plan.names if n.op == "placeholder"]
    if not arguments:
        raise NotLowerable("forward", "takes no tensor")
    device = the_plan.names[arguments[0]]
    read = {v for kind, step in the_plan.steps if kind == "kernel" for v in step.inputs}
    forward, count = [], 0
    for kind, step in the_plan.steps:
        if kind == "host":
            forward += _host_lines(the_plan, step, read)
        else:
            forward += _launch(the_plan, step, _kernel_name(count), device)
            count += 1
    lines = [
        "class ModelNew(nn.Module):",
        f"    def __init__({signature}):",
        *(f"        {line}" for line in init_body),
        "",
        f"    def forward(self, {', '.join(the_plan.names[a] for a in arguments)}):",
        *(f"        {line}" for line in forward),
        f"        return {_host_name(the_plan, the_plan.result)}",
    ]
    return "\n".join(lines) + "\n"


class _SuperCall(ast.NodeTransformer):
    """super(Model, self) -> super(): ModelNew may not name Model."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args = []
        return node


def _init_source(module_source: str) -> tuple[str, list[str]]:
    """Model.__init__'s signature and body lines, canonically printed."""
    tree = ast.parse(module_source)
    model = next((c for c in tree.body if isinstance(c, ast.ClassDef) and c.name == "Model"), None)
    if model is None:
        raise NotLowerable("Model", "no class Model")
    init = next((f for f in model.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    if init is None:
        return "self", ["super().__init__()"]
    body = [s for s in init.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
    function = _SuperCall().visit(ast.Module(body=body, type_ignores=[]))
    local = {a.arg for a in ast.walk(init.args) if isinstance(a, ast.arg)}
    local |= {n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    unknown = sorted({n.id for n in ast.walk(function) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
                     - local - INIT_GLOBALS)
    if unknown:
        raise NotLowerable("__init__", f"uses names outside the fixed imports: {', '.join(unknown)}")
    return ast.unparse(init.args), ast.unparse(function).splitlines()
