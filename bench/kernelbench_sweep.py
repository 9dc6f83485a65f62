"""Every KernelBench problem against a copy candidate (the reference in torch, its output through an identity Triton kernel): each must be rejected.

Usage: python bench/kernelbench_sweep.py --kb DIR --out DIR [--levels 1,2] [--workers-per-gpu N] [--limit N] [--only L:P,...]
                                         [--budget-s S] [--device cuda|cpu] [--dry-run] [--sandbox on|off]
                                         [--gpu-memory-cap-gb G]
`--kb` holds KernelBench/levelN (or levelN) problem files. For each problem the copy candidate is
generated here, at run time (nothing of KernelBench is written to disk but under --out's own
runs), and evaluated by EvaluatorPool with the result cache off; its verdict, reason and seconds
go to DIR/results.json and DIR/results.md, and a summary (counts by verdict) is printed last.
A copy candidate that is not rejected (nor its problem excluded as unusable) is listed loudly.
`--dry-run` shrinks every problem's module-level sizes (integers above 16 become 16) and runs on
the CPU: it tests this script's plumbing, not the problems at their real sizes. Problems not
started when `--budget-s` runs out are listed as not run. `--gpu-memory-cap-gb` evaluates as if
the GPU had that many GB. The table gives each problem's memory need as planned (the `memory`
evidence). It does NOT time anything (copy candidates are rejected before timing).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable


SHRINK_TO = 16
EXPECTED = {"rejected", "problem_error"}  # a copy candidate is rejected, or its problem is unusable
COPY_TAIL = '''

import triton
import triton.language as tl


@triton.jit
def _kz_identity_copy(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=mask), mask=mask)


def _kz_copy(value):
    if not isinstance(value, torch.Tensor) or value.numel() == 0:
        return value
    src = value.contiguous()
    out = torch.empty_like(src)
    _kz_identity_copy[(triton.cdiv(src.numel(), 1024),)](src, out, src.numel(), BLOCK=1024)
    return out


class ModelNew(TorchComputation):
    def forward(self, *args):
        out = super().forward(*args)
        if isinstance(out, (tuple, list)):
            return type(out)(_kz_copy(v) for v in out)
        return _kz_copy(out)
'''


def copy_candidate(problem_src: str) -> str:
    """The problem's own Model, renamed, computes the answer in torch; every output tensor goes through a Triton copy."""
    return re.sub(r"\bModel\b", "TorchComputation", problem_src) + COPY_TAIL


ARITHMETIC = (ast.Expression, ast.Constant, ast.BinOp, ast.UnaryOp, ast.operator, ast.unaryop)


def _integer(node: ast.expr) -> int | None:
    """The value of an expression of integer literals and arithmetic (`2048 * 2`), else None."""
    if not all(isinstance(n, ARITHMETIC) for n in ast.walk(ast.Expression(node))):
        return None
    try:
        value = eval(compile(ast.Expression(node), "<size>", "eval"), {"__builtins__": {}})  # literals only
    except ArithmeticError:
        return None
    return value if type(value) is int else None


def shrink(problem_src: str, to: int = SHRINK_TO) -> str:
    """Module-level integer sizes (literals, their arithmetic, tuples of them) above `to` set to `to`: the dry run's sizes."""
    tree = ast.parse(problem_src)

    def small(node: ast.expr) -> ast.expr:
        value = _integer(node)
        if value is not None and value > to:
            return ast.Constant(to)
        if isinstance(node, ast.Tuple):
            node.elts = [small(e) for e in node.elts]
        return node

    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            stmt.value = small(stmt.value)
    return ast.unparse(tree)


def problem_paths(kb: Path, level: int) -> list[Path]:
    for folder in (kb / "KernelBench" / f"level{level}", kb / f"level{level}"):
        if folder.is_dir():
            return sorted(folder.glob("*.py"), key=lambda p: int(p.stem.split("_", 1)[0]))
    raise SystemExit(f"no level{level} folder under {kb}")


def need_gb(row: dict) -> str:
    """The planned need from a row's `memory` evidence ("need 27 GB (floor ...) ..."), or empty."""
    found = re.match(r"need ([0-9.e+]+) GB", row.get("evidence", {}).get("memory", ""))
    return found.group(1) if found else ""


async def sweep(paths: list[tuple[int, Path]], args, cache_dir: str, on_row: Callable[[dict], None] | None = None,
                **config: Any) -> tuple[list[dict], float]:
    """Rows of the copy candidates' verdicts (`on_row` gets each as it comes); `config` overrides the evaluator's."""
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import EvaluatorPool

    contained = args.sandbox == "on"
    config = EvaluatorConfig(**{"device": args.device, "workers_per_gpu": args.workers_per_gpu,
                                "timeout_s": args.timeout_s, "cache_dir": cache_dir, "sandbox": contained,
                                "require_sandbox": "auto" if contained else False, **config})
    started = time.monotonic()
    rows: list[dict] = []
    async with EvaluatorPool(config, device=args.device, use_cache=False) as pool:
        gate = asyncio.Semaphore(pool.workers)  # one job a worker

        async def one(level: int, path: Path) -> None:
            async with gate:
                row = {"level": level, "problem": int(path.stem.split("_", 1)[0]), "name": path.stem}
                if time.monotonic() - started > args.budget_s:
                    rows.append({**row, "verdict": "not_run", "reason": "budget", "seconds": 0.0})
                    return
                source = path.read_text()
                if args.dry_run:
                    source = shrink(source)
                t0 = time.monotonic()
                result = await pool.evaluate(source, copy_candidate(source))
                evidence = {k: result.evidence[k] for k in ("detail", "ops", "also", "memory", "error", "stage", "traceback", "sandbox")
                            if k in result.evidence}
                rows.append({**row, "verdict": result.verdict, "reason": result.reason,
                             "seconds": round(time.monotonic() - t0, 2), "evidence": evidence})
                if on_row is not None:
                    on_row(rows[-1])
                print(f"level {level} {path.stem}: {result.verdict} {result.reason} ({rows[-1]['seconds']} s)",
                      file=sys.stderr, flush=True)

        await asyncio.gather(*(one(level, path) for level, path in paths))
    rows.sort(key=lambda r: (r["level"], r["problem"]))
    return rows, time.monotonic() - started


def render(rows: list[dict], wall_s: float, args) -> str:
    counts = Counter(f"{r['verdict']} {r['reason']}" for r in rows)
    loud = [r for r in rows if r["verdict"] not in EXPECTED | {"not_run"}]
    lines = [f"# KernelBench copy-candidate sweep ({'dry run, shrunk sizes' if args.dry_run else 'real sizes'})", "",
             f"device {args.device}, workers_per_gpu {args.workers_per_gpu}, {len(rows)} problems, "
             f"wall {wall_s:.0f} s", "",
             "containment: " + ("; ".join(sorted({r.get("evidence", {}).get("sandbox") or "none recorded" for r in rows}))),
             "", "| level | problem | verdict | reason | need GB | seconds |", "|---|---|---|---|---:|---:|"]
    lines += [f"| {r['level']} | {r['name']} | {r['verdict']} | {r['reason']} | {need_gb(r)} | {r['seconds']} |"
              for r in rows]
    lines += ["", "## Counts by verdict", ""] + [f"- {key}: {n}" for key, n in sorted(counts.items())]
    if loud:
        lines += ["", f"## !!! {len(loud)} COPY CANDIDATES NOT REJECTED !!!", ""]
        lines += [f"- level {r['level']} {r['name']}: {r['verdict']} {r['reason']} {r.get('evidence', {})}" for r in loud]
    else:
        lines += ["", "Every copy candidate that ran was rejected or its problem excluded as unusable."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kb", required=True, type=Path, help="folder holding KernelBench/levelN problem files")
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--levels", default="1,2")
    parser.add_argument("--workers-per-gpu", type=int, default=1)
    parser.add_argument("--limit", type=int, default=None, help="the first N problems of each level")
    parser.add_argument("--only", default="", metavar="L:P,...", help="only these problems (level:number)")
    parser.add_argument("--budget-s", type=float, default=480.0, help="start no problem after this many seconds")
    parser.add_argument("--timeout-s", type=float, default=120.0, help="per evaluation")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--dry-run", action="store_true", help="shrunk sizes on the CPU: the plumbing only")
    parser.add_argument("--sandbox", choices=("on", "off"), default="on",
                        help="off: candidates run uncontained (only where the machine refuses containment)")
    parser.add_argument("--gpu-memory-cap-gb", type=float, default=0.0, help="evaluate as if the GPU had this many GB")
    args = parser.parse_args(argv)
    if args.dry_run:
        args.device = "cpu"
    paths = [(level, p) for level in map(int, args.levels.split(",")) for p in problem_paths(args.kb, level)[:args.limit]]
    if args.only:
        wanted = {tuple(map(int, item.split(":"))) for item in args.only.split(",")}
        paths = [(level, p) for level, p in paths if (level, int(p.stem.split("_", 1)[0])) in wanted]
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kz-sweep-") as cache_dir:
        rows, wall_s = asyncio.run(sweep(paths, args, cache_dir, gpu_memory_cap_gb=args.gpu_memory_cap_gb))
    report = render(rows, wall_s, args)
    (args.out / "results.json").write_text(json.dumps({
        "device": args.device, "workers_per_gpu": args.workers_per_gpu, "dry_run": args.dry_run,
        "gpu_memory_cap_gb": args.gpu_memory_cap_gb,
        "wall_s": round(wall_s, 1), "problems": rows}, indent=1))
    (args.out / "results.md").write_text(report)
    print(report)
    return 1 if any(r["verdict"] not in EXPECTED | {"not_run"} for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
