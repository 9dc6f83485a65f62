"""`kernelzero eval PROBLEM.py CANDIDATE.py`: evaluate one candidate, print a summary or one JSON object; no batching.

Exit codes: 0 for any verdict (the verdict is the answer), 2 when a file is missing or the
problem itself is unusable (its reference fails, is non-deterministic or constant).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("problem", help="KernelBench-format module: Model, get_inputs, get_init_inputs")
    parser.add_argument("candidate", help="module defining ModelNew (Triton or CUDA load_inline kernels)")
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], help="default: [evaluator] device")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds for the candidate's run (compile excluded)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-cache", action="store_true", help="ignore and do not reuse cached results")


def main(args: argparse.Namespace, config) -> int:
    import msgspec

    from kernelzero.gpu_workers import ProblemFailed, evaluate
    sources = []
    for label, path in (("problem", args.problem), ("candidate", args.candidate)):
        file = Path(path)
        if not file.is_file():
            print(f"kernelzero eval: {label} file {path} does not exist", file=sys.stderr)
            return 2
        sources.append(file.read_text())
    cfg = config.evaluator
    if args.timeout is not None:
        cfg = msgspec.structs.replace(cfg, timeout_s=args.timeout)
    try:
        result = evaluate(sources[0], sources[1], cfg, device=args.device, use_cache=not args.no_cache)
    except ProblemFailed as exc:
        print(f"kernelzero eval: the problem {args.problem} is unusable: {exc.reason}"
              f"{': ' + exc.detail if exc.detail else ''}", file=sys.stderr)
        return 2
    except RuntimeError as exc:  # e.g. --device cuda without a GPU
        print(f"kernelzero eval: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(msgspec.json.encode(msgspec.structs.asdict(result)).decode())  # every field, defaults included
    else:
        _print_summary(result)
    return 0


def _print_summary(result) -> None:
    from rich.console import Console
    from rich.table import Table
    colour = {"correct": "green", "incorrect": "red", "rejected": "magenta"}.get(result.verdict, "yellow")
    table = Table(show_header=False, box=None)
    table.add_row("verdict", f"[bold {colour}]{result.verdict}[/] ({result.reason})")
    table.add_row("device", f"{result.device} {result.gpu}".strip() + (" (cached)" if result.cached else ""))
    table.add_row("checks", ", ".join(result.checks))
    table.add_row("trials", str(result.trials))
    if result.rel_err is not None:
        table.add_row("error", f"max abs {result.max_abs_err:.3g}, relative {result.rel_err:.3g}")
    if result.runtime_ms is not None:
        table.add_row("runtime", f"{result.runtime_ms:.4g} ms (IQR {result.runtime_iqr_ms:.2g}, n={result.timing_n})")
        table.add_row("eager ref", f"{result.ref_eager_ms:.4g} ms -> speedup {result.speedup:.3g}x")
    table.add_row("compile", f"{result.compile_s:.2f} s")
    for key, value in result.evidence.items():
        table.add_row(key, value[:300])
    Console().print(table)
