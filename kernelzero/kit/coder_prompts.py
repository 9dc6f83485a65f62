"""The Coder's prompts, rendered from its templates (kernelzero/kit/templates.py; shared by the Coder and dataset replay); says nothing about how a model will read them.

A prompt is the target's template (coder_cuda.md or coder_triton.md) with the shared rules
(coder_rules.md) and the reference module filled in, followed, for a repair turn, by one
repair.md section per earlier attempt (its code, verdict, reason and log). The `compact` style
(coder_TARGET_compact.md: the reference and "Answer:", no rules, no worked example) is for
from-scratch models, whose context and training budget a 2,000-character preamble would waste.
"""

from __future__ import annotations

from typing import Sequence

import msgspec

from kernelzero.kit.templates import fill, template

TARGETS = ("cuda", "triton")
STYLES = ("full", "compact")
MAX_LOG_CHARS = 3000  # the end of a compiler log holds the error; the start is mostly command lines


class Attempt(msgspec.Struct, kw_only=True):
    """An earlier answer and what the evaluator said about it."""

    source: str | None  # None: the answer held no python block defining ModelNew
    verdict: str
    reason: str
    log: str = ""


def render_repair(attempt: Attempt, turn: int) -> str:
    previous = (
        f"```python\n{attempt.source.rstrip()}\n```" if attempt.source is not None
        else "(your answer contained no ```python block defining `ModelNew`)"
    )
    log = attempt.log.strip()[-MAX_LOG_CHARS:]
    return fill(template("repair"), {
        "turn": str(turn), "previous_attempt": previous, "verdict": attempt.verdict, "reason": attempt.reason,
        "log": f"\nEvaluator log (end):\n```\n{log}\n```\n" if log else "",
    })


def render_coder_prompt(reference_source: str, target: str, attempts: Sequence[Attempt] = (), *, style: str) -> str:
    """The prompt asking for a `ModelNew` of `reference_source` on `target`, with earlier attempts for repair."""
    if target not in TARGETS:
        raise ValueError(f"unknown coder target {target!r} (cuda or triton)")
    if style not in STYLES:
        raise ValueError(f"unknown prompt style {style!r} (full or compact)")
    repairs = "".join(render_repair(a, turn) for turn, a in enumerate(attempts))
    return fill(template(f"coder_{target}" + ("_compact" if style == "compact" else "")), {
        "rules": template("coder_rules").rstrip("\n"),
        "reference_source": reference_source.strip("\n"),
        "repair": repairs,
    })
