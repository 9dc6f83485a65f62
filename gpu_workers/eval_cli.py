"""`kernelzero eval PROBLEM.py CANDIDATE.py`: evaluate one candidate, print a summary or one JSON object; no batching.

Exit codes: 0 for any verdict about the candidate (the verdict is the answer); 2 when a file is
missing or the device cannot be had; 3 for `problem_error` (the problem itself is unusable: its
reference fails, runs out of memory on the whole GPU, is non-deterministic or constant); 4 for
`evaluator_error` (the evaluator's own code failed: a bug to report, with the traceback). The
result (summary or JSON) is printed in every case, the reason on stderr for 3 and 4.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

EXIT_CODES = {"problem_error": 3, "evaluator_error": 4}
MESSAGES = {"problem_error": "the problem {problem} is unusable: {reason}",
            "evaluator_error": "the evaluator itself failed (not the candidate's fault; please report it): {reason}"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("problem", help="KernelBench-format module: Model, get_inputs, get_init_inputs")
    parser.add_argument("candidate", help="module defining ModelNew (Triton or CUDA load_inline kernels)")
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], help="default: [evaluator] device")
    parser.add_argument("--timeout", type=float, metavar="S", help="seconds for the candidate's run (compile excluded)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--no-cache", action="store_true", help="ignore and do not reuse cached results")


def main(args: argparse.Namespace, config) -> int:
    import msgspec

    from kernelzero.gpu_workers import evaluate
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
    except RuntimeError as exc:  # e.g. --device cuda without a GPU
        print(f"kernelzero eval: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(msgspec.json.encode(msgspec.structs.asdict(result)).decode())  # every field, defaults included
    else:
        _print_summary(result)
    if result.verdict in MESSAGES:
        detail = result.evidence.get("detail") or result.evidence.get("error", "")
        reason = result.reason + (f": {detail}" if detail else "")
        print(f"kernelzero eval: {MESSAGES[result.verdict].format(problem=args.problem, reason=reason)}", file=sys.stderr)
    return EXIT_CODES.get(result.verdict, 0)


def _print_summary(result) -> None:
    from rich.console import Console
    from rich.table import Table
    colour = {"correct": "green", "incorrect": "red", "rejected": "magenta", "problem_error": "blue",
              "evaluator_error": "blue"}.get(result.verdict, "yellow")
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
    if result.ref_compile_ms is not None:
        table.add_row("compiled ref", f"{result.ref_compile_ms:.4g} ms -> speedup {result.speedup_compile:.3g}x")
    table.add_row("compile", f"{result.compile_s:.2f} s")
    for key, value in result.evidence.items():
        table.add_row(key, value[:300])
    Console().print(table)
