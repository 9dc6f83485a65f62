"""The Coder's prompt templates: rendering, repair sections, and worked examples that really work."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap

import pytest

from kernelzero.kit.codeblocks import fenced_blocks
from kernelzero.kit.coder_prompts import Attempt, render_coder_prompt
from kernelzero.kit.templates import fill, template

REFERENCE = "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.exp()  # {{not_a_placeholder}}\n"


@pytest.mark.parametrize("target", ["cuda", "triton"])
def test_prompt_holds_rules_example_and_reference(target):
    prompt = render_coder_prompt(REFERENCE, target, style="full")
    assert prompt.rstrip().endswith(REFERENCE.strip() + "\n```\n\nAnswer:")
    assert "No fallbacks" in prompt and "fp32 semantics" in prompt and f"Target: {target.upper() if target == 'cuda' else 'Triton'}" in prompt
    assert "{{" not in prompt.replace("{{not_a_placeholder}}", "")


def test_repair_turns_show_each_attempt_with_its_verdict():
    attempts = [
        Attempt(source=None, verdict="compile_error", reason="no_code"),
        Attempt(source="class ModelNew: pass", verdict="incorrect", reason="mismatch", log="x" * 5000 + "max_abs_err=3"),
    ]
    prompt = render_coder_prompt(REFERENCE, "triton", attempts, style="full")
    assert "turn 0" in prompt and "turn 1" in prompt and "no ```python block" in prompt
    assert "Verdict: incorrect (reason: mismatch)" in prompt and prompt.count("max_abs_err=3") == 1
    assert prompt.index("turn 1") < prompt.rindex("Answer:")
    assert len(prompt) < len(render_coder_prompt(REFERENCE, "triton", style="full")) + 4500, "long logs are cut"


def test_missing_placeholder_value_is_an_error_and_unknown_target_refused():
    with pytest.raises(KeyError, match="reason"):
        fill("{{verdict}} {{reason}}", {"verdict": "x"})
    with pytest.raises(ValueError, match="unknown coder target"):
        render_coder_prompt(REFERENCE, "opencl", style="full")


def example(target: str) -> tuple[str, str]:
    """(reference, answer) of the worked example in a template."""
    blocks = [body for tag, body in fenced_blocks(template(f"coder_{target}")) if tag == "python"]
    return blocks[0], blocks[1]


def test_cuda_example_is_valid_python_built_with_load_inline():
    reference, answer = example("cuda")
    tree = ast.parse(answer)
    assert any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)
    assert "load_inline" in answer and "__global__" in answer
    ast.parse(reference)


def test_triton_example_matches_its_reference_under_the_interpreter(tmp_path):
    reference, answer = example("triton")
    (tmp_path / "reference.py").write_text(reference)
    (tmp_path / "answer.py").write_text(answer)
    check = textwrap.dedent("""
        import torch, reference, answer
        torch.manual_seed(0)
        x = torch.randn(*reference.get_inputs()[0].shape[:1], 300)
        args = reference.get_init_inputs()
        expected = reference.Model(*args)(x)
        got = answer.ModelNew(*args)(x)
        assert torch.allclose(got, expected, rtol=1e-5, atol=1e-5), (got - expected).abs().max()
        print("ok")
    """)
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-2000:]


def test_compact_style_is_the_reference_alone_and_ends_where_the_answer_starts():
    source = "import torch\nclass Model(torch.nn.Module):\n    pass\n"
    compact = render_coder_prompt(source, "triton", style="compact")
    full = render_coder_prompt(source, "triton", style="full")
    assert source.strip() in compact and compact.endswith("Answer:\n") and "Rules" not in compact
    assert len(compact) < len(full) / 5
    with pytest.raises(ValueError, match="unknown prompt style"):
        render_coder_prompt(source, "triton", style="verbose")
