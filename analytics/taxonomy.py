"""Failure classes of evaluated samples, read from the evaluator's reason and evidence text; a heuristic, not a parser.

Compile errors are matched against nvcc, host C++ compiler, ptxas, linker and Triton messages;
runtime errors against CUDA and Python exception texts; other failing verdicts keep their
reason (mismatch magnitudes are bucketed in SQL, see views.sql). Rules are tried in order, first match wins; nothing matched gives
`other`. Changing a rule changes the projection: rebuild it (`kernelzero sql --rebuild`).
"""

from __future__ import annotations

import re

Rule = tuple[str, re.Pattern[str]]


def _rules(*pairs: tuple[str, str]) -> tuple[Rule, ...]:
    return tuple((name, re.compile(pattern, re.IGNORECASE)) for name, pattern in pairs)


COMPILE_RULES = _rules(
    ("missing_header", r"fatal error: .*no such file or directory"),
    ("undefined_identifier", r"identifier \"[^\"]+\" is undefined|was not declared in this scope|"
                             r"NameError|is not defined"),
    ("no_matching_overload", r"no instance of (overloaded )?function|no matching function for call|"
                             r"no suitable (conversion|constructor)"),
    ("no_member", r"has no member|has no attribute|AttributeError"),
    ("shared_memory_exceeded", r"too much shared data|uses too much shared|OutOfResources|out of resource"),
    ("constexpr_required", r"constexpr"),
    ("non_power_of_2", r"power of (2|two)"),
    ("shape_error", r"incompatible dimensions|cannot broadcast|shape mismatch|incompatible shapes"),
    ("type_error", r"a value of type .* cannot be|incompatible type|cannot convert|invalid type|TypeError|"
                   r"IncompatibleTypeError"),
    ("syntax_error", r"SyntaxError|IndentationError|expected an? (\";\"|expression|identifier|declaration)|"
                     r"expected ';'|unexpected (token|indent)"),
    ("link_error", r"undefined symbol|undefined reference|ImportError|cannot open shared object"),
    ("triton_compile", r"CompilationError|triton\.compiler"),
    ("build_failed", r"ninja: build stopped|Error building extension|nvcc|error:"),
)

RUNTIME_RULES = _rules(
    ("illegal_memory_access", r"illegal memory access|illegal address|segmentation fault|SIGSEGV"),
    ("misaligned_address", r"misaligned address"),
    ("out_of_memory", r"out of memory|OutOfMemoryError|MemoryError"),
    ("launch_resources", r"too many resources requested for launch|OutOfResources|out of resource"),
    ("invalid_launch_config", r"invalid configuration argument|invalid argument"),
    ("device_assert", r"device-side assert"),
    ("shape_error", r"size mismatch|shape|must match the size|dimension"),
    ("dtype_error", r"expected scalar type|dtype"),
    ("python_error", r"TypeError|AttributeError|NameError|KeyError|IndexError|ValueError"),
)


def _first_match(rules: tuple[Rule, ...], text: str) -> str:
    for name, pattern in rules:
        if pattern.search(text):
            return name
    return "other"


def classify_failure(verdict: str, reason: str, evidence: dict[str, str]) -> str | None:
    """A failure class for compile and runtime errors; the reason itself for the other failing verdicts; None if correct."""
    if verdict == "correct":
        return None
    text = "\n".join([reason, *evidence.values()])
    if verdict == "compile_error":
        return _first_match(COMPILE_RULES, text)
    if verdict == "runtime_error":
        return _first_match(RUNTIME_RULES, text)
    return reason or verdict

