"""The teacher's plan for a traced module: which nodes the host runs, which each kernel fuses, and where each kernel value lives in its row grid; it renders nothing (teacher.py does).

Nodes fall into alternating phases: host work (torch ops, data movement) at even phases, kernels at
odd ones. A compute node joins the kernel of its inputs unless a torch op came between, or its row
length differs from that kernel's reductions: then it starts the next kernel. Host views and
bool values that only a later kernel reads move into it (a kernel stores one float32 tensor). Each kernel runs one
program per row; a value lives at `offs` (one per element) or `row` (one per row), and element i
of the iteration reads element (i // k) % numel of it: that covers scalar, row and column
broadcasting. A value needed at two patterns, or any other shape the grid cannot hold, is declined.
"""

from __future__ import annotations

import math
import re
from typing import NamedTuple

import torch
from torch.fx import Node

from kernelzero.bootstrap.teacher_graph import (
    Call, NotLowerable, Param, contiguous, describe, identify, meta, numel, shape,
)

MAX_BLOCK = 16384  # longest row one program holds (power of two)
RESERVED = {"row", "cols", "mask", "offs", "kernel", "n_cols", "BLOCK", "tl", "triton", "torch", "nn", "F", "self"}
COMPUTE = ("map", "reduce", "scan")
ROWS = ("reduce", "scan")
INTEGER_RESULTS = ("count_nonzero", "argmax", "argmin", "alias")  # int64 in torch, float in the kernel


class Place(NamedTuple):
    """Where a kernel value lives: at `offs` (per element) or `row`; iteration i reads its element (i // k) % numel."""

    level: str
    k: int = 1


class Kernel(NamedTuple):
    nodes: list
    export: Node  # the one value it stores
    n_cols: int  # row length
    n: int  # elements of a full-size value (rows * n_cols)
    places: dict  # kernel value or input -> Place
    inputs: list  # what it loads, in order of first use


class Plan(NamedTuple):
    names: dict  # node -> name in the generated code
    calls: dict  # call node -> Call
    steps: list  # ("host", [nodes]) and ("kernel", Kernel), in execution order
    result: Node  # what forward returns


def plan(nodes: list[Node], max_kernels: int) -> Plan:
    calls = {n: identify(n) for n in nodes if n.op.startswith("call_")}
    names = _names(nodes, calls)
    phase = _phases(nodes, calls)
    kernels = sorted({p for n, p in phase.items() if p % 2 and _kind(n, calls) in COMPUTE})
    if not kernels:
        torch_ops = sorted({describe(n) for n in calls if _kind(n, calls) == "torch"}) or ["views only"]
        raise NotLowerable(", ".join(torch_ops), "no elementwise or reduction work left for a Triton kernel")
    if len(kernels) > max_kernels:
        first = next(n for n in nodes if phase.get(n) == kernels[max_kernels])
        raise NotLowerable(describe(first), f"needs {len(kernels)} kernels (at most {max_kernels} allowed): "
                                            "a torch op or a different row length comes between")
    steps = []
    for p in range(kernels[-1] + 2):
        members = [n for n in nodes if n in calls and phase[n] == p]
        if p in kernels:
            steps.append(("kernel", _kernel(members, calls)))
        elif members:
            steps.append(("host", members))
    result = next(n for n in nodes if n.op == "output").args[0]
    if not isinstance(result, Node):
        raise NotLowerable("output", "forward returns more than one tensor")
    _check_contiguous(nodes, steps)
    return Plan(names, calls, steps, result)


def _names(nodes: list[Node], calls: dict) -> dict:
    names: dict = {}
    count = 0
    for node in nodes:
        if node.op == "placeholder":
            if node.args:
                raise NotLowerable("forward", f"argument {node.target} has a default")
            names[node] = str(node.target).lstrip("*")
        elif node.op == "get_attr":
            names[node] = str(node.target).replace(".", "_")
        elif node.op.startswith("call_"):
            names[node], count = f"t{count}", count + 1
    params = [v.name for c in calls.values() for v in c.bound.values() if isinstance(v, Param)]
    for name in [names[n] for n in nodes if n.op in ("placeholder", "get_attr")] + params:
        if name in RESERVED or re.fullmatch(r"(t\d+[a-z]?|kernel\d*)", name) or name.endswith("_ptr"):
            raise NotLowerable("names", f"{name!r} clashes with the kernel's own names")
    return names


def _kind(node: Node, calls: dict) -> str:
    return calls[node].op.kind if node in calls else "input"


def _phases(nodes: list[Node], calls: dict) -> dict:
    """Node -> phase: even for the host, odd for kernels (see the module docstring)."""
    phase: dict = {}
    rows_of: dict = {}  # kernel phase -> (row length, elements) of its reductions
    for node in nodes:
        kind = _kind(node, calls)
        before = max((phase.get(a, 0) for a in node.all_input_nodes), default=0)
        if kind in ("layout", "torch"):
            phase[node] = before + before % 2
        elif kind in COMPUTE:
            p = before + 1 - before % 2
            if kind in ROWS:
                call = calls[node]
                rows = (row_length(call), numel(call.bound[call.op.rows[0]]))
                while rows_of.setdefault(p, rows) != rows:
                    p += 2
            phase[node] = p
        else:
            phase[node] = before
    for node in reversed(nodes):
        if _sinks(node, calls, phase):
            phase[node] = phase[next(iter(node.users))]
    return phase


def _sinks(node: Node, calls: dict, phase: dict) -> bool:
    """Whether a host view, or a value no kernel can store (a bool), moves into the one later kernel that reads it."""
    kind = _kind(node, calls)
    movable = (kind == "glue" and phase[node] % 2 == 0) or (kind == "map" and meta(node).dtype != torch.float32)
    later = {phase.get(u) for u in node.users}
    if not movable or len(later) != 1 or not all(_kind(u, calls) in ("glue", *COMPUTE) for u in node.users):
        return False
    target = later.pop()
    return target % 2 == 1 and target > phase[node]


def row_length(call: Call) -> int:
    """How many elements one row of a REDUCE or SCAN op holds (its reduced trailing dimensions)."""
    dims = shape(call.bound[call.op.rows[0]])
    rank, span, b = len(dims), call.op.span, call.bound
    if rank == 0:
        raise NotLowerable(call.key, "reduces a 0-dimensional tensor")
    if span == "groups":
        groups = b["num_groups"]
        if rank < 2 or dims[1] % groups:
            raise NotLowerable(call.key, "channels do not split into the groups")
        return math.prod(dims) // (dims[0] * groups)
    if span == "norm":
        given = b["normalized_shape"]
        normalized = (given,) if isinstance(given, int) else tuple(given)
        if tuple(dims[rank - len(normalized):]) != normalized:
            raise NotLowerable(call.key, "normalized_shape is not the trailing shape")
        count = len(normalized)
    elif span == "spatial":
        count = rank - 2
    else:
        count = _trailing(b.get("dim") if span == "dim" else (None if span == "all" else -1), rank, call.key)
    return math.prod(dims[rank - count:])


def _trailing(dim, rank: int, what: str) -> int:
    """How many trailing dimensions `dim` names (None: all of them); NotLowerable unless they are trailing."""
    if dim is None:
        return rank
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    if not all(isinstance(d, int) for d in dims):
        raise NotLowerable(what, f"dim={dim!r}")
    wanted = sorted(d % rank for d in dims)
    if wanted != list(range(rank - len(wanted), rank)):
        raise NotLowerable(what, f"reduces dim={dim!r}, not the trailing dimensions")
    return len(wanted)


def _kernel(members: list[Node], calls: dict) -> Kernel:
    inside = set(members)
    exports = [n for n in members if any(u not in inside for u in n.users)]
    if len(exports) != 1:
        raise NotLowerable(describe(exports[1]), "a kernel would have to store more than one tensor")
    export = exports[0]
    n_cols, n = _rows(members, calls, export)
    places = _places(members, calls, export, n_cols, n)
    inputs = []
    for node in members:
        for operand, _ in operands(node, calls[node]):
            if operand not in inside and operand not in inputs:
                inputs.append(operand)
    _check_dtypes(members, calls, inputs, export)
    return Kernel(members, export, n_cols, n, places, inputs)


def _rows(members: list, calls: dict, export: Node) -> tuple[int, int]:
    """(row length, elements of a full-size value): from the reductions, or the output's last dimension without any."""
    rows = {(row_length(calls[n]), numel(calls[n].bound[calls[n].op.rows[0]]))
            for n in members if calls[n].op.kind in ROWS}
    n_cols, n = rows.pop() if rows else ((shape(export) or (1,))[-1], numel(export))
    if n_cols > MAX_BLOCK:
        raise NotLowerable("row", f"{n_cols} elements, more than one program holds ({MAX_BLOCK})")
    if rows or n % n_cols or (n_cols == 1 and any(calls[m].op.kind in ROWS for m in members)):
        raise NotLowerable("row", f"a row of {n_cols} of {n} elements")
    return n_cols, n


def broadcast_k(out: tuple, part: tuple, what: str) -> int:
    """k such that element j of `out` reads element (j // k) % numel(part) of `part` under broadcasting."""
    if len(part) > len(out):
        raise NotLowerable(what, "an operand has more dimensions than the result")
    padded = (1,) * (len(out) - len(part)) + tuple(part)
    if any(p not in (o, 1) for o, p in zip(out, padded)):
        raise NotLowerable(what, f"shapes {part} and {out} do not broadcast")
    kept = [d for d, (o, p) in enumerate(zip(out, padded)) if p == o and o != 1]
    if not kept:
        return math.prod(out)
    if any(padded[d] == 1 and out[d] != 1 for d in range(kept[0], kept[-1])):
        raise NotLowerable(what, f"broadcasts {part} over a middle dimension of {out}")
    return math.prod(out[kept[-1] + 1:])


def operands(node: Node, call: Call) -> list[tuple]:
    """(operand, role): 'row' (read as whole rows), 'alias' (same elements) or 'map' (broadcast)."""
    if call.op.kind == "glue":
        return [(node.all_input_nodes[0], "alias")]
    rows = call.op.rows if call.op.kind in ROWS else ()
    return [(v, "row" if name in rows else "map") for name, v in call.bound.items() if isinstance(v, (Node, Param))]


def _places(members: list, calls: dict, export: Node, n_cols: int, n: int) -> dict:
    """Every kernel value's and input's Place, from the output back; NotLowerable when one needs two."""
    rows = n // n_cols
    if numel(export) not in (n, rows):
        raise NotLowerable("output", f"{numel(export)} elements, neither {n} nor {rows} rows")
    places = {export: Place("offs" if numel(export) == n else "row")}
    for node in reversed(members):
        place, call = places.get(node), calls[node]
        if place is None:
            raise NotLowerable(describe(node), "its value is not used by the kernel's output")
        if call.op.kind == "reduce" and (place != Place("row") or numel(node) != rows):
            raise NotLowerable(describe(node), "its result is not one value per row")
        if call.op.kind == "scan" and (place != Place("offs") or numel(node) != n):
            raise NotLowerable(describe(node), "its result is not one row per row")
        if call.op.positional and (place.k != 1 or numel(node) != (n if place.level == "offs" else rows)):
            raise NotLowerable(describe(node), "its value is broadcast, so it cannot read its own position")
        first_row = None
        for operand, role in operands(node, call):
            if role == "row":
                first_row = first_row or shape(operand)
                if shape(operand) != first_row or numel(operand) != n:
                    raise NotLowerable(describe(node), "its inputs are not whole rows of one shape")
                wanted = Place("offs")
            elif role == "alias":
                wanted = place
            else:
                wanted = _compose(place, broadcast_k(shape(node), shape(operand), describe(node)), n_cols)
            if places.setdefault(operand, wanted) != wanted:
                raise NotLowerable(_label(operand), "needed at two different broadcast patterns")
    return places


def _compose(place: Place, k: int, n_cols: int) -> Place:
    k *= place.k
    if place.level == "offs" and n_cols > 1 and k % n_cols == 0:
        return Place("row", k // n_cols)
    return Place(place.level, k)


def _label(value) -> str:
    return value.name if isinstance(value, (Node, Param)) else str(value)


def _check_dtypes(members: list, calls: dict, inputs: list, export: Node) -> None:
    for value in inputs:
        if isinstance(value, Node) and meta(value).dtype != torch.float32:
            raise NotLowerable(_label(value), f"input of dtype {meta(value).dtype} (float32 only)")
    for node in members:
        dtype = meta(node).dtype
        integer_result = dtype == torch.int64 and calls[node].key in INTEGER_RESULTS
        if dtype not in (torch.float32, torch.bool) and not integer_result:
            raise NotLowerable(describe(node), f"result of dtype {dtype}")
    if meta(export).dtype != torch.float32:
        raise NotLowerable("output", f"dtype {meta(export).dtype} (float32 only)")


def _check_contiguous(nodes: list[Node], steps: list) -> None:
    """Forward arguments and attributes a kernel reads flat must be contiguous (host results are made so)."""
    for _, kernel in (s for s in steps if s[0] == "kernel"):
        for value in kernel.inputs:
            if isinstance(value, Node) and value.op in ("placeholder", "get_attr") and not contiguous(value):
                raise NotLowerable(_label(value), "a non-contiguous input")
