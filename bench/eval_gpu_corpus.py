"""GPU run of the evaluator's hack corpus (Triton + CUDA C++ + sandbox attacks) and the speedup spread of one kernel.

Usage: python bench/eval_gpu_corpus.py --out DIR [--sandbox on,off] [--device cuda|cpu] [--untimed]
       [--spread-rel-se 0.002,0.01 --spread-repeats 8 --spread-only]
(about 2-4 minutes per setting on one H200). Writes DIR/verdicts.json, DIR/verdicts.md,
DIR/spread.json, and prints the tables last. Every candidate goes through EvaluatorPool with the
result cache bypassed, once per `--sandbox` setting (on: containment as configured, required
where bwrap is found; off: none; a setting may repeat, `off,on,off,on`, to see drift), side by
side: each row names the containment in force, and the summary gives wall time per candidate per
setting and whether verdicts agree. The sandbox attacks (tests/evaluator/candidates_sandbox/, not
those evaluated only through the build tests) run once more after them, contained, and are left
out of the timing comparison. On cuda the spread
candidate (tests/evaluator/candidates_cuda/triton_matmul.py) is evaluated `--spread-repeats` separate
times per setting and per timing stop in `--spread-rel-se` (the speedups' spread is between jobs; beside it, their
spread once each is scaled by its job's clock against the reference's: whether the probe explains it); `--spread-only`
skips the corpus; `--device cpu` runs the CPU corpus and attacks (no timing, no spread), to measure
containment's cost on a machine without a GPU. `--untimed` judges the corpus untimed on the GPU (docs/evaluator.md,
Untimed evaluations), with the CPU corpus test's 20 unclocked timed calls: every verdict as timed, except those only
the clock can give (UNTIMED_REASONS), expected `correct ok` there. It does NOT compare with KernelBench
(bench/eval_throughput.py does).
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
SANDBOX_SETTINGS = {"on": {}, "off": {"sandbox": False, "require_sandbox": False}}
UNTIMED_REASONS = ("unjoined_stream", "beyond_physical_limit")  # verdicts an untimed evaluation cannot give
ATTACKS = "attacks (on)"  # the sandbox attacks' run: contained only, not part of the comparison


def header(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^# (expect|problem|config|device|via): (.+)$", path.read_text(), re.M))


def config_for(fields: dict[str, str], cache_dir: str, name: str, workers_per_gpu: int = 0, setting: str = "on",
               device: str = "cuda", untimed: bool = False):
    from kernelzero.config import EvaluatorConfig
    overrides = dict(kv.strip().split("=") for kv in fields.get("config", "").split(",") if kv.strip())
    values = {k: v.lower() == "true" if v.lower() in ("true", "false") else v for k, v in overrides.items()}
    if name in GPU_TIMEOUT_S and device == "cuda":
        values["timeout_s"] = GPU_TIMEOUT_S[name]
    return msgspec.convert({"cache_dir": cache_dir, "timeout_s": 120, "workers_per_gpu": workers_per_gpu, **values,
                            **SANDBOX_SETTINGS[setting], **({"cpu_timed_calls": 20} if untimed else {})},
                           EvaluatorConfig, strict=False)


def expected_verdict(fields: dict[str, str], untimed: bool) -> list[str]:
    expected = fields["expect"].split()
    return ["correct", "ok"] if untimed and expected[-1] in UNTIMED_REASONS else expected


def corpus(device: str) -> list[Path]:
    folders = ["candidates"] + (["candidates_cuda"] if device == "cuda" else [])
    return [p for folder in folders for p in sorted((CORPUS / folder).glob("*.py"))]


def attacks() -> list[Path]:
    """The sandbox attacks a pool evaluates (not those the build tests take through `_build` themselves)."""
    return [p for p in sorted((CORPUS / "candidates_sandbox").glob("*.py")) if "via" not in header(p)]


async def run_corpus(paths: list[Path], cache_dir: str, workers_per_gpu: int = 0, setting: str = "on",
                     device: str = "cuda", untimed: bool = False) -> dict:
    """{"rows": one per candidate, "wall_s": the whole corpus, "start_s": spent starting pools (probe, workers)}."""
    from kernelzero.gpu_workers import EvaluatorPool
    groups: dict[str, list[Path]] = {}
    for path in paths:
        cfg = config_for(header(path), cache_dir, path.stem, workers_per_gpu, setting, device, untimed)
        groups.setdefault(msgspec.json.encode(cfg).decode(), []).append(path)
    rows, start_s, began = [], 0.0, time.perf_counter()
    for paths in groups.values():
        config = config_for(header(paths[0]), cache_dir, paths[0].stem, workers_per_gpu, setting, device, untimed)
        starting = time.perf_counter()
        async with EvaluatorPool(config, device=device, use_cache=False) as pool:
            start_s += time.perf_counter() - starting

            async def one(path: Path) -> dict:
                fields = header(path)
                problem = (CORPUS / "problems" / f"{fields['problem']}.py").read_text()
                started = time.perf_counter()
                result = await pool.evaluate(problem, path.read_text(), timed=not untimed)
                expected = expected_verdict(fields, untimed)
                return {"candidate": f"{path.parent.name}/{path.name}", "setting": setting,
                        "sandbox": result.evidence.get("sandbox", ""), "expected": " ".join(expected),
                        "got": f"{result.verdict} {result.reason}", "ok": [result.verdict, result.reason] == expected,
                        "wall_s": round(time.perf_counter() - started, 2), **msgspec.structs.asdict(result)}
            rows += await asyncio.gather(*(one(p) for p in paths))  # builds overlap GPU work
    return {"rows": rows, "wall_s": round(time.perf_counter() - began, 2), "start_s": round(start_s, 2)}


def spread(values: list[float]) -> float | None:
    """(max - min) / median, the between-job spread of one kernel's speedups; None unless every one was timed (> 0)."""
    return (max(values) - min(values)) / statistics.median(values) if values and all(values) else None


async def run_spread(cache_dir: str, repeats: int, setting: str, rel_se: float | None) -> dict:
    from kernelzero.gpu_workers import EvaluatorPool
    problem = (CORPUS / "problems" / f"{header(SPREAD_CANDIDATE)['problem']}.py").read_text()
    source = SPREAD_CANDIDATE.read_text()
    runs = []
    stop = {} if rel_se is None else {"config": f"timing_rel_se={rel_se}"}
    async with EvaluatorPool(config_for(stop, cache_dir, "spread", setting=setting), device="cuda",
                             use_cache=False) as pool:
        for _ in range(repeats):  # each evaluation runs in a fresh forked process: nothing carries over
            r = await pool.evaluate(problem, source)
            runs.append({"verdict": r.verdict, "reason": r.reason, "speedup": r.speedup, "runtime_ms": r.runtime_ms,
                         "ref_eager_ms": r.ref_eager_ms, "iqr_ms": r.runtime_iqr_ms, "n": r.timing_n,
                         "clock_vs_reference": r.evidence.get("clock_vs_reference", "")})
    return {"candidate": SPREAD_CANDIDATE.name, "rel_se": pool.config.timing_rel_se, "runs": runs,
            "spread": spread([x["speedup"] or 0.0 for x in runs]),
            "clock_scaled_spread": spread([(x["speedup"] or 0.0) * float(x["clock_vs_reference"] or 0.0)
                                           for x in runs])}


def summary(runs: dict[str, dict]) -> list[str]:
    """Per containment setting: what held, wall time per candidate (pool starts apart); verdicts that differ."""
    lines = ["| setting | containment in force | candidates | as expected | wall s | pool starts s | s per candidate |",
             "|---|---|---|---|---|---|---|"]
    for setting, run in runs.items():
        rows = run["rows"]
        held = sorted({r["sandbox"] for r in rows})
        per = (run["wall_s"] - run["start_s"]) / max(len(rows), 1)
        lines.append(f"| {setting} | {'; '.join(held)} | {len(rows)} | {sum(r['ok'] for r in rows)} | "
                     f"{run['wall_s']} | {run['start_s']} | {per:.2f} |")
    got = [{r["candidate"]: r["got"] for r in run["rows"]} for key, run in runs.items() if key != ATTACKS]
    shared = set.intersection(*(set(g) for g in got)) if got else set()
    differ = sorted(c for c in shared if len({g[c] for g in got}) > 1)
    if len(got) > 1:
        lines += ["", f"Verdicts that differ between settings ({len(shared)} candidates in all): "
                      + (", ".join(f"{c} ({' / '.join(g[c] for g in got)})" for c in differ) or "none")]
    return lines


def markdown(runs: dict[str, dict], spreads: dict[str, dict], device: str, total_s: float) -> str:
    rows = [r for run in runs.values() for r in run["rows"]]
    lines = [f"# Evaluator corpus on {device}", "", f"Wall time: {total_s:.0f} s. "
             f"{sum(r['ok'] for r in rows)}/{len(rows)} verdicts as expected.", "", *summary(runs), "",
             "| setting | candidate | expected | got | ok | speedup | runtime ms | ref ms | n | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        fmt = lambda v: "" if v is None else f"{v:.4g}"  # noqa: E731
        lines.append(f"| {r['setting']} | {r['candidate']} | {r['expected']} | {r['got']} | "
                     f"{'yes' if r['ok'] else 'NO'} | {fmt(r['speedup'])} | {fmt(r['runtime_ms'])} | "
                     f"{fmt(r['ref_eager_ms'])} | {r['timing_n']} | "
                     f"{r['wall_s']} |")
    for key, run in runs.items():
        by_name = {Path(r["candidate"]).stem: r for r in run["rows"]}
        plain, side = (by_name.get(n, {}) for n in SIDE_STREAM_PAIR)
        if plain or side:
            lines += ["", f"Setting {key}: side stream vs plain Triton ReLU (large): {plain.get('runtime_ms')} ms vs "
                          f"{side.get('runtime_ms')} ms"]
    percent = lambda v: "n/a (a run was not timed)" if v is None else f"{100 * v:.2f}%"  # noqa: E731
    for key, spread in spreads.items():
        lines += ["", f"{key}: speedup spread of {spread['candidate']} over {len(spread['runs'])} separate "
                      f"evaluations: {percent(spread['spread'])}, scaled by each job's clock: "
                      f"{percent(spread['clock_scaled_spread'])} (speedups: "
                      + ", ".join(f"{x['speedup']:.4g}" for x in spread["runs"] if x["speedup"])
                      + "; clock against the reference's: " + ", ".join(x["clock_vs_reference"] or "n/a"
                                                                        for x in spread["runs"])
                      + "; timed calls: " + ", ".join(str(x["n"]) for x in spread["runs"]) + ")"]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--workers-per-gpu", type=int, default=0,
                        help="evaluator workers sharing the GPU, timing takes turns (default 0: from the card and CPUs)")
    parser.add_argument("--sandbox", type=lambda v: v.split(","), default=["on"], metavar="on|off[,...]",
                        help="containment settings, each running the corpus once (on: as configured; off: none)")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: the CPU corpus and attacks, no timing, no spread")
    parser.add_argument("--spread-rel-se", default="", help="timing stops for the spread, comma-separated "
                                                             "(default: the config's)")
    parser.add_argument("--spread-repeats", type=int, default=5, help="separate evaluations per spread")
    parser.add_argument("--spread-only", action="store_true", help="the spread alone, without the corpus")
    parser.add_argument("--untimed", action="store_true", help="the corpus judged untimed (no spread): verdicts as timed "
                                                              "but for those only the clock gives")
    args = parser.parse_args()
    if set(args.sandbox) - set(SANDBOX_SETTINGS):
        parser.error(f"--sandbox takes {', '.join(SANDBOX_SETTINGS)}")
    import torch
    if args.device == "cuda" and not torch.cuda.is_available():
        print("eval_gpu_corpus: --device cuda needs a CUDA GPU", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    started = time.perf_counter()
    runs, spreads = {}, {}
    stops = [float(v) for v in args.spread_rel_se.split(",")] if args.spread_rel_se else [None]
    with tempfile.TemporaryDirectory(prefix="kz-eval-") as cache_dir:
        for i, setting in enumerate(args.sandbox):
            key = setting if args.sandbox.count(setting) == 1 else f"{setting} #{i + 1}"
            if not args.spread_only:
                runs[key] = asyncio.run(run_corpus(corpus(args.device), cache_dir, args.workers_per_gpu, setting,
                                                   args.device, args.untimed))
                for row in runs[key]["rows"]:
                    row["setting"] = key
            for rel_se in stops if args.device == "cuda" and not args.untimed else []:
                spread = asyncio.run(run_spread(cache_dir, args.spread_repeats, setting, rel_se))
                spreads[f"Setting {key}, timing_rel_se {spread['rel_se']}"] = spread
        if not args.spread_only:
            runs[ATTACKS] = asyncio.run(run_corpus(attacks(), cache_dir, args.workers_per_gpu, "on", args.device,
                                                   args.untimed))
            for row in runs[ATTACKS]["rows"]:
                row["setting"] = ATTACKS
    total = time.perf_counter() - started
    rows = [r for run in runs.values() for r in run["rows"]]
    settings = {k: {"wall_s": v["wall_s"], "start_s": v["start_s"]} for k, v in runs.items()}
    (args.out / "verdicts.json").write_text(json.dumps({"device": device, "wall_s": total, "settings": settings,
                                                        "rows": rows}, indent=1))
    (args.out / "spread.json").write_text(json.dumps(spreads, indent=1))
    text = markdown(runs, spreads, device, total)
    (args.out / "verdicts.md").write_text(text)
    print(text)
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
