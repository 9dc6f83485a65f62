"""The house's layers: foundation, KernelBench kit, stages, bootstrap, application; every import points down, no stage imports another, and no two modules import each other.

Read from the source's own import statements (function-level imports too), so that a lazy import
cannot hide a dependency, nor a cycle (modules that import each other, however indirectly, are one
idea in several files, or a caller and its callee confused). A layer is a place (README, Architecture):
- foundation (schemas/, and kernelzero/ outside kit/ and app/): the event contract, configuration,
  the event log, the stage host, the supervisor, the sandbox that runs untrusted code (bubblewrap,
  self-confinement, the fork server);
- kit (kernelzero/kit/): what several stages read about KernelBench-format code (problems, code
  blocks, prompts, the API catalog, model loading, the op tracer and tensor walker);
- stages: producers, consumers, gpu_workers, analytics, each importing only the two layers below
  and itself: stages talk through events;
- bootstrap (bootstrap/): the from-zero start (teachers, distillation, tokenizer and models, SFT), which
  may use any stage's code as a library and which no stage imports;
- application (kernelzero/app/, and `python -m kernelzero`): the command line, services, demo,
  and the KernelBench bench.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"schemas": "kernelzero.schemas", "producers": "kernelzero.producers", "consumers": "kernelzero.consumers",
           "gpu_workers": "kernelzero.gpu_workers", "analytics": "kernelzero.analytics", "bootstrap": "kernelzero.bootstrap",
           "kernelzero": "kernelzero"}
KIT = ("kernelzero.kit",)
STAGES = ("kernelzero.producers", "kernelzero.consumers", "kernelzero.gpu_workers", "kernelzero.analytics")
BOOTSTRAP = ("kernelzero.bootstrap",)
APPLICATION = ("kernelzero.app", "kernelzero.__main__")


def _within(module: str, prefixes: tuple[str, ...]) -> str | None:
    return next((p for p in prefixes if module == p or module.startswith(p + ".")), None)


def layer(module: str) -> tuple[int, str]:
    """(height, name): 0 foundation (schemas/ and the rest of kernelzero/), 1 kit, 2 a stage (named by its package),
    3 bootstrap, 4 application."""
    if _within(module, APPLICATION):
        return 4, "application"
    if _within(module, BOOTSTRAP):
        return 3, "bootstrap"
    stage = _within(module, STAGES)
    if stage:
        return 2, stage
    return (1, "kit") if _within(module, KIT) else (0, "foundation")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts = [FOLDERS[parts[0]], *parts[1:]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every project import; `from package import name` counts as package.name where that is a module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                found.append((node.lineno, target if _is_module(target) else node.module))
    return [(line, name) for line, name in found if name == "kernelzero" or name.startswith("kernelzero.")]


def _is_module(name: str) -> bool:
    parts = name.split(".")[1:]
    if not parts:
        return False
    folder = next((f for f, m in FOLDERS.items() if m == f"kernelzero.{parts[0]}"), "kernelzero")
    rest = parts[1:] if folder != "kernelzero" else parts
    base = ROOT / folder / Path(*rest) if rest else ROOT / folder
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def upward(importer: str, imported: str) -> bool:
    (mine, my_name), (theirs, their_name) = layer(importer), layer(imported)
    return theirs > mine or (mine == theirs == 2 and my_name != their_name)


SOURCES = sorted(p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py"))


def test_every_import_points_down_and_no_stage_imports_another() -> None:
    wrong = [f"{path.relative_to(ROOT)}:{line} {module_name(path)} ({layer(module_name(path))[1]}) imports "
             f"{name} ({layer(name)[1]})"
             for path in SOURCES for line, name in imports(path) if upward(module_name(path), name)]
    assert not wrong, "imports that point up or across stages:\n" + "\n".join(wrong)


@pytest.mark.parametrize("importer,imported,expected", [
    ("kernelzero.consumers.validator", "kernelzero.gpu_workers.pool", True),  # across stages
    ("kernelzero.kit.problems", "kernelzero.producers.coder", True),  # kit reaching a stage
    ("kernelzero.log.embedded", "kernelzero.kit.problems", True),  # foundation reaching the kit
    ("kernelzero.consumers.validator", "kernelzero.kit.api_catalog", False),  # the catalog is the kit's
    ("kernelzero.app.demo", "kernelzero.gpu_workers", False),  # the application imports stages
    ("kernelzero.sandbox.launcher", "kernelzero.gpu_workers.trial", True),  # the sandbox serves every stage
    ("kernelzero.consumers.validator", "kernelzero.sandbox.forkserver", False),
    ("kernelzero.bootstrap.distill", "kernelzero.gpu_workers", False),  # the bootstrap uses stages as libraries
    ("kernelzero.producers.coder", "kernelzero.bootstrap.teacher", True),  # the loop never reaches the bootstrap
    ("kernelzero.app.demo", "kernelzero.bootstrap.from_zero", False),
])
def test_the_rule_itself(importer: str, imported: str, expected: bool) -> None:
    assert upward(importer, imported) is expected


def test_the_scan_sees_function_level_imports() -> None:
    found = {name for _, name in imports(ROOT / "bootstrap" / "from_zero.py")}
    assert "kernelzero.bootstrap.sft" in found and "kernelzero.bootstrap.heldout_judge" in found


def import_graph() -> dict[str, set[str]]:
    """Every project module -> the project modules it imports, at any level of the file."""
    graph = {module_name(path): set() for path in SOURCES}
    for path in SOURCES:
        graph[module_name(path)] |= {name for _, name in imports(path) if name in graph} - {module_name(path)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The modules that reach one another, each group sorted (Tarjan's strongly connected components of size > 1)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in graph[module]:
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_two_modules_import_each_other() -> None:
    found = cycles(import_graph())
    assert not found, "modules that import each other (function-level imports count):\n" + "\n".join(
        " <-> ".join(group) for group in found)


def test_the_cycle_scan_itself() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    lazy = {name for _, name in imports(ROOT / "kernelzero" / "app" / "serve.py")}
    assert "kernelzero.producers.coder" in lazy  # imported inside a function, as most cycles are
