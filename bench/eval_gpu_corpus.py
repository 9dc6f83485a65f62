"""GPU run of the evaluator's hack corpus (Triton + CUDA C++) and the speedup spread of one kernel; needs a CUDA GPU.

Usage: python bench/eval_gpu_corpus.py --out DIR   (about 2-4 minutes on one H200)
Writes DIR/verdicts.json, DIR/verdicts.md, DIR/spread.json, and prints the table last.
Every candidate goes through EvaluatorPool on cuda with the result cache bypassed; the spread
candidate (tests/evaluator/candidates_cuda/triton_matmul.py) is evaluated 5 separate times,
each in a fresh worker process. It does NOT compare with KernelBench (bench/eval_throughput.py does).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "tests" / "evaluator"
SPREAD_CANDIDATE = CORPUS / "candidates_cuda" / "triton_matmul.py"
SIDE_STREAM_PAIR = ("triton_relu_fast", "triton_side_stream_large")
GPU_TIMEOUT_S = {"hang": 20.0}  # the CPU corpus gives hang 5 s; a GPU child also initialises CUDA


def header(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^# (expect|problem|config): (.+)$", path.read_text(), re.M))


def config_for(fields: dict[str, str], cache_dir: str, name: str, workers_per_gpu: int = 1):
    from kernelzero.config import EvaluatorConfig
    overrides = dict(kv.strip().split("=") for kv in fields.get("config", "").split(",") if kv.strip())
    values = {k: v.lower() == "true" if v.lower() in ("true", "false") else v for k, v in overrides.items()}
    if name in GPU_TIMEOUT_S:
        values["timeout_s"] = GPU_TIMEOUT_S[name]
    return msgspec.convert({"cache_dir": cache_dir, "timeout_s": 120, "workers_per_gpu": workers_per_gpu, **values},
                           EvaluatorConfig, strict=False)


async def run_corpus(cache_dir: str, workers_per_gpu: int = 1) -> list[dict]:
    from kernelzero.gpu_workers import EvaluatorPool
    paths = sorted((CORPUS / "candidates").glob("*.py")) + sorted((CORPUS / "candidates_cuda").glob("*.py"))
    groups: dict[str, list[Path]] = {}
    for path in paths:
        cfg = msgspec.json.encode(config_for(header(path), cache_dir, path.stem, workers_per_gpu)).decode()
        groups.setdefault(cfg, []).append(path)
    rows = []
    for paths in groups.values():
        config = config_for(header(paths[0]), cache_dir, paths[0].stem, workers_per_gpu)
        async with EvaluatorPool(config, device="cuda", use_cache=False) as pool:
            async def one(path: Path) -> dict:
                fields = header(path)
                problem = (CORPUS / "problems" / f"{fields['problem']}.py").read_text()
                started = time.perf_counter()
                result = await pool.evaluate(problem, path.read_text())
                expected = fields["expect"].split()
                return {"candidate": f"{path.parent.name}/{path.name}", "expected": " ".join(expected),
                        "got": f"{result.verdict} {result.reason}", "ok": [result.verdict, result.reason] == expected,
                        "wall_s": round(time.perf_counter() - started, 2), **msgspec.structs.asdict(result)}
            rows += await asyncio.gather(*(one(p) for p in paths))  # builds overlap GPU work
    return rows


async def run_spread(cache_dir: str, repeats: int = 5) -> dict:
    from kernelzero.config import EvaluatorConfig
    from kernelzero.gpu_workers import EvaluatorPool
    problem = (CORPUS / "problems" / f"{header(SPREAD_CANDIDATE)['problem']}.py").read_text()
    source = SPREAD_CANDIDATE.read_text()
    runs = []
    async with EvaluatorPool(EvaluatorConfig(cache_dir=cache_dir), device="cuda", use_cache=False) as pool:
        for _ in range(repeats):  # each evaluation runs in a fresh forked process: nothing carries over
            r = await pool.evaluate(problem, source)
            runs.append({"verdict": r.verdict, "reason": r.reason, "speedup": r.speedup, "runtime_ms": r.runtime_ms,
                         "ref_eager_ms": r.ref_eager_ms, "iqr_ms": r.runtime_iqr_ms, "n": r.timing_n})
    speedups = [x["speedup"] for x in runs if x["speedup"]]
    spread = (max(speedups) - min(speedups)) / statistics.median(speedups) if len(speedups) == repeats else None
    return {"candidate": SPREAD_CANDIDATE.name, "runs": runs, "spread": spread}


def markdown(rows: list[dict], spread: dict, gpu: str, total_s: float) -> str:
    lines = [f"# Evaluator GPU corpus on {gpu}", "", f"Wall time: {total_s:.0f} s. "
             f"{sum(r['ok'] for r in rows)}/{len(rows)} verdicts as expected.", "",
             "| candidate | expected | got | ok | speedup | runtime ms | ref ms | n | wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fmt = lambda v: "" if v is None else f"{v:.4g}"  # noqa: E731
        lines.append(f"| {r['candidate']} | {r['expected']} | {r['got']} | {'yes' if r['ok'] else 'NO'} | "
                     f"{fmt(r['speedup'])} | {fmt(r['runtime_ms'])} | {fmt(r['ref_eager_ms'])} | {r['timing_n']} | "
                     f"{r['wall_s']} |")
    by_name = {Path(r["candidate"]).stem: r for r in rows}
    plain, side = (by_name.get(n, {}) for n in SIDE_STREAM_PAIR)
    spread_text = "n/a (a run was not timed)" if spread["spread"] is None else f"{100 * spread['spread']:.2f}%"
    lines += ["", f"Side stream vs plain Triton ReLU (large): {plain.get('runtime_ms')} ms vs {side.get('runtime_ms')} ms",
              "", f"Speedup spread of {spread['candidate']} over {len(spread['runs'])} separate evaluations: "
              f"{spread_text}", "", "speedups: " + ", ".join(f"{x['speedup']:.4g}" for x in spread["runs"] if x["speedup"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workers-per-gpu", type=int, default=1, help="evaluator workers sharing the GPU (timing takes turns)")
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("eval_gpu_corpus: needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    gpu = torch.cuda.get_device_name(0)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="kz-eval-") as cache_dir:
        rows = asyncio.run(run_corpus(cache_dir, args.workers_per_gpu))
        spread = asyncio.run(run_spread(cache_dir))
    total = time.perf_counter() - started
    (args.out / "verdicts.json").write_text(json.dumps({"gpu": gpu, "wall_s": total, "rows": rows}, indent=1))
    (args.out / "spread.json").write_text(json.dumps(spread, indent=1))
    text = markdown(rows, spread, gpu, total)
    (args.out / "verdicts.md").write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
