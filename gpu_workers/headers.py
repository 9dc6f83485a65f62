"""Compile candidates' `load_inline` extensions against lighter torch headers, device code apart; does NOT change any kernel's code.

`#include <torch/extension.h>` pulls in the whole C++ frontend (nn, optim, data, jit) and is
most of a CUDA candidate's build time; kernels need `torch/types.h`, and the generated Python
bindings need `torch/python.h`. With `use(True)` every `load_inline` in this process compiles
`torch/types.h` where a source includes `torch/extension.h`, and the bindings file
(`main.cpp`) gets `torch/types.h` plus `torch/python.h` instead of the implicit
`torch/extension.h`. Headers declare; they emit no code a kernel runs. A source that needs
the rest of the frontend fails to compile this way, with a name-lookup error: the build then
runs again with the headers as written (`gpu_workers/pool.py`), and the worker that loads it
must be told so, because the built library is found by the sources' hash. Other compile errors
(syntax, types) are the candidate's own and are not built twice.

Three modes, cheapest first: "split" also compiles the CUDA sources' device code without torch's
headers (gpu_workers/cuda_split.py; sources it cannot split build as in "slim"), "slim" as above,
"full" leaves `load_inline` alone. A precompiled header (gpu_workers/prebuilt_headers.py),
where given, is passed to the bindings' compile in the two lighter modes.
"""

from __future__ import annotations

import inspect
import re
from typing import Any

from kernelzero.gpu_workers import cuda_split

FULL_HEADER = re.compile(r'#\s*include\s*[<"]torch/extension\.h[>"]')
KERNEL_HEADERS = "#include <torch/types.h>"
BINDING_HEADERS = "#include <torch/types.h>\n#include <torch/python.h>"
CUDA_IMPLICIT = "#include <torch/types.h>\n#include <cuda.h>\n#include <cuda_runtime.h>"  # load_inline's own

# what a missing declaration looks like to g++ and to nvcc's front end (EDG): missing names,
# members, overloads or complete types; anything else would fail with every header too
MISSING_DECLARATION = re.compile("|".join([
    r"was not declared", r"is not a member of", r"has not been declared", r"does not name a (?:type|template)",
    r"is not a namespace", r"no matching (?:function|constructor)", r"incomplete type", r"no member named",
    r"no type named", r"is not a template", r"undeclared", r"is undefined", r"has no member",
    r"no instance of", r"must be a class or namespace name", r"no suitable",
]))

MODES = ("split", "slim", "full")  # full: the headers as written
_mode = "full"
_pch = ""
_installed = False
_split_calls = 0


def may_need_full_headers(build_log: str) -> bool:
    """Whether a failed slim build's errors could come from a declaration only torch/extension.h provides."""
    return MISSING_DECLARATION.search(build_log) is not None


def _slimmed(sources: str | list[str]) -> list[str]:
    """load_inline's sources (a str or a list) as a list, with torch/extension.h includes made torch/types.h."""
    return [FULL_HEADER.sub(KERNEL_HEADERS, s) for s in ([sources] if isinstance(sources, str) else sources)]


def slim_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """load_inline's bound arguments with lighter headers; implicit ones replaced only when we add them ourselves."""
    arguments = dict(arguments)
    arguments["cpp_sources"] = _slimmed(arguments["cpp_sources"])
    cuda = arguments.get("cuda_sources")
    arguments["cuda_sources"] = _slimmed(cuda) if cuda else cuda
    if "no_implicit_headers" in arguments and not arguments["no_implicit_headers"]:
        arguments["no_implicit_headers"] = True
        arguments["cpp_sources"] = [BINDING_HEADERS, *arguments["cpp_sources"]]
        if arguments["cuda_sources"]:
            arguments["cuda_sources"] = [CUDA_IMPLICIT, *arguments["cuda_sources"]]
    return arguments


def arguments_for(mode: str, arguments: dict[str, Any], pch: str = "") -> dict[str, Any]:
    """load_inline's bound arguments as `mode` builds them, with the precompiled header `pch` where given."""
    global _split_calls
    if mode == "full":
        return arguments
    parts = cuda_split.split("\n".join(_listed(arguments.get("cuda_sources")))) if mode == "split" else None
    arguments = slim_arguments(arguments)
    if parts is not None:
        _split_calls += 1
        arguments["cpp_sources"] = [*arguments["cpp_sources"], FULL_HEADER.sub(KERNEL_HEADERS, parts.host)]
        arguments["cuda_sources"] = [parts.device]  # load_inline adds no torch header to it: slim_arguments said so
    if pch:
        arguments["extra_cflags"] = [*(arguments.get("extra_cflags") or []), "-include", pch]
    return arguments


def _listed(sources: str | list[str] | None) -> list[str]:
    return [sources] if isinstance(sources, str) else list(sources or [])


def use(mode: str, pch: str = "") -> None:
    """Make this process's `load_inline` build as `mode` does (MODES), with the precompiled header `pch` if any."""
    global _mode, _pch, _installed
    if mode not in MODES:
        raise ValueError(f"headers mode {mode!r}: expected one of {', '.join(MODES)}")
    _mode, _pch = mode, pch
    if _installed or mode == "full":
        return
    from torch.utils import cpp_extension
    original = cpp_extension.load_inline
    signature = inspect.signature(original)

    def load_inline(*args, **kwargs):
        if _mode == "full":
            return original(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return original(**arguments_for(_mode, bound.arguments, _pch))

    cpp_extension.load_inline = load_inline
    _installed = True


def in_effect() -> str:
    """The mode this process's builds took: "split" only where some CUDA source was split."""
    return "slim" if _mode == "split" and not _split_calls else _mode
