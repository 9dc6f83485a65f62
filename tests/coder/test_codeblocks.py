"""Parsing a model's answer: the last fenced Python block that defines the wanted name, or None."""

from kernelzero.kit.codeblocks import defines, fenced_blocks, last_python_block

ANSWER = """Plan first.
```python
class ModelNew:  # a first draft
    pass
```
Some C++ for reference:
```cpp
__global__ void k() {}
```
Final version:
```py
import torch

class ModelNew(torch.nn.Module):
    def forward(self, x):
        return x
```
And a usage example:
```python
print(ModelNew())
```
"""


def test_the_last_block_defining_modelnew_wins():
    block = last_python_block(ANSWER, "ModelNew")
    assert block is not None and block.startswith("import torch") and "def forward" in block
    assert [tag for tag, _ in fenced_blocks(ANSWER)] == ["python", "cpp", "py", "python"]


def test_no_block_or_no_definition_gives_none():
    assert last_python_block("I cannot do that.", "ModelNew") is None
    assert last_python_block("```python\nx = 1\n```", "ModelNew") is None
    assert last_python_block("```cpp\nclass ModelNew {};\n```", "ModelNew") is None
    assert last_python_block("", "ModelNew") is None


def test_a_truncated_block_still_counts_so_the_evaluator_can_judge_it():
    text = "```python\nclass ModelNew(nn.Module):\n    def forward(self, x:\n"
    assert last_python_block(text, "ModelNew") == "class ModelNew(nn.Module):\n    def forward(self, x:\n"


def test_definitions_by_assignment_and_in_untagged_blocks():
    assert defines("ModelNew = make()", "ModelNew")
    assert not defines("def helper():\n    ModelNew = 1\n", "ModelNew")  # not top level
    assert last_python_block("```\nclass Model:\n    pass\n```", "Model") == "class Model:\n    pass\n"
