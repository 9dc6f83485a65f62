"""Split a CUDA source into device code, compiled by nvcc without torch's headers, and host code, compiled by g++ with them.

Most of a cold CUDA build is nvcc's front end reading torch's headers (docs/BENCHMARKS.md), which
only the torch-facing wrapper needs. `split` cuts the source at its top-level declarations: kernels
and `__device__` code go to the device part, functions that touch tensors to the host part, and
every `name<<<grid, block[, shared[, stream]]>>>(args)` in host code becomes a call of a launcher
defined beside the kernel, `kz_launch_name(grid, block, shared, stream, args)`, which launches it
with the same configuration and arguments. It returns None for what it cannot split faithfully
(templated launches, launches it cannot parse, unbalanced text); the caller then builds the source
whole. It is a text transformation, not a C++ parser: a split that does not compile is built whole too.
"""

from __future__ import annotations

import re

from msgspec import Struct

TORCH_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"](?:torch|ATen|c10|pybind11|caffe2)/')
DEVICE_WORDS = re.compile(r"\b(?:__global__|__device__|__constant__|__shared__|__managed__)\b")
TORCH_WORDS = re.compile(r"\b(?:torch|at|c10|pybind11|py|Tensor|TORCH_\w+|AT_\w+|C10_\w+)\b")
KERNEL = re.compile(r"\b__global__\b(?P<between>(?:__launch_bounds__\s*\([^)]*\)|[^(])*?)\b(?P<name>(?!__launch_bounds__\b)[A-Za-z_]\w*)\s*\(")
LAUNCH = re.compile(r"\b(?P<name>[A-Za-z_]\w*)\s*<<<")
DEVICE_PREAMBLE = "#include <cuda_runtime.h>\n#include <cstdint>\n#include <cstddef>\n#include <cmath>\n#include <cfloat>\n"
HALF_WORDS = re.compile(r"\b(?:__half2?|half2?|__nv_bfloat162?|__float2half\w*|__half2float|__bfloat162float|__float2bfloat16\w*)\b")
HALF_HEADERS = "#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n"
HOST_PREAMBLE = "#include <cuda_runtime.h>\n"
CLOSERS = {"(": ")", "[": "]", "{": "}"}


class Split(Struct, frozen=True):
    device: str  # nvcc's translation unit: no torch header
    host: str  # goes with the C++ sources into the bindings' translation unit
    kernels: tuple[str, ...]  # the kernels that got a launcher


def split(source: str) -> Split | None:
    """The source's device and host parts, or None where it cannot be split faithfully."""
    chunks = top_level_chunks(source)
    if chunks is None or "<<<" not in source:
        return None
    device, host, kernels = [], [], []
    for chunk in chunks:
        text = chunk.strip()
        if text.startswith("#"):  # directives go to both parts, torch's headers to the host part only
            device += [] if TORCH_INCLUDE.match(text) else [chunk]
            host.append(chunk)
            continue
        code = _code_only(text)
        if DEVICE_WORDS.search(code):
            device.append(chunk)
            launcher = _launcher(code)
            if launcher is None:
                continue
            if launcher is False:
                return None
            name, definition, declaration = launcher
            kernels.append(name)
            device.append(definition)
            host.append(declaration)
        elif _is_function(code) or TORCH_WORDS.search(code) or _is_variable(code):
            host.append(chunk)
        else:  # types, constants, aliases: both parts may need them
            device.append(chunk)
            host.append(chunk)
    host_text = _rewrite_launches("".join(host), set(kernels))
    if host_text is None or not kernels:
        return None
    device_text = "".join(device)
    preamble = DEVICE_PREAMBLE + (HALF_HEADERS if HALF_WORDS.search(_code_only(source)) else "")
    return Split(device=preamble + device_text, host=HOST_PREAMBLE + host_text, kernels=tuple(kernels))


def top_level_chunks(source: str) -> list[str] | None:
    """The source cut after each top-level declaration, definition or preprocessor line; None if unbalanced."""
    chunks, start, depth, opened, i, n = [], 0, [], 0, 0, len(source)
    at_line_start = True
    while i < n:
        c = source[i]
        if at_line_start and not depth and c == "#":
            if source[start:i].strip():
                return None  # a directive inside an unfinished declaration: leave the source whole
            end = _line_end(source, i)
            chunks.append(source[start:end])
            start = i = end
            continue
        at_line_start = c == "\n" or (at_line_start and c in " \t\r")
        skip = _skip_literal_or_comment(source, i)
        if skip is None:
            return None
        if skip > i:
            i = skip
            continue
        if c in CLOSERS:
            opened = i if not depth else opened
            depth.append(CLOSERS[c])
        elif c in ")]}":
            if not depth or depth.pop() != c:
                return None
            if c == "}" and not depth and not _declaration_goes_on(source[start:opened]):
                chunks.append(source[start:i + 1])
                start = i + 1
        elif c == ";" and not depth:
            chunks.append(source[start:i + 1])
            start = i + 1
        i += 1
    if depth:
        return None
    chunks.append(source[start:])
    return chunks


def _declaration_goes_on(head: str) -> bool:
    """Whether the braces after `head` close a type or an initializer (`struct S {...} s;`, `int a[] = {...};`), not a body."""
    head = _code_only(head)
    return "=" in head or re.match(r"\s*(?:template\s*<.*>\s*)?(?:typedef\s+)?(?:struct|class|union|enum)\b",
                                   head, re.S) is not None


def _line_end(source: str, i: int) -> int:
    """The end of the preprocessor line at i, continuation lines included."""
    while True:
        j = source.find("\n", i)
        if j < 0:
            return len(source)
        if source[j - 1] != "\\":
            return j + 1
        i = j + 1


def _skip_literal_or_comment(source: str, i: int) -> int | None:
    """Past the comment or literal starting at i (i itself where none does); None if it never ends."""
    if source.startswith("//", i):
        j = source.find("\n", i)
        return len(source) if j < 0 else j
    if source.startswith("/*", i):
        j = source.find("*/", i + 2)
        return None if j < 0 else j + 2
    if source.startswith('R"', i):
        m = re.match(r'R"([^(\s]*)\(', source[i:])
        if m:
            j = source.find(")" + m.group(1) + '"', i)
            return None if j < 0 else j + len(m.group(1)) + 2
    if source[i] in "\"'":
        quote, j = source[i], i + 1
        while j < len(source) and source[j] != quote:
            j += 2 if source[j] == "\\" else 1
            if source[j - 1] == "\n":
                return None
        return None if j >= len(source) else j + 1
    return i


def _code_only(text: str) -> str:
    """`text` with comments and literals blanked (same length, newlines kept), so words inside them do not count."""
    out, i = [], 0
    while i < len(text):
        skip = _skip_literal_or_comment(text, i)
        if skip is None:
            return text
        if skip > i:
            out.append("".join(c if c == "\n" else " " for c in text[i:skip]))
            i = skip
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _is_function(code: str) -> bool:
    brace = code.find("{")
    return brace > 0 and code.rstrip().endswith("}") and ")" in code[:brace] and not re.match(
        r"\s*(?:template\s*<[^>]*>\s*)?(?:struct|class|union|enum|namespace)\b", code)


def _is_variable(code: str) -> bool:
    """A definition of a mutable global: one copy only, so it stays with the host code."""
    return code.rstrip().endswith(";") and not re.match(
        r"\s*(?:(?:static\s+)?(?:constexpr|const)\b|typedef|using|struct|class|union|enum|template|extern)", code) \
        and "(" not in code.split("=", 1)[0]


def _launcher(code: str) -> tuple[str, str, str] | bool | None:
    """(name, launcher definition, its declaration) for a __global__ kernel; None if the chunk is no kernel; False if unfit."""
    match = KERNEL.search(code)
    if match is None:
        return None
    if not code.rstrip().endswith("}"):
        return None  # a declaration: the launcher goes with the definition
    if code.lstrip().startswith("template") or not re.search(r"\bvoid\b", match.group("between")):
        return False
    name = match.group("name")
    close = _matching(code, match.end() - 1)
    if close is None:
        return False
    params = [p.strip() for p in _split_top(code[match.end():close], ",") if p.strip() and p.strip() != "void"]
    names = []
    for param in params:
        found = re.search(r"([A-Za-z_]\w*)\s*(?:\[[^\]]*\]\s*)*$", param)
        if "=" in param or "(" in param or found is None or found.group(1) in {"int", "float", "double", "char",
                                                                              "long", "unsigned", "bool", "size_t"}:
            return False
        names.append(found.group(1))
    host_params = [re.sub(r"\b__grid_constant__\b", "", p).strip() for p in params]
    head = f"void kz_launch_{name}(dim3 kz_grid, dim3 kz_block, size_t kz_shared, cudaStream_t kz_stream"
    definition = (f"\n{head}{''.join(', ' + p for p in params)}) {{\n"
                  f"    {name}<<<kz_grid, kz_block, kz_shared, kz_stream>>>({', '.join(names)});\n}}\n")
    declaration = f"\n{head}{''.join(', ' + p for p in host_params)});\n"
    return name, definition, declaration


def _rewrite_launches(host: str, kernels: set[str]) -> str | None:
    """Host code with every launch of a known kernel made a launcher call; None if any `<<<` is left."""
    out, i, code = [], 0, _code_only(host)
    for match in LAUNCH.finditer(code):
        if match.start() < i:
            continue
        name = match.group("name")
        config_end = code.find(">>>", match.end())
        if name not in kernels or config_end < 0:
            return None
        config = [c.strip() for c in _split_top(host[match.end():config_end], ",")]
        args_open = config_end + 3
        while args_open < len(host) and host[args_open] in " \t\n":
            args_open += 1
        if not 2 <= len(config) <= 4 or args_open >= len(host) or host[args_open] != "(":
            return None
        close = _matching(code, args_open)
        if close is None:
            return None
        config += ["0", "0"][len(config) - 2:]
        args = host[args_open + 1:close].strip()
        call = f"kz_launch_{name}(dim3({config[0]}), dim3({config[1]}), (size_t)({config[2]}), " \
               f"(cudaStream_t)({config[3]}){', ' + args if args else ''})"
        out += [host[i:match.start()], call]
        i = close + 1
    out.append(host[i:])
    text = "".join(out)
    return None if "<<<" in _code_only(text) else text


def _matching(code: str, open_at: int) -> int | None:
    """The index of the bracket closing the one at open_at, in code whose comments and literals are blanked."""
    depth = 0
    for i in range(open_at, len(code)):
        if code[i] in "([{":
            depth += 1
        elif code[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _split_top(text: str, separator: str) -> list[str]:
    """`text` split at separators outside brackets and template arguments."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        elif c == separator and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts
