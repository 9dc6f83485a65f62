"""Prompt templates: the one folder of them (kernelzero/kit/prompts/), read by name and filled, and the hash a rendered prompt is known by in events; it does not say what a prompt should contain.

A template is a Markdown file whose `{{name}}` placeholders are replaced in one pass. The Coder's
(coder_prompts.py) and the Proposer's (producers/proposer.py) prompts both come from here, and
both roles' events carry `prompt_hash` of the prompt as rendered.
"""

from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

PROMPTS_DIR = Path(__file__).parent / "prompts"
_PLACEHOLDER = re.compile(r"\{\{(\w+)\}\}")


@functools.cache
def template(name: str) -> str:
    path = PROMPTS_DIR / f"{name}.md"
    if not path.exists():
        raise FileNotFoundError(f"prompt template {path} is missing")
    return path.read_text()


def fill(text: str, values: dict[str, str]) -> str:
    """Replace every {{name}} in one pass (inserted text is never scanned again); a missing value is an error."""

    def value(match: re.Match) -> str:
        key = match.group(1)
        if key not in values:
            raise KeyError(f"prompt placeholder {{{{{key}}}}} has no value")
        return values[key]

    return _PLACEHOLDER.sub(value, text)


def prompt_hash(prompt: str) -> str:
    """What a rendered prompt is known by (`prompt_hash` of samples.generated and modules.proposed): its sha256."""
    return hashlib.sha256(prompt.encode()).hexdigest()
