"""Extract the Python code a model answered with: the last fenced block defining a given name; judges nothing about the code itself.

Shared by the Coder (blocks defining `ModelNew`) and the Proposer (blocks defining `Model`);
`answer(source)` is the inverse, the completion SFT data trains on (its block parses back to `source`).
A block whose fence is never closed (an answer cut off by max_tokens) still counts, so that a
truncated kernel is judged by the evaluator (a syntax error) rather than reported as no code.
"""

from __future__ import annotations

import ast
import re

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*$", re.MULTILINE)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language tag, body) of every fenced block in order; an unclosed last fence runs to the end."""
    blocks: list[tuple[str, str]] = []
    position = 0
    while (opening := _FENCE.search(text, position)) is not None:
        fence, tag = opening.group(1), opening.group(2).lower()
        body_start = opening.end() + 1
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$", re.MULTILINE)
        end = closing.search(text, body_start)
        body = text[body_start:end.start() if end else len(text)]
        blocks.append((tag, body.rstrip("\n") + "\n" if body.strip() else ""))
        if end is None:
            break
        position = end.end()
    return blocks


def defines(source: str, name: str) -> bool:
    """Whether `source` defines `name` at top level (class, def or assignment); text search if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return re.search(rf"^(class|def)\s+{re.escape(name)}\b|^{re.escape(name)}\s*=", source, re.MULTILINE) is not None
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return True
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return True
    return False


def last_python_block(text: str, must_define: str) -> str | None:
    """The last fenced Python (or untagged) block of `text` that defines `must_define`; None when there is none."""
    for tag, body in reversed(fenced_blocks(text)):
        if tag in _PYTHON_TAGS and body and defines(body, must_define):
            return body
    return None


def answer(source: str) -> str:
    """`source` as a model's answer: one fenced python block, the form `last_python_block` reads back."""
    return f"```python\n{source.strip(chr(10))}\n```\n"
