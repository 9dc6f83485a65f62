"""AST rules a candidate must pass before it runs (fallbacks, monkey-patching, threads, introspection, ...); not a sandbox.

These rules close the routes we know; the run-time checks in `trial.py` stand behind them.
Each finding names a rule (the verdict reason is `static:<rule>`), the line and what was seen.
"""

from __future__ import annotations

import ast

import msgspec


class Finding(msgspec.Struct, frozen=True):
    rule: str
    line: int
    detail: str


THREAD_MODULES = {"threading", "_thread", "multiprocessing", "concurrent", "asyncio"}
PROCESS_MODULES = {"subprocess", "pty", "pexpect"}
INTROSPECTION_MODULES = {"gc", "inspect", "ctypes", "cffi", "importlib", "traceback", "tracemalloc", "dis", "marshal"}
PROCESS_CALLS = {"fork", "forkpty", "system", "popen", "spawnl", "spawnv", "spawnve", "spawnlp", "execv", "execve",
                 "execl", "execvp", "posix_spawn"}
FD_CALLS = {"write", "writev", "pwrite", "pwritev", "fdopen", "dup", "dup2", "open", "openpty", "pipe", "pipe2",
            "sendfile", "read", "lseek", "ftruncate"}
FD_MODULES = {"socket", "mmap", "fcntl", "select", "selectors", "io", "_io"}
INTROSPECTION_CALLS = {"eval", "exec", "compile", "__import__", "globals", "vars", "locals", "breakpoint"}
SYS_INTROSPECTION = {"_getframe", "modules", "settrace", "setprofile", "_current_frames", "meta_path", "path_hooks",
                     "addaudithook"}
FRAME_ATTRS = {"f_back", "f_locals", "f_globals", "f_builtins", "tb_frame", "gi_frame", "cr_frame", "ag_frame",
               "__globals__", "__closure__", "__code__", "__subclasses__", "__builtins__", "__self__"}
DISPATCH_NAMES = {"__torch_function__", "__torch_dispatch__"}


def check_source(source: str) -> list[Finding]:
    """All findings, in source order; raises SyntaxError when the source does not parse."""
    tree = ast.parse(source)
    checker = _Checker()
    checker.visit(tree)
    unique = {(f.rule, f.line): f for f in checker.findings}  # a.b.c reports once, not per prefix
    return sorted(unique.values(), key=lambda f: f.line)


def _dotted(node: ast.AST) -> list[str] | None:
    """['torch', 'cuda', 'Event'] for torch.cuda.Event; None when the chain has a call or subscript."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _root_name(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


class _Checker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.imported: dict[str, str] = {}  # local name -> dotted module path it stands for
        self.defined_classes: set[str] = set()
        self.depth = 0  # >0 inside a function or class body

    def flag(self, rule: str, node: ast.AST, detail: str) -> None:
        self.findings.append(Finding(rule, getattr(node, "lineno", 0), detail))

    def qualified(self, node: ast.AST) -> str | None:
        """torch.nn.functional.relu for F.relu when F was imported as torch.nn.functional."""
        parts = _dotted(node)
        if not parts or parts[0] not in self.imported:
            return None
        return ".".join([self.imported[parts[0]], *parts[1:]])

    # imports
    def _check_module(self, module: str, node: ast.AST) -> None:
        top = module.split(".")[0]
        if top in THREAD_MODULES:
            self.flag("threading", node, f"imports {module}")
        elif top in PROCESS_MODULES:
            self.flag("subprocess", node, f"imports {module}")
        elif top in INTROSPECTION_MODULES:
            self.flag("introspection", node, f"imports {module}")
        elif top in FD_MODULES:
            self.flag("fd_access", node, f"imports {module}")
        elif top == "builtins":
            self.flag("builtins_access", node, "imports builtins")
        elif top in ("__main__", "kernelzero", "kernelzero_problem"):
            self.flag("reference_import", node, f"imports {module}")
        self._check_qualified(module, node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._check_module(alias.name, node)
            local = alias.asname or alias.name.split(".")[0]
            self.imported[local] = alias.name if alias.asname else local

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            self.flag("reference_import", node, f"relative import from {'.' * node.level}{module}")
        self._check_module(module, node)
        for alias in node.names:
            full = f"{module}.{alias.name}"
            self._check_qualified(full, node)
            if alias.name == "Model":
                self.flag("reference_model", node, f"imports Model from {module}")
            self.imported[alias.asname or alias.name] = full

    # qualified names that are forbidden wherever they appear
    def _check_qualified(self, name: str, node: ast.AST) -> None:
        parts = name.split(".")
        if parts[:2] in (["torch", "compile"], ["torch", "_dynamo"], ["torch", "_inductor"]):
            self.flag("torch_compile", node, name)
        elif parts[:2] in (["torch", "_C"], ["torch", "overrides"]) or name.startswith("torch.utils._python_dispatch"):
            self.flag("dispatch_override", node, name)
        elif parts[0] == "sys" and len(parts) > 1 and parts[1] in SYS_INTROSPECTION:
            self.flag("introspection", node, name)
        elif parts[0] == "os" and len(parts) > 1 and parts[1] in PROCESS_CALLS:
            self.flag("subprocess", node, name)
        elif parts[0] == "os" and len(parts) > 1 and parts[1] in FD_CALLS:
            self.flag("fd_access", node, f"{name}: raw file descriptors could forge the evaluator's result channel")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr in FRAME_ATTRS:
            self.flag("introspection", node, f"attribute {node.attr}")
        elif node.attr in DISPATCH_NAMES:
            self.flag("dispatch_override", node, node.attr)
        name = self.qualified(node)
        if name:
            self._check_qualified(name, node)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and ("/proc/" in node.value or "/dev/fd" in node.value):
            self.flag("fd_access", node, f"path {node.value[:60]!r}")

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in ("__builtins__", "builtins") and node.id not in self.imported:
            self.flag("builtins_access", node, node.id)
        elif node.id == "Model" and isinstance(node.ctx, ast.Load) and "Model" not in self.defined_classes:
            self.flag("reference_model", node, "uses the reference Model")
        elif node.id in DISPATCH_NAMES:
            self.flag("dispatch_override", node, node.id)

    # writes to anything imported: monkey-patching
    def _check_target(self, target: ast.AST, node: ast.AST) -> None:
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._check_target(elt, node)
            return
        if isinstance(target, ast.Starred):
            self._check_target(target.value, node)
            return
        if isinstance(target, (ast.Attribute, ast.Subscript)):
            root = _root_name(target)
            if root in self.imported or root in ("__builtins__", "builtins"):
                self.flag("monkey_patch", node, f"assigns to {ast.unparse(target)}")
            elif isinstance(target, ast.Attribute) and target.attr.startswith("__") and target.attr.endswith("__") \
                    and target.attr not in ("__init__",):
                self.flag("monkey_patch", node, f"assigns to {ast.unparse(target)}")

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        self._check_target(node.target, node)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for target in node.targets:
            self._check_target(target, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name):
            if func.id in INTROSPECTION_CALLS and func.id not in self.imported:
                self.flag("introspection", node, f"calls {func.id}()")
            elif func.id in ("setattr", "delattr", "getattr") and node.args:
                self._check_attr_call(func.id, node)
            elif func.id == "open" and "open" not in self.imported and node.args and not (
                    isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                self.flag("fd_access", node, "open() of a computed path or a descriptor")
        name = self.qualified(func)
        if name and ".library." in f".{name}." and any(
                isinstance(a, ast.Constant) and isinstance(a.value, str) and a.value.startswith("aten")
                for a in [*node.args, *(k.value for k in node.keywords)]):
            self.flag("monkey_patch", node, f"{name} overrides an aten operator")
        if name and name.split(".")[-1] == "suppress" and name.startswith("contextlib"):
            self.flag("try_except_fallback", node, "contextlib.suppress")
        self.generic_visit(node)

    def _check_attr_call(self, fn: str, node: ast.Call) -> None:
        target = node.args[0]
        root = _root_name(target)
        literal_name = len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
        if fn == "getattr":
            if root in self.imported and not literal_name:
                self.flag("introspection", node, f"getattr on {ast.unparse(target)} with a computed name")
        elif not (isinstance(target, ast.Name) and target.id == "self"):
            self.flag("monkey_patch", node, f"{fn}({ast.unparse(target)}, ...)")

    # structure
    def visit_Try(self, node: ast.AST) -> None:
        handlers = getattr(node, "handlers", [])
        imports_only = all(isinstance(s, (ast.Import, ast.ImportFrom)) for s in node.body)  # type: ignore[attr-defined]
        if handlers and not (self.depth == 0 and imports_only):
            self.flag("try_except_fallback", node, "try/except around code (a fallback hides a failing kernel)")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for base in node.bases:
            parts = _dotted(base) or []
            if parts and parts[-1] == "Model":
                self.flag("reference_model", node, f"class {node.name} subclasses Model")
            elif parts and parts[-1] == "Tensor":
                self.flag("tensor_subclass", node, f"class {node.name} subclasses {ast.unparse(base)}")
        self.defined_classes.add(node.name)
        self.depth += 1
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name in DISPATCH_NAMES:
                self.flag("dispatch_override", stmt, f"defines {stmt.name}")
        self.generic_visit(node)
        self.depth -= 1

    def visit_FunctionDef(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef
    visit_Lambda = visit_FunctionDef
